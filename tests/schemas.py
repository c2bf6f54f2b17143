"""Schema validation of Kubernetes manifests for the test suite.

This module owns the answer to "would the API server accept this object?" for the kinds the
function renders and for the documents the repository ships:

* core and built-in API kinds: the strict JSON schemas bundled with kubernetes-validate
  (Kubernetes 1.33, or the nearest version it ships), so unknown fields are errors;
* CRD kinds: the upstream CRDs vendored in ``schemas/upstream`` (one release of each), their
  ``openAPIV3Schema`` converted to JSON Schema with Kubernetes structural-schema semantics,
  then checked again by a walk that evaluates ``x-kubernetes-validations`` (CEL) rules;
* Crossplane composite resources: the CRD schema Crossplane generates from an XRD;
* object metadata: names, namespaces, label and annotation keys and values.

Deliberate choices:

* Unknown fields are errors, even where Kubernetes would prune them silently.
* A Python ``float`` is never an integer, even ``3.0``: the API server decodes ``3.0`` as a
  float and rejects it for ``type: integer``.
* ``format`` is checked for ``int32``/``int64`` (range: a Go client cannot decode more),
  ``date-time``, ``byte``, ``cidr``, ``ipv4``, ``ipv6`` and ``uuid``; other formats are ignored.
* Defaults are applied and non-nullable nulls pruned before validation, as the API server does,
  so CEL rules see defaulted values.
* Annotation values are free text (as in Kubernetes); only annotation keys are checked.
* Object names must be DNS-1123 subdomains, except where Kubernetes is stricter or looser for
  a kind (``_NAME_RULES``).

CEL support (cel-python plus the functions in ``_K8S_FUNCTIONS``):

* standard CEL: operators, ``in``, ``has()``, ``size()``, ``.all()``, ``.exists()``,
  ``.exists_one()``, ``.map()`` and ``.filter()`` (two-argument forms), ``contains``,
  ``startsWith``, ``endsWith``, ``matches``, conversions, timestamp and duration accessors;
* Kubernetes strings library: ``lowerAscii``, ``upperAscii``, ``trim``, ``split``, ``join``,
  ``replace``, ``indexOf``, ``lastIndexOf``, ``substring``, ``charAt``;
* Kubernetes lists library: ``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf``;
* Kubernetes regex library: ``find``, ``findAll``;
* Kubernetes quantity library: ``isQuantity``, ``quantity`` and the methods ``isLessThan``,
  ``isGreaterThan``, ``compareTo``, ``add``, ``sub``, ``asInteger``, ``asApproximateFloat``,
  ``sign``, ``isInteger``.

Anything else (``url``, ``ip``, ``cidr``, ``format``, ``semver``, ``sets.*``, optional types and
``optionalOldSelf``, two-variable comprehensions, ``cel.bind``, ...) raises
``UnsupportedCELError`` naming the rule when the rule would be evaluated: a rule this module
cannot evaluate never passes.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime as dt
import functools
import importlib.resources
import ipaddress
import itertools
import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Final

import celpy
import jsonschema
import lark
import re2
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError
from jsonschema.protocols import Validator
from referencing import Registry, Resource

__all__ = [
    "UnsupportedCELError",
    "crd_schema",
    "validate",
    "validate_against",
    "validate_crd_object",
    "validate_xrd_object",
]

JSON = Any
Schema = Mapping[str, Any]

# Cozystack v1.6.2 installs these releases; the newer folders are there for comparison only.
_KUBERNETES_VERSION: Final = (1, 33)

_DEFS_URI: Final = "https://kubernetes.io/api/_definitions.json"
_OBJECT_META: Final[Mapping[str, str]] = {
    "$ref": f"{_DEFS_URI}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
}
_ROOT = "<root>"


class UnsupportedCELError(Exception):
    """A CEL rule uses something this module cannot evaluate faithfully."""

    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(f"cannot evaluate CEL rule {rule!r}: {reason}")
        self.rule = rule
        self.reason = reason


# --------------------------------------------------------------------------- public API


def validate(manifest: Mapping[str, Any]) -> list[str]:
    """Validate a Kubernetes object against the schema for its apiVersion and kind."""
    if not isinstance(manifest, Mapping):
        return [f"{_ROOT}: a Kubernetes object must be a mapping, not {type(manifest).__name__}"]
    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return [f"{_ROOT}: apiVersion and kind must be strings"]
    group, version = _split_api_version(api_version)
    core = _core_validator(group, version, kind)
    if core is not None:
        return _schema_errors(core, manifest, "") + _object_metadata_errors(manifest, "")
    try:
        schema = app_schema(kind) if group == COZYSTACK_APPS else crd_schema(api_version, kind)
    except LookupError as exc:
        return [f"{_ROOT}: no schema for apiVersion={api_version} kind={kind}: {exc.args[0]}"]
    return validate_against(schema, manifest)


COZYSTACK_APPS = "apps.cozystack.io"


@functools.cache
def app_schema(kind: str) -> dict[str, Any]:
    """A Cozystack application's object schema: its ApplicationDefinition's values as `spec`.

    Cozystack serves `apps.cozystack.io/v1alpha1` kinds from its own API server, with no CRD;
    the ApplicationDefinition's `openAPISchema` (the chart's values.schema.json) is what it
    validates `spec` against.

    Raises:
        LookupError: no ApplicationDefinition defines that kind.
    """
    for path in sorted((crds_root() / "cozystack" / "applicationdefinitions").glob("*.yaml")):
        for doc in _yaml_documents(path):
            application = (doc or {}).get("spec", {}).get("application", {})
            if application.get("kind") == kind:
                values = json.loads(application["openAPISchema"])
                status = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                return {"type": "object", "properties": {"spec": values, "status": status}}
    raise LookupError(f"no Cozystack ApplicationDefinition defines kind {kind}")


def crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    """Return the served ``openAPIV3Schema`` for a CRD kind from the vendored CRDs.

    Raises:
        LookupError: no CRD serves that version of that kind, or the choice is ambiguous.
    """
    group, version = _split_api_version(api_version)
    crd = _crd_for(group, kind, version)
    schema: dict[str, Any] = _served_version(crd, version)["schema"]["openAPIV3Schema"]
    return schema


def validate_against(schema: Schema, obj: JSON, *, old: JSON = None, path: str = "") -> list[str]:
    """Validate ``obj`` against an ``openAPIV3Schema``, including its CEL rules.

    ``path`` is where ``obj`` sits; the empty path means ``obj`` is a whole Kubernetes object,
    so ``apiVersion``, ``kind`` and ``metadata`` are implicitly allowed and metadata is checked.
    ``old`` is the previous version of the object, for transition rules (``oldSelf``).
    Schemas are cached by identity, so do not mutate a schema after first use.
    """
    root = path == ""
    compiled = _compile(_Pinned(schema), root=root)
    current = _default(copy.deepcopy(obj), schema)
    previous = _NO_OLD if old is None else _default(copy.deepcopy(old), schema)
    errors = _schema_errors(compiled, current, path)
    errors += _walk(schema, current, previous, path, object_root=root)
    if root and isinstance(current, Mapping):
        errors += _object_metadata_errors(current, path)
    return errors


def validate_xrd_object(
    xrd: Mapping[str, Any], obj: Mapping[str, Any], *, old: Mapping[str, Any] | None = None
) -> list[str]:
    """Validate a composite resource against the CRD Crossplane generates from ``xrd``."""
    spec = xrd["spec"]
    version, errors = _check_gvk(obj, spec["group"], spec["names"]["kind"])
    if errors:
        return errors
    try:
        schema = _xr_schema(_Pinned(xrd), version)
    except LookupError as exc:
        return [f"apiVersion: {exc.args[0]}"]
    return validate_against(schema, obj, old=old)


def validate_crd_object(
    crd: Mapping[str, Any], obj: Mapping[str, Any], *, old: Mapping[str, Any] | None = None
) -> list[str]:
    """Validate an object against a given apiextensions.k8s.io/v1 CRD document."""
    spec = crd["spec"]
    version, errors = _check_gvk(obj, spec["group"], spec["names"]["kind"])
    if errors:
        return errors
    try:
        served = _served_version(crd, version)
    except LookupError as exc:
        return [f"apiVersion: {exc.args[0]}"]
    return validate_against(served["schema"]["openAPIV3Schema"], obj, old=old)


# --------------------------------------------------------------------------- locating schemas


def crds_root() -> Path:
    return Path(__file__).resolve().parents[1] / "schemas" / "upstream"


def _split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


@functools.cache
def _yaml_documents(path: Path) -> tuple[Any, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open(encoding="utf-8") as stream:
        return tuple(doc for doc in yaml.load_all(stream, Loader=loader) if doc)


def _served_version(crd: Mapping[str, Any], version: str) -> Mapping[str, Any]:
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version and entry.get("served"):
            return entry  # type: ignore[no-any-return]
    raise LookupError(f"{crd['spec']['names']['kind']} does not serve version {version!r}")


@functools.cache
def _crd_for(group: str, kind: str, version: str) -> Mapping[str, Any]:
    root = crds_root()
    # Upstream CRD files are named <group>_<plural>.yaml; only those can hold the group's CRDs.
    found = [
        (path, doc)
        for path in sorted(root.rglob(f"{group}_*.yaml"))
        for doc in _yaml_documents(path)
        if _is_crd_for(doc, group, kind, version)
    ]
    if not found:
        api_version = f"{group}/{version}" if group else version
        raise LookupError(f"no CRD under {root} serves {api_version} {kind}")
    if len(found) > 1:
        places = ", ".join(str(path.relative_to(root)) for path, _ in found)
        raise LookupError(f"several vendored CRDs define it; keep one release: {places}")
    return found[0][1]


def _is_crd_for(doc: Any, group: str, kind: str, version: str) -> bool:
    if not isinstance(doc, Mapping) or doc.get("kind") != "CustomResourceDefinition":
        return False
    spec = doc["spec"]
    return (
        spec["group"] == group
        and spec["names"]["kind"] == kind
        and any(v["name"] == version and v.get("served") for v in spec["versions"])
    )


@functools.cache
def _k8s_schema_dir() -> Path:
    base = Path(str(importlib.resources.files("kubernetes_validate"))) / "kubernetes-json-schema"
    shipped: dict[tuple[int, int], Path] = {}
    for entry in base.iterdir():
        match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+-local-strict", entry.name)
        if match:
            shipped[(int(match[1]), int(match[2]))] = entry
    # Prefer the newest release not newer than the target; else the oldest shipped.
    older = [v for v in shipped if v <= _KUBERNETES_VERSION]
    return shipped[max(older)] if older else shipped[min(shipped)]


@functools.cache
def _k8s_registry() -> Registry[Any]:
    definitions = json.loads((_k8s_schema_dir() / "_definitions.json").read_text("utf-8"))
    registry: Registry[Any] = Registry().with_resource(
        _DEFS_URI, Resource.from_contents(definitions)
    )
    return registry


@functools.cache
def _core_validator(group: str, version: str, kind: str) -> Validator | None:
    stem = "-".join(part for part in (kind.lower(), group.split(".", 1)[0], version) if part)
    path = _k8s_schema_dir() / f"{stem}.json"
    if not path.is_file():
        return None
    schema = json.loads(path.read_text("utf-8"))
    # File names drop all but the first label of the group, so confirm the exact GVK.
    gvk = {"group": group, "version": version, "kind": kind}
    if gvk not in schema.get("x-kubernetes-group-version-kind", []):
        return None
    return _new_validator(schema)


# --------------------------------------------------------------------------- JSON Schema


def _is_integer(_checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


_StrictValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)
_FORMATS = jsonschema.FormatChecker(formats=())


def _format(name: str) -> Callable[[Callable[[Any], bool]], Callable[[Any], bool]]:
    return _FORMATS.checks(name)  # type: ignore[no-any-return]


def _int_range(bits: int) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        return not _is_integer(None, value) or -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)

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


def _new_validator(schema: Schema) -> Validator:
    validator: Validator = _StrictValidator(
        schema, registry=_k8s_registry(), format_checker=_FORMATS
    )
    return validator


class _Pinned:
    """Hashes a mapping by identity and keeps it alive, so caches keyed on it stay valid."""

    __slots__ = ("value",)

    def __init__(self, value: Mapping[str, Any]) -> None:
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Pinned) and other.value is self.value


@functools.cache
def _compile(schema: _Pinned, *, root: bool) -> Validator:
    return _new_validator(_to_json_schema(schema.value, structural=True, object_root=root))


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
        return {"allOf": [_to_json_schema(sub, structural=False), dict(_OBJECT_META)]}
    return _to_json_schema(sub, structural=structural)


def _is_object(node: Schema) -> bool:
    return node.get("type") == "object" or "properties" in node


def _schema_errors(validator: Validator, instance: JSON, prefix: str) -> list[str]:
    errors: list[str] = []
    for error in validator.iter_errors(instance):
        errors.extend(_describe(error, prefix))
    return errors


def _describe(error: jsonschema.ValidationError, prefix: str) -> list[str]:
    where = _join_path(prefix, error.absolute_path)
    if error.validator == "additionalProperties" and error.validator_value is False:
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        known, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
        return [
            f"{_join(where, key)}: unknown field"
            for key in error.instance
            if key not in known and not any(re.search(p, key) for p in patterns)
        ]
    if error.validator == "format":
        return [
            f"{where or _ROOT}: {_brief(error.instance)} is not a valid {error.validator_value}"
        ]
    message = error.message.replace(repr(error.instance), _brief(error.instance), 1)
    return [f"{where or _ROOT}: {message}"]


def _brief(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_PLAIN_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{key}]"


def _join_path(prefix: str, keys: Iterable[str | int]) -> str:
    path = prefix
    for key in keys:
        path = _join(path, key)
    return path


# --------------------------------------------------------------------------- defaulting


def _default(value: JSON, schema: Schema) -> JSON:
    """Apply schema defaults and prune non-nullable nulls in place, as the API server does."""
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for name, sub in properties.items():
            if name in value and value[name] is None and not sub.get("nullable"):
                if "default" in sub:
                    value[name] = copy.deepcopy(sub["default"])
                else:
                    del value[name]
            elif name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
        for name, child in value.items():
            sub = _child_schema(schema, name)
            if sub is not None:
                _default(child, sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            _default(item, schema["items"])
    return value


def _child_schema(schema: Schema, name: str) -> Schema | None:
    properties = schema.get("properties") or {}
    if name in properties:
        sub: Schema = properties[name]
        return sub
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


# --------------------------------------------------------------------------- schema walk


class _NoOld:
    def __repr__(self) -> str:
        return "<no old value>"


_NO_OLD: Final = _NoOld()


def _walk(schema: Schema, value: JSON, old: JSON, path: str, *, object_root: bool) -> list[str]:
    """Check what JSON Schema cannot: CEL rules, list-type uniqueness, embedded metadata."""
    if value is None:
        return []
    errors: list[str] = []
    for rule in schema.get("x-kubernetes-validations") or ():
        errors += _rule_errors(rule, schema, value, old, path, object_root=object_root)
    if isinstance(value, Mapping):
        if schema.get("x-kubernetes-embedded-resource") and path:
            errors += _object_metadata_errors(value, path)
        for name, child in value.items():
            sub = _child_schema(schema, name)
            if sub is None:
                continue
            old_child = old.get(name, _NO_OLD) if isinstance(old, Mapping) else _NO_OLD
            errors += _walk(
                sub,
                child,
                old_child,
                _join(path, name),
                object_root=bool(sub.get("x-kubernetes-embedded-resource")),
            )
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        errors += _list_type_errors(schema, value, path)
        olds = _correlate(schema, value, old)
        for index, item in enumerate(value):
            items = schema["items"]
            errors += _walk(
                items,
                item,
                olds[index],
                f"{path}[{index}]",
                object_root=bool(items.get("x-kubernetes-embedded-resource")),
            )
    return errors


def _map_key(schema: Schema, item: Any) -> tuple[str, ...] | None:
    if not isinstance(item, Mapping):
        return None
    return tuple(
        json.dumps(item.get(k), sort_keys=True, default=str)
        for k in schema["x-kubernetes-list-map-keys"]
    )


def _list_type_errors(schema: Schema, value: list[Any], path: str) -> list[str]:
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        keys: list[Any] = [json.dumps(item, sort_keys=True, default=str) for item in value]
    elif list_type == "map" and schema.get("x-kubernetes-list-map-keys"):
        keys = [_map_key(schema, item) for item in value]
    else:
        return []
    seen: set[Any] = set()
    errors = []
    for index, key in enumerate(keys):
        if key is not None and key in seen:
            errors.append(f"{path}[{index}]: duplicate entry in a list of type {list_type}")
        seen.add(key)
    return errors


def _correlate(schema: Schema, value: list[Any], old: JSON) -> list[Any]:
    # Kubernetes correlates list items with their old versions only in map lists, by key.
    olds: list[Any] = [_NO_OLD] * len(value)
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(old, list):
        return olds
    if not schema.get("x-kubernetes-list-map-keys"):
        return olds
    by_key = {_map_key(schema, item): item for item in old}
    for index, item in enumerate(value):
        olds[index] = by_key.get(_map_key(schema, item), _NO_OLD)
    return olds


# --------------------------------------------------------------------------- metadata


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
_NAME_RULES: Final[Mapping[tuple[str, str], Callable[[str], list[str]]]] = {
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


def _object_metadata_errors(obj: Mapping[str, Any], path: str) -> list[str]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return []
    where = _join(path, "metadata")
    api_version = obj.get("apiVersion")
    group = _split_api_version(api_version)[0] if isinstance(api_version, str) else ""
    name_rule = _NAME_RULES.get((group, str(obj.get("kind"))), _dns1123_subdomain)
    checks: list[tuple[str, list[str]]] = []
    if isinstance(meta.get("name"), str):
        checks.append((_join(where, "name"), name_rule(meta["name"])))
    if isinstance(meta.get("generateName"), str):
        # The server appends a random suffix, so a trailing '-' is fine.
        masked = re.sub(r"-$", "a", meta["generateName"])
        checks.append((_join(where, "generateName"), name_rule(masked)))
    if isinstance(meta.get("namespace"), str):
        checks.append((_join(where, "namespace"), _dns1123_label(meta["namespace"])))
    checks += _label_checks(meta.get("labels"), _join(where, "labels"))
    checks += _annotation_checks(meta.get("annotations"), _join(where, "annotations"))
    return [f"{field}: {problem}" for field, problems in checks for problem in problems]


def _label_checks(labels: Any, where: str) -> list[tuple[str, list[str]]]:
    if not isinstance(labels, Mapping):
        return []
    return [
        (
            _join(where, key),
            [f"key {m}" for m in _qualified_name(key)]
            + [f"value {m}" for m in _label_value(value)],
        )
        for key, value in labels.items()
    ]


def _annotation_checks(annotations: Any, where: str) -> list[tuple[str, list[str]]]:
    if not isinstance(annotations, Mapping):
        return []
    checks = [
        (_join(where, key), [f"key {m}" for m in _qualified_name(key)]) for key in annotations
    ]
    size = sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > _ANNOTATIONS_MAX_BYTES:
        checks.append((where, ["total size must be at most 256 KiB"]))
    return checks


# --------------------------------------------------------------------------- CEL rules


_CEL_ENV: Final = celpy.Environment()
_MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})
_STANDARD_FUNCTIONS: Final = frozenset(
    {
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "type",
        "bool",
        "bytes",
        "double",
        "duration",
        "int",
        "string",
        "timestamp",
        "uint",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getFullYear",
        "getMonth",
        "getHours",
        "getMilliseconds",
        "getMinutes",
        "getSeconds",
        "min",  # cel-python treats list.min() as a built-in; Kubernetes' lists library has it.
    }
)
_GLOBAL_FUNCTIONS: Final = frozenset(
    {"has", "dyn", "size", "type", "matches", "quantity", "isQuantity"}
    | {"bool", "bytes", "double", "duration", "int", "string", "timestamp", "uint"}
)
_CEL_RESERVED: Final = frozenset(
    {
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    }
)
_CEL_ESCAPES: Final = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}
_CEL_IDENT = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")


@dataclass(frozen=True)
class _Rule:
    runner: celpy.Runner
    uses_old_self: bool


def _rule_errors(
    rule: Mapping[str, Any],
    schema: Schema,
    value: JSON,
    old: JSON,
    path: str,
    *,
    object_root: bool,
) -> list[str]:
    text: str = rule["rule"]
    compiled = _compile_rule(text)
    if compiled.uses_old_self and old is _NO_OLD:
        return []  # Kubernetes skips transition rules when there is no old value.
    if rule.get("optionalOldSelf"):
        raise UnsupportedCELError(text, "optionalOldSelf needs CEL optional types")
    activation: dict[str, Any] = {"self": _to_cel(value, schema, object_root=object_root)}
    if compiled.uses_old_self:
        activation["oldSelf"] = _to_cel(old, schema, object_root=object_root)
    where = _rule_path(path, rule.get("fieldPath"))
    try:
        result = compiled.runner.evaluate(activation)
    except CELEvalError as exc:
        return [f"{where}: CEL rule {text!r} could not be evaluated: {_cel_error(exc)}"]
    if not isinstance(result, celtypes.BoolType):
        return [f"{where}: CEL rule {text!r} returned {type(result).__name__}, not a bool"]
    if result:
        return []
    return [f"{where}: {_rule_message(rule, activation)}"]


def _rule_message(rule: Mapping[str, Any], activation: Mapping[str, Any]) -> str:
    expression = rule.get("messageExpression")
    if expression:
        try:
            message = _compile_rule(expression).runner.evaluate(dict(activation))
        except CELEvalError:
            message = None
        if isinstance(message, str) and message.strip():
            return str(message)
    return str(rule.get("message") or f"failed rule: {rule['rule']}")


def _rule_path(path: str, field_path: Any) -> str:
    if not isinstance(field_path, str) or not field_path:
        return path or _ROOT
    return (path + field_path) if path else field_path.lstrip(".")


def _cel_error(exc: CELEvalError) -> str:
    return str(exc.args[0]) if exc.args else repr(exc)


@functools.cache
def _compile_rule(text: str) -> _Rule:
    try:
        ast = _CEL_ENV.compile(text)
    except CELParseError as exc:
        raise UnsupportedCELError(text, f"cel-python cannot parse it: {exc}") from exc
    problems = sorted(set(_unsupported_calls(ast)))
    if problems:
        raise UnsupportedCELError(text, f"unsupported: {', '.join(problems)}")
    uses_old = any(
        node.data == "ident" and node.children[0] == "oldSelf" for node in ast.iter_subtrees()
    )
    return _Rule(_CEL_ENV.program(ast, functions=_K8S_FUNCTIONS), uses_old)


def _unsupported_calls(ast: lark.Tree[Any]) -> Iterator[str]:
    methods = _STANDARD_FUNCTIONS | _MACROS | _K8S_FUNCTIONS.keys()
    for node in ast.iter_subtrees():
        if node.data == "member_dot_arg":
            receiver, name_token, *rest = node.children
            name = str(name_token)
            args = rest[0].children if rest and isinstance(rest[0], lark.Tree) else []
            namespace = _bare_ident(receiver)
            if namespace in {"sets", "math", "strings", "base64", "optional", "cel", "lists"}:
                yield f"{namespace}.{name}()"
            elif name in _MACROS and len(args) != 2:
                yield f"{name}() with {len(args)} arguments"
            elif name not in methods:
                yield f".{name}()"
        elif node.data == "ident_arg":
            name = str(node.children[0])
            if name not in _GLOBAL_FUNCTIONS:
                yield f"{name}()"
        elif node.data in {"dot_ident_arg", "dot_ident"}:
            yield "leading-dot names"


def _bare_ident(tree: Any) -> str | None:
    while isinstance(tree, lark.Tree) and tree.data in {"member", "primary"}:
        if len(tree.children) != 1:
            return None
        tree = tree.children[0]
    if isinstance(tree, lark.Tree) and tree.data == "ident":
        return str(tree.children[0])
    return None


def _cel_field_name(name: str) -> str | None:
    """Kubernetes' escaping of property names for CEL; None when a name is inaccessible."""
    if not name or name[0].isdigit():
        return None
    if name in _CEL_RESERVED:
        return f"__{name}__"
    escaped = re.sub(r"__|[./-]", lambda m: _CEL_ESCAPES[m.group(0)], name)
    return escaped if _CEL_IDENT.fullmatch(escaped) else None


