"""The walk over a value and its schema that checks list types, metadata and CEL rules."""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import celpy
import lark
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from tests.schemas.cel_library import K8S_FUNCTIONS
from tests.schemas.defaulting import child_schema
from tests.schemas.json_schema import child_path, is_integer
from tests.schemas.metadata import object_metadata_errors
from tests.schemas.vocabulary import JSON, ROOT, Schema, UnsupportedCELError


class NoOld:
    def __repr__(self) -> str:
        return "<no old value>"


NO_OLD: Final = NoOld()


def walk(schema: Schema, value: JSON, old: JSON, path: str, *, object_root: bool) -> list[str]:
    """Check what JSON Schema cannot: CEL rules, list-type uniqueness, embedded metadata."""
    if value is None:
        return []
    errors: list[str] = []
    for rule in schema.get("x-kubernetes-validations") or ():
        errors += _rule_errors(rule, schema, value, old, path, object_root=object_root)
    if isinstance(value, Mapping):
        if schema.get("x-kubernetes-embedded-resource") and path:
            errors += object_metadata_errors(value, path)
        for name, child in value.items():
            sub = child_schema(schema, name)
            if sub is None:
                continue
            old_child = old.get(name, NO_OLD) if isinstance(old, Mapping) else NO_OLD
            errors += walk(
                sub,
                child,
                old_child,
                child_path(path, name),
                object_root=bool(sub.get("x-kubernetes-embedded-resource")),
            )
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        errors += _list_type_errors(schema, value, path)
        olds = _correlate(schema, value, old)
        for index, item in enumerate(value):
            items = schema["items"]
            errors += walk(
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
    olds: list[Any] = [NO_OLD] * len(value)
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(old, list):
        return olds
    if not schema.get("x-kubernetes-list-map-keys"):
        return olds
    by_key = {_map_key(schema, item): item for item in old}
    for index, item in enumerate(value):
        olds[index] = by_key.get(_map_key(schema, item), NO_OLD)
    return olds


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
_FUNCTIONS_ONLY: Final = frozenset({"sign"})
"""Library functions the API server declares as functions, never methods: `sign(q)` compiles
there, and `q.sign()` fails the CRD ("found no matching overload for 'sign'")."""
_GLOBAL_FUNCTIONS: Final = frozenset(
    {"has", "dyn", "size", "type", "matches", "quantity", "isQuantity"}
    | {"bool", "bytes", "double", "duration", "int", "string", "timestamp", "uint"}
    | _FUNCTIONS_ONLY
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
class CompiledRule:
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
    compiled = compile_rule(text)
    if compiled.uses_old_self and old is NO_OLD:
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
            message = compile_rule(expression).runner.evaluate(dict(activation))
        except CELEvalError:
            message = None
        if isinstance(message, str) and message.strip():
            return str(message)
    return str(rule.get("message") or f"failed rule: {rule['rule']}")


def _rule_path(path: str, field_path: Any) -> str:
    if not isinstance(field_path, str) or not field_path:
        return path or ROOT
    return (path + field_path) if path else field_path.lstrip(".")


def _cel_error(exc: CELEvalError) -> str:
    return str(exc.args[0]) if exc.args else repr(exc)


@functools.cache
def compile_rule(text: str) -> CompiledRule:
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
    return CompiledRule(_CEL_ENV.program(ast, functions=K8S_FUNCTIONS), uses_old)


def _unsupported_calls(ast: lark.Tree[Any]) -> Iterator[str]:
    methods = _STANDARD_FUNCTIONS | _MACROS | K8S_FUNCTIONS.keys()
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
            elif name in _FUNCTIONS_ONLY:
                yield f".{name}() (the API server has {name}(...), no method)"
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
    if is_integer(None, value) and schema.get("type") == "number":
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
