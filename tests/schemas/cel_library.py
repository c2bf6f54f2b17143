"""The Kubernetes CEL libraries cel-python lacks: strings, lists, regex and quantities."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

import re2
from celpy import celtypes
from celpy.evaluation import CELEvalError

from tests.schemas.quantity import binary_fraction, parse_quantity


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


@dataclass(frozen=True, order=True)
class _Quantity:
    value: Decimal
    scaled: bool = False
    """Kept as a scaled decimal by the API server (quantity.binary_fraction): not an integer."""


def _parse_quantity(text: str) -> _Quantity | None:
    value = parse_quantity(text)
    return None if value is None else _Quantity(value, binary_fraction(text))


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


def _int64(this: Any) -> bool:
    """Quantity.AsInt64's verdict: whole, within int64, and not kept as a scaled decimal."""
    _require(this, _Quantity)
    v = this.value
    return not this.scaled and v == v.to_integral_value() and -(2**63) <= v < 2**63


def _as_integer(value: Decimal) -> Any:
    if value != value.to_integral_value() or not -(2**63) <= value < 2**63:
        return CELEvalError("quantity is not an int64 integer")
    return celtypes.IntType(int(value))


def _compare(a: Decimal, b: Decimal) -> Any:
    return celtypes.IntType((a > b) - (a < b))


K8S_FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
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
    "asInteger": lambda this: (
        _quantity_unary(_as_integer)(this)
        if _int64(this)
        else CELEvalError("quantity is not an int64 integer")
    ),
    "asApproximateFloat": _quantity_unary(lambda v: celtypes.DoubleType(float(v))),
    "sign": _quantity_unary(lambda v: celtypes.IntType((v > 0) - (v < 0))),
    # Quantity.AsInt64: whole, and within int64.
    "isInteger": lambda this: celtypes.BoolType(_int64(this)),
}