def _to_cel(value: JSON, schema: Schema | None, *, object_root: bool = False) -> Any:
    """Convert a JSON value to CEL using the schema's types, as Kubernetes does."""
    if value is None or schema is None or schema.get("x-kubernetes-int-or-string"):
        return json_to_cel(value)
    if isinstance(value, Mapping):
        return _object_to_cel(value, schema, object_root=object_root)
    if isinstance(value, list):
        items = schema.get("items")
        return celtypes.ListType([_to_cel(item, items) for item in value])
    if isinstance(value, str):
        return _string_to_cel(value, schema.get("format"))
    if _is_integer(None, value) and schema.get("type") == "number":
        return celtypes.DoubleType(value)
    return json_to_cel(value)


def _object_to_cel(value: Mapping[str, Any], schema: Schema, *, object_root: bool) -> Any:
    properties = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping) and not properties:
        return celtypes.MapType(
            {celtypes.StringType(k): _to_cel(v, extra) for k, v in value.items()}
        )
    fields = {}
    for name, child in value.items():
        field = _cel_field_name(name)
        if field is None:
            continue
        if object_root and name == "metadata" and isinstance(child, Mapping):
            # Rules on a whole object see only metadata.name and metadata.generateName.
            child = {k: child[k] for k in ("name", "generateName") if k in child}  # noqa: PLW2901
        sub = properties.get(name)
        fields[celtypes.StringType(field)] = _to_cel(child, sub)
    return celtypes.MapType(fields)


