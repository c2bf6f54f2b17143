"""protobuf Structs without the per-node cost of the well-known-type helpers.

Crossplane sends every object as a `google.protobuf.Struct`, and converting a whole one to a
dict costs a Python call per field. Observed objects are read through `StructView` instead,
which converts only the fields render looks at; what render copies from them (an existing
disk's spec) goes back into the response Struct by a C-level copy, not field by field.
"""

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

from google.protobuf import struct_pb2 as structpb


def fill(target: structpb.Struct, obj: Mapping[str, Any]) -> None:
    """Write `obj` into an empty Struct; views of observed Structs are copied in C."""
    fields = target.fields
    for key, value in obj.items():
        _set(fields[key], value)


def _set(target: structpb.Value, value: Any) -> None:  # noqa: C901, PLR0912  # one branch a kind
    # Exact type checks first: isinstance against the Mapping ABC costs more than the write.
    kind = type(value)
    if kind is str:
        target.string_value = value
    elif kind is dict:
        if value:
            fill(target.struct_value, value)
        else:
            target.struct_value.SetInParent()  # an empty map is {}, not null
    elif kind is list or kind is tuple:
        if len(value) >= _FLAT_MIN and (key := _flat_key(value)) is not None:
            target.list_value.CopyFrom(_flat_list(key, value))
        elif value:
            add = target.list_value.values.add
            for item in value:
                _set(add(), item)
        else:
            target.list_value.SetInParent()  # an empty list is [], not null
    elif kind is bool:
        target.bool_value = value
    elif kind is int or kind is float:
        target.number_value = value
    elif value is None:
        target.null_value = structpb.NULL_VALUE
    elif kind is StructView:
        target.struct_value.CopyFrom(value.raw)
    elif isinstance(value, Mapping):
        target.struct_value.SetInParent()
        fill(target.struct_value, value)
    else:
        msg = f"cannot put {type(value).__name__} in a Struct"
        raise TypeError(msg)


# Long flat lists (the blocked CIDRs, their `except` lists) are the same for every sandbox of
# a platform. Built once, they are copied in C after that. The bound keeps memory flat.
_FLAT_MIN = 8
_FLAT_CACHE: OrderedDict[tuple[Any, ...], structpb.ListValue] = OrderedDict()
_FLAT_CACHE_SIZE = 256


def _flat_key(items: list[Any] | tuple[Any, ...]) -> tuple[Any, ...] | None:
    """A hashable key for a list of strings or one-string maps, else None."""
    key: list[Any] = []
    for item in items:
        if isinstance(item, str):
            key.append(item)
        elif type(item) is dict and len(item) == 1:
            ((k, v),) = item.items()
            if not isinstance(v, str):
                return None
            key.append((k, v))
        else:
            return None
    return tuple(key)


def _flat_list(key: tuple[Any, ...], items: list[Any] | tuple[Any, ...]) -> structpb.ListValue:
    cached = _FLAT_CACHE.get(key)
    if cached is None:
        cached = structpb.ListValue()
        for item in items:
            value = cached.values.add()
            if isinstance(item, str):
                value.string_value = item
            else:
                value.struct_value.SetInParent()
                fill(value.struct_value, item)
        _FLAT_CACHE[key] = cached
        if len(_FLAT_CACHE) > _FLAT_CACHE_SIZE:
            _FLAT_CACHE.popitem(last=False)
    return cached


def _read(value: structpb.Value, *, lazy: bool) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        if lazy:
            return StructView(value.struct_value)
        return {k: _read(v, lazy=False) for k, v in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_read(v, lazy=lazy) for v in value.list_value.values]
    if kind == "null_value" or kind is None:
        return None
    return getattr(value, kind)


def to_python(value: structpb.Value) -> Any:
    """A Struct Value as plain data; numbers stay floats, as the SDK's conversion leaves them."""
    return _read(value, lazy=False)


def to_dict(s: structpb.Struct) -> dict[str, Any]:
    """A whole Struct as plain data: for what is read entirely, such as the platform input."""
    return {k: _read(v, lazy=False) for k, v in s.fields.items()}


class StructView(Mapping[str, Any]):
    """A read-only mapping over a Struct; nested Structs are views too, made on access."""

    __slots__ = ("raw",)

    def __init__(self, raw: structpb.Struct) -> None:
        self.raw = raw

    def __getitem__(self, key: str) -> Any:
        fields = self.raw.fields
        if key not in fields:
            raise KeyError(key)
        return _read(fields[key], lazy=True)

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw.fields)

    def __len__(self) -> int:
        return len(self.raw.fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]  # mutable underneath, like a dict
