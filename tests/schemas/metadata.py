"""Object metadata: names, namespaces, label and annotation keys and values."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from tests.schemas.json_schema import child_path
from tests.schemas.locate import split_api_version

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_ANNOTATIONS_MAX_BYTES: Final = 256 * 1024


def _dns1123_subdomain(value: str) -> list[str]:
    errors = []
    if len(value) > 253:
        errors.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errors.append(
            "must be a lowercase RFC 1123 subdomain: lower case alphanumerics, '-' or '.', "
            "starting and ending with an alphanumeric"
        )
    return errors


def _dns1123_label(value: str) -> list[str]:
    errors = []
    if len(value) > 63:
        errors.append("must be no more than 63 characters")
    if not _DNS1123_LABEL.fullmatch(value):
        errors.append(
            "must be a lowercase RFC 1123 label: lower case alphanumerics or '-', "
            "starting and ending with an alphanumeric"
        )
    return errors


def _dns1035_label(value: str) -> list[str]:
    errors = []
    if len(value) > 63:
        errors.append("must be no more than 63 characters")
    if not _DNS1035_LABEL.fullmatch(value):
        errors.append(
            "must be an RFC 1035 label: lower case alphanumerics or '-', "
            "starting with a letter and ending with an alphanumeric"
        )
    return errors


def _path_segment(value: str) -> list[str]:
    if value in {".", ".."}:
        return [f"may not be {value!r}"]
    return [f"may not contain {c!r}" for c in "/%" if c in value]


# Kinds whose names Kubernetes validates differently from a DNS-1123 subdomain.
NAME_RULES: Final[Mapping[tuple[str, str], Callable[[str], list[str]]]] = {
    ("", "Namespace"): _dns1123_label,
    ("", "Service"): _dns1035_label,
    ("rbac.authorization.k8s.io", "Role"): _path_segment,
    ("rbac.authorization.k8s.io", "ClusterRole"): _path_segment,
    ("rbac.authorization.k8s.io", "RoleBinding"): _path_segment,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): _path_segment,
}


def _qualified_name(key: str) -> list[str]:
    prefix, slash, name = key.rpartition("/")
    errors = []
    if slash and not prefix:
        errors.append("prefix part must be non-empty")
    elif prefix:
        errors += [f"prefix part {m}" for m in _dns1123_subdomain(prefix)]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    elif not _QUALIFIED_NAME.fullmatch(name):
        errors.append(
            "name part must consist of alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return errors


def _label_value(value: Any) -> list[str]:
    if not isinstance(value, str):
        return ["must be a string"]
    errors = []
    if len(value) > 63:
        errors.append("must be no more than 63 characters")
    if not _LABEL_VALUE.fullmatch(value):
        errors.append(
            "must be empty or consist of alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return errors


def object_metadata_errors(obj: Mapping[str, Any], path: str) -> list[str]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return []
    where = child_path(path, "metadata")
    api_version = obj.get("apiVersion")
    group = split_api_version(api_version)[0] if isinstance(api_version, str) else ""
    name_rule = NAME_RULES.get((group, str(obj.get("kind"))), _dns1123_subdomain)
    checks: list[tuple[str, list[str]]] = []
    if isinstance(meta.get("name"), str):
        checks.append((child_path(where, "name"), name_rule(meta["name"])))
    if isinstance(meta.get("generateName"), str):
        # The server appends a random suffix, so a trailing '-' is fine.
        masked = re.sub(r"-$", "a", meta["generateName"])
        checks.append((child_path(where, "generateName"), name_rule(masked)))
    if isinstance(meta.get("namespace"), str):
        checks.append((child_path(where, "namespace"), _dns1123_label(meta["namespace"])))
    checks += _label_checks(meta.get("labels"), child_path(where, "labels"))
    checks += _annotation_checks(meta.get("annotations"), child_path(where, "annotations"))
    return [f"{field}: {problem}" for field, problems in checks for problem in problems]


def _label_checks(labels: Any, where: str) -> list[tuple[str, list[str]]]:
    if not isinstance(labels, Mapping):
        return []
    return [
        (
            child_path(where, key),
            [f"key {m}" for m in _qualified_name(key)]
            + [f"value {m}" for m in _label_value(value)],
        )
        for key, value in labels.items()
    ]


def _annotation_checks(annotations: Any, where: str) -> list[tuple[str, list[str]]]:
    if not isinstance(annotations, Mapping):
        return []
    checks = [
        (child_path(where, key), [f"key {m}" for m in _qualified_name(key)]) for key in annotations
    ]
    size = sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > _ANNOTATIONS_MAX_BYTES:
        checks.append((where, ["total size must be at most 256 KiB"]))
    return checks
