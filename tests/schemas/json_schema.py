"""An openAPIV3Schema as JSON Schema with Kubernetes structural semantics, and its errors."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import ipaddress
import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import jsonschema
from jsonschema.protocols import Validator

from tests.schemas.locate import k8s_registry, k8s_schema_dir
from tests.schemas.vocabulary import JSON, OBJECT_META, ROOT, Schema


@functools.cache
def core_validator(group: str, version: str, kind: str) -> Validator | None:
    stem = "-".join(part for part in (kind.lower(), group.split(".", 1)[0], version) if part)
    path = k8s_schema_dir() / f"{stem}.json"
    if not path.is_file():
        return None
    schema = json.loads(path.read_text("utf-8"))
    # File names drop all but the first label of the group, so confirm the exact GVK.
    gvk = {"group": group, "version": version, "kind": kind}
    if gvk not in schema.get("x-kubernetes-group-version-kind", []):
        return None
    return new_validator(schema)


def is_integer(_checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


_StrictValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", is_integer),
)
_FORMATS = jsonschema.FormatChecker(formats=())


def _format(name: str) -> Callable[[Callable[[Any], bool]], Callable[[Any], bool]]:
    return _FORMATS.checks(name)  # type: ignore[no-any-return]


def _int_range(bits: int) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        return not is_integer(None, value) or -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)

    return check


_format("int32")(_int_range(32))
_format("int64")(_int_range(64))

_DATE_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:[Zz]|[+-]\d{2}:\d{2})?"
)


@_format("date-time")
def _is_date_time(value: Any) -> bool:
    if not isinstance(value, str):
        return True
    if not _DATE_TIME.fullmatch(value):
        return False
    try:
        dt.datetime.fromisoformat(value.upper())
    except ValueError:
        return False
    return True


@_format("byte")
def _is_base64(value: Any) -> bool:
    if not isinstance(value, str):
        return True
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _parses(parse: Callable[[str], object]) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if not isinstance(value, str):
            return True
        try:
            parse(value)
        except ValueError:
            return False
        return True

    return check


_format("cidr")(_parses(lambda v: ipaddress.ip_network(v, strict=False)))
_format("ipv4")(_parses(ipaddress.IPv4Address))
_format("ipv6")(_parses(ipaddress.IPv6Address))
_format("uuid")(_parses(uuid.UUID))


def new_validator(schema: Schema) -> Validator:
    validator: Validator = _StrictValidator(
        schema, registry=k8s_registry(), format_checker=_FORMATS
    )
    return validator


class Pinned:
    """Hashes a mapping by identity and keeps it alive, so caches keyed on it stay valid."""

    __slots__ = ("value",)

    def __init__(self, value: Mapping[str, Any]) -> None:
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pinned) and other.value is self.value


@functools.cache
def compile_schema(schema: Pinned, *, root: bool) -> Validator:
    return new_validator(_to_json_schema(schema.value, structural=True, object_root=root))


_PASSTHROUGH: Final = (
    "enum",
    "format",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "multipleOf",
    "pattern",
    "required",
    "uniqueItems",
)
_INT_OR_STRING_ANY_OF: Final = [{"type": "integer"}, {"type": "string"}]


def _to_json_schema(node: Schema, *, structural: bool, object_root: bool = False) -> dict[str, Any]:
    """Convert one OpenAPI v3 (structural) schema node to JSON Schema 2020-12.

    ``structural`` is false inside allOf/anyOf/oneOf/not, which only constrain values: there,
    an object does not close itself to unknown fields. ``object_root`` marks a node that is a
    whole Kubernetes object (the schema root); embedded resources are detected here.
    """
    out = _value_keywords(node)
    out.update(_object_keywords(node, structural=structural, object_root=object_root))
    if "items" in node:
        out["items"] = _to_json_schema(node["items"], structural=structural)
    int_or_string = bool(node.get("x-kubernetes-int-or-string"))
    for key in ("allOf", "anyOf", "oneOf"):
        # controller-gen spells int-or-string as this anyOf too; "type" already says it.
        if key in node and not (int_or_string and node[key] == _INT_OR_STRING_ANY_OF):
            out[key] = [_to_json_schema(sub, structural=False) for sub in node[key]]
    if "not" in node:
        out["not"] = _to_json_schema(node["not"], structural=False)
    if node.get("nullable"):
        # if/else rather than anyOf keeps errors inside the value at their own paths.
        return {"if": {"type": "null"}, "else": out}
    return out


def _value_keywords(node: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {key: node[key] for key in _PASSTHROUGH if key in node}
    # OpenAPI v3.0 spells exclusive bounds as booleans beside minimum/maximum.
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if node.get(exclusive) is True and bound in node:
            out[exclusive] = out.pop(bound)
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    elif "type" in node:
        out["type"] = node["type"]
    return out


def _object_keywords(node: Schema, *, structural: bool, object_root: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    embedded = bool(node.get("x-kubernetes-embedded-resource"))
    whole_object = object_root or embedded
    properties = dict(node.get("properties") or {})
    if embedded:
        # Kubernetes requires non-empty apiVersion and kind in embedded resources.
        out["required"] = sorted({*node.get("required", ()), "apiVersion", "kind"})
        properties.setdefault("apiVersion", {"type": "string", "minLength": 1})
        properties.setdefault("kind", {"type": "string", "minLength": 1})
    if whole_object:
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties.setdefault("metadata", {"type": "object"})
    if properties:
        out["properties"] = {
            name: _property_schema(name, sub, structural=structural, whole_object=whole_object)
            for name, sub in properties.items()
        }
    extra = node.get("additionalProperties")
    if isinstance(extra, Mapping):
        out["additionalProperties"] = _to_json_schema(extra, structural=structural)
    elif isinstance(extra, bool):
        out["additionalProperties"] = extra
    elif structural and _is_object(node) and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def _property_schema(
    name: str, sub: Schema, *, structural: bool, whole_object: bool
) -> dict[str, Any]:
    if whole_object and name == "metadata":
        # The API server owns metadata: check it as ObjectMeta, plus any name limits declared.
        return {"allOf": [_to_json_schema(sub, structural=False), dict(OBJECT_META)]}
    return _to_json_schema(sub, structural=structural)


def _is_object(node: Schema) -> bool:
    return node.get("type") == "object" or "properties" in node


def schema_errors(validator: Validator, instance: JSON, prefix: str) -> list[str]:
    errors: list[str] = []
    for error in validator.iter_errors(instance):
        errors.extend(_describe(error, prefix))
    return errors


def _describe(error: jsonschema.ValidationError, prefix: str) -> list[str]:
    where = join_path(prefix, error.absolute_path)
    if error.validator == "additionalProperties" and error.validator_value is False:
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        known, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
        return [
            f"{child_path(where, key)}: unknown field"
            for key in error.instance
            if key not in known and not any(re.search(p, key) for p in patterns)
        ]
    if error.validator == "format":
        return [f"{where or ROOT}: {_brief(error.instance)} is not a valid {error.validator_value}"]
    message = error.message.replace(repr(error.instance), _brief(error.instance), 1)
    return [f"{where or ROOT}: {message}"]


def _brief(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_PLAIN_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")


def child_path(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{key}]"


def join_path(prefix: str, keys: Iterable[str | int]) -> str:
    path = prefix
    for key in keys:
        path = child_path(path, key)
    return path
