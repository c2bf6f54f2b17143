"""Struct reading and writing at the edge: the same data as the SDK's own conversion."""

from typing import Any

import pytest
from crossplane.function import resource
from google.protobuf import struct_pb2 as structpb
from hypothesis import given
from hypothesis import strategies as st

from function.wire import StructView, fill

values = st.recursive(
    st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.integers(-(2**40), 2**40),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=15,
)
objects = st.dictionaries(st.text(max_size=6), values, max_size=5)


@given(obj=objects)
def test_fill_writes_what_the_sdk_writes(obj: dict[str, Any]) -> None:
    ours = structpb.Struct()
    fill(ours, obj)
    assert ours == resource.dict_to_struct(obj)


@given(obj=objects)
def test_a_view_reads_what_the_sdk_reads(obj: dict[str, Any]) -> None:
    view = StructView(resource.dict_to_struct(obj))
    assert view == resource.struct_to_dict(resource.dict_to_struct(obj))


@pytest.mark.parametrize("empty", [{}, []])
def test_empty_maps_and_lists_stay_empty_not_null(empty: Any) -> None:
    ours = structpb.Struct()
    fill(ours, {"x": empty})
    assert resource.struct_to_dict(ours) == {"x": empty}


def test_a_view_copied_back_keeps_its_content() -> None:
    observed = resource.dict_to_struct({"spec": {"source": {"pvc": {"name": "a"}}, "storage": {}}})
    ours = structpb.Struct()
    fill(ours, {"apiVersion": "v1", "spec": StructView(observed)["spec"]})
    assert resource.struct_to_dict(ours) == {
        "apiVersion": "v1",
        "spec": {"source": {"pvc": {"name": "a"}}, "storage": {}},
    }


def test_a_missing_key_is_missing() -> None:
    view = StructView(resource.dict_to_struct({"a": 1}))
    assert view.get("b") is None
    with pytest.raises(KeyError):
        view["b"]