def _string_to_cel(value: str, fmt: Any) -> Any:
    try:
        if fmt == "date-time":
            return celtypes.TimestampType(value)
        if fmt == "duration":
            return celtypes.DurationType(value)
        if fmt == "byte":
            return celtypes.BytesType(base64.b64decode(value, validate=True))
    except (ValueError, TypeError, binascii.Error):
        pass  # The format check reports the bad value; CEL sees the plain string.
    return celtypes.StringType(value)


# --------------------------------------------------------------------------- CEL library


def _require(value: Any, kind: type | tuple[type, ...]) -> None:
    if not isinstance(value, kind):
        # cel-python turns TypeError into CEL's "no such overload".
        raise TypeError(f"no such overload for {type(value).__name__}")


def _ascii_case(convert: Callable[[str], str]) -> Callable[[Any], Any]:
    def apply(text: Any) -> Any:
        _require(text, str)
        return celtypes.StringType("".join(convert(c) if c.isascii() else c for c in text))

    return apply


def _trim(text: Any) -> Any:
    _require(text, str)
    return celtypes.StringType(text.strip())


def _split(text: Any, separator: Any, limit: Any = -1) -> Any:
    _require(text, str)
    _require(separator, str)
    if limit == 0:
        return celtypes.ListType([])
    if separator == "":
        parts = list(text)
        if 0 < limit < len(parts):
            parts = [*parts[: limit - 1], "".join(parts[limit - 1 :])]
    else:
        parts = text.split(separator, limit - 1 if limit > 0 else -1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _join_strings(items: Any, separator: Any = "") -> Any:
    _require(items, list)
    _require(separator, str)
    for item in items:
        _require(item, str)
    return celtypes.StringType(separator.join(items))


def _replace(text: Any, old: Any, new: Any, limit: Any = -1) -> Any:
    for arg in (text, old, new):
        _require(arg, str)
    return celtypes.StringType(text.replace(old, new, int(limit)))


def _index_of(target: Any, needle: Any, offset: Any = 0) -> Any:
    if isinstance(target, list):
        found = [i for i, item in enumerate(target) if item == needle]
        return celtypes.IntType(found[0] if found else -1)
    _require(target, str)
    _require(needle, str)
    if not 0 <= offset <= len(target):
        return CELEvalError(f"index out of range: {offset}")
    return celtypes.IntType(target.find(needle, int(offset)))


def _last_index_of(target: Any, needle: Any, offset: Any = None) -> Any:
    if isinstance(target, list):
        found = [i for i, item in enumerate(target) if item == needle]
        return celtypes.IntType(found[-1] if found else -1)
    _require(target, str)
    _require(needle, str)
    if offset is None:
        return celtypes.IntType(target.rfind(needle))
    if not 0 <= offset <= len(target):
        return CELEvalError(f"index out of range: {offset}")
    return celtypes.IntType(target.rfind(needle, 0, int(offset) + len(needle)))


def _substring(text: Any, start: Any, end: Any = None) -> Any:
    _require(text, str)
    stop = len(text) if end is None else int(end)
    if not 0 <= start <= stop <= len(text):
        return CELEvalError(f"substring out of range: [{start}, {stop})")
    return celtypes.StringType(text[int(start) : stop])


def _char_at(text: Any, index: Any) -> Any:
    _require(text, str)
    if not 0 <= index <= len(text):
        return CELEvalError(f"index out of range: {index}")
    return celtypes.StringType(text[int(index) : int(index) + 1])


def _find(text: Any, pattern: Any) -> Any:
    _require(text, str)
    _require(pattern, str)
    match = re2.search(pattern, text)
    return celtypes.StringType(match.group(0) if match else "")


def _find_all(text: Any, pattern: Any, limit: Any = -1) -> Any:
    _require(text, str)
    _require(pattern, str)
    found = [m.group(0) for m in re2.finditer(pattern, text)]
    if limit >= 0:
        found = found[: int(limit)]
    return celtypes.ListType([celtypes.StringType(s) for s in found])


def _is_sorted(items: Any) -> Any:
    _require(items, list)
    return celtypes.BoolType(all(a <= b for a, b in itertools.pairwise(items)))


def _sum(items: Any) -> Any:
    _require(items, list)
    total: Any = celtypes.IntType(0)
    for index, item in enumerate(items):
        total = item if index == 0 else total + item
    return total


def _max(items: Any) -> Any:
    _require(items, list)
    if not items:
        return CELEvalError("max of an empty list")
    return max(items)


_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?"
)
_QUANTITY_SCALE: Final[Mapping[str, Decimal]] = {
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{
        s: Decimal(10) ** e
        for s, e in zip("numkMGTPE", (-9, -6, -3, 3, 6, 9, 12, 15, 18), strict=True)
    },
}


