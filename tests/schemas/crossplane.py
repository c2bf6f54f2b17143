"""The schema Crossplane generates for a composite resource from its XRD."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, Final

from tests.schemas.json_schema import Pinned
from tests.schemas.locate import served_version, split_api_version
from tests.schemas.vocabulary import Schema


def check_gvk(obj: Mapping[str, Any], group: str, kind: str) -> tuple[str, list[str]]:
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or split_api_version(api_version)[0] != group:
        return "", [f"apiVersion: {api_version!r} is not in group {group!r}"]
    if obj.get("kind") != kind:
        return "", [f"kind: {obj.get('kind')!r} is not {kind!r}"]
    return split_api_version(api_version)[1], []


_XR_NAME_MAX_LENGTH: Final = 63  # Crossplane uses the XR name as a label value.


@functools.cache
def xr_schema(xrd: Pinned, version: str) -> dict[str, Any]:
    """The XR schema Crossplane generates from an XRD version (crossplane-runtime pkg/xcrd)."""
    spec = xrd.value["spec"]
    entry = served_version(xrd.value, version)
    source: Schema = (entry.get("schema") or {}).get("openAPIV3Schema") or {}
    legacy_default = str(xrd.value.get("apiVersion", "")).endswith("/v1")
    scope = spec.get("scope", "LegacyCluster" if legacy_default else "Namespaced")
    declared = source.get("properties") or {}

    name = {"type": "string", "maxLength": _XR_NAME_MAX_LENGTH}
    declared_name = ((declared.get("metadata") or {}).get("properties") or {}).get("name") or {}
    if declared_name.get("maxLength", _XR_NAME_MAX_LENGTH) < _XR_NAME_MAX_LENGTH:
        name = {**declared_name, "type": "string"}

    x_spec = declared.get("spec") or {}
    xr_spec: dict[str, Any] = {"type": "object", "properties": dict(x_spec.get("properties") or {})}
    _copy_keys(x_spec, xr_spec, ("required", "x-kubernetes-preserve-unknown-fields"))
    _copy_keys(x_spec, xr_spec, ("x-kubernetes-validations", "oneOf", "description"))
    policy = spec.get("defaultCompositionUpdatePolicy", "Automatic")
    xr_spec["properties"].update(_crossplane_spec_props(scope, policy))

    x_status = declared.get("status") or {}
    xr_status: dict[str, Any] = {
        "type": "object",
        "properties": dict(x_status.get("properties") or {}),
    }
    _copy_keys(x_status, xr_status, ("required", "x-kubernetes-validations", "oneOf"))
    xr_status["properties"].update(_crossplane_status_props(scope))

    schema: dict[str, Any] = {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object", "properties": {"name": name}},
            "spec": xr_spec,
            "status": xr_status,
        },
    }
    _copy_keys(source, schema, ("x-kubernetes-validations", "description"))
    return schema


def _copy_keys(source: Schema, target: dict[str, Any], keys: Iterable[str]) -> None:
    for key in keys:
        if key in source:
            target[key] = source[key]


def _object(properties: Mapping[str, Any], *required: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": dict(properties)}
    if required:
        schema["required"] = list(required)
    return schema


_STRING: Final[Mapping[str, str]] = {"type": "string"}
_STRING_MAP: Final = {"type": "object", "additionalProperties": _STRING}


def _crossplane_spec_props(scope: str, update_policy: str) -> dict[str, Any]:
    ref_props = {"apiVersion": _STRING, "name": _STRING, "kind": _STRING}
    if scope != "Namespaced":
        ref_props["namespace"] = _STRING
    props: dict[str, Any] = {
        "compositionRef": _object({"name": _STRING}, "name"),
        "compositionSelector": _object({"matchLabels": _STRING_MAP}, "matchLabels"),
        "compositionRevisionRef": _object({"name": _STRING}, "name"),
        "compositionRevisionSelector": _object({"matchLabels": _STRING_MAP}, "matchLabels"),
        "compositionUpdatePolicy": {
            "type": "string",
            "enum": ["Automatic", "Manual"],
            "default": update_policy,
        },
        "resourceRefs": {
            "type": "array",
            "items": _object(ref_props, "apiVersion", "kind"),
            "x-kubernetes-list-type": "atomic",
        },
    }
    if scope == "LegacyCluster":
        claim = dict.fromkeys(("apiVersion", "kind", "namespace", "name"), _STRING)
        props["claimRef"] = _object(claim, "apiVersion", "kind", "namespace", "name")
        secret = {"name": _STRING, "namespace": _STRING}
        props["writeConnectionSecretToRef"] = _object(secret, "name", "namespace")
        return props
    return {"crossplane": _object(props)}


def _crossplane_status_props(scope: str) -> dict[str, Any]:
    condition = {
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "message": _STRING,
        "reason": _STRING,
        "status": _STRING,
        "type": _STRING,
        "observedGeneration": {"type": "integer", "format": "int64"},
    }
    props: dict[str, Any] = {
        "conditions": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
            "items": _object(condition, "lastTransitionTime", "reason", "status", "type"),
        }
    }
    if scope == "LegacyCluster":
        published = {"lastPublishedTime": {"type": "string", "format": "date-time"}}
        props["connectionDetails"] = _object(published)
        props["claimConditionTypes"] = {
            "type": "array",
            "x-kubernetes-list-type": "set",
            "items": _STRING,
        }
    return props