@dataclass(frozen=True, order=True)
class _Quantity:
    value: Decimal


def _parse_quantity(text: str) -> _Quantity | None:
    match = _QUANTITY.fullmatch(text)
    if not match:
        return None
    suffix = match["suffix"] or ""
    if suffix not in _QUANTITY_SCALE and suffix:  # an exponent; "E" and "Ei" are suffixes
        scale = Decimal(10) ** int(suffix[1:])
    else:
        scale = _QUANTITY_SCALE.get(suffix, Decimal(1))
    try:
        return _Quantity(Decimal(match["number"]) * scale)
    except InvalidOperation:
        return None


def _quantity(text: Any) -> Any:
    _require(text, str)
    parsed = _parse_quantity(text)
    return parsed if parsed is not None else CELEvalError(f"invalid quantity: {text!r}")


def _is_quantity(text: Any) -> Any:
    _require(text, str)
    return celtypes.BoolType(_parse_quantity(text) is not None)


def _quantity_operand(value: Any) -> Decimal:
    if isinstance(value, _Quantity):
        return value.value
    _require(value, int)
    return Decimal(int(value))


def _quantity_method(
    apply: Callable[[Decimal, Decimal], Any],
) -> Callable[[Any, Any], Any]:
    def method(this: Any, other: Any) -> Any:
        _require(this, _Quantity)
        return apply(this.value, _quantity_operand(other))

    return method


def _quantity_unary(apply: Callable[[Decimal], Any]) -> Callable[[Any], Any]:
    def method(this: Any) -> Any:
        _require(this, _Quantity)
        return apply(this.value)

    return method


def _as_integer(value: Decimal) -> Any:
    if value != value.to_integral_value() or not -(2**63) <= value < 2**63:
        return CELEvalError("quantity is not an int64 integer")
    return celtypes.IntType(int(value))


def _compare(a: Decimal, b: Decimal) -> Any:
    return celtypes.IntType((a > b) - (a < b))


_K8S_FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "lowerAscii": _ascii_case(str.lower),
    "upperAscii": _ascii_case(str.upper),
    "trim": _trim,
    "split": _split,
    "join": _join_strings,
    "replace": _replace,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "substring": _substring,
    "charAt": _char_at,
    "find": _find,
    "findAll": _find_all,
    "isSorted": _is_sorted,
    "sum": _sum,
    "max": _max,
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "isLessThan": _quantity_method(lambda a, b: celtypes.BoolType(a < b)),
    "isGreaterThan": _quantity_method(lambda a, b: celtypes.BoolType(a > b)),
    "compareTo": _quantity_method(_compare),
    "add": _quantity_method(lambda a, b: _Quantity(a + b)),
    "sub": _quantity_method(lambda a, b: _Quantity(a - b)),
    "asInteger": _quantity_unary(_as_integer),
    "asApproximateFloat": _quantity_unary(lambda v: celtypes.DoubleType(float(v))),
    "sign": _quantity_unary(lambda v: celtypes.IntType((v > 0) - (v < 0))),
    # Quantity.AsInt64: whole, and within int64.
    "isInteger": _quantity_unary(
        lambda v: celtypes.BoolType(v == v.to_integral_value() and -(2**63) <= v < 2**63)
    ),
}


# --------------------------------------------------------------------------- Crossplane XRs


def _check_gvk(obj: Mapping[str, Any], group: str, kind: str) -> tuple[str, list[str]]:
    api_version = obj.get("apiVersion")
    if not isinstance(api_version, str) or _split_api_version(api_version)[0] != group:
        return "", [f"apiVersion: {api_version!r} is not in group {group!r}"]
    if obj.get("kind") != kind:
        return "", [f"kind: {obj.get('kind')!r} is not {kind!r}"]
    return _split_api_version(api_version)[1], []


_XR_NAME_MAX_LENGTH: Final = 63  # Crossplane uses the XR name as a label value.


@functools.cache
def _xr_schema(xrd: _Pinned, version: str) -> dict[str, Any]:
    """The XR schema Crossplane generates from an XRD version (crossplane-runtime pkg/xcrd)."""
    spec = xrd.value["spec"]
    entry = _served_version(xrd.value, version)
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
