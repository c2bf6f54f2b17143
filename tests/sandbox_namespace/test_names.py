"""The sandbox namespace's name: a DNS label of its own per (tenant namespace, XR), for life."""

import copy
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from function.compose.names import resolve, sandbox_namespace
from function.model import parse
from function.model.spec import WorkspaceSandbox
from tests.cluster import applied
from tests.sandbox_namespace.world import (
    HOME,
    ISOLATED,
    ISOLATED_KATA,
    carried,
    run,
    settled_in_namespace,
)
from tests.strategies import split_pairs, xr_names
from tests.support import NAMESPACE, xr

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
namespaces = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)


def name_of(namespace: str, name: str) -> str:
    data = xr({}, name, namespace=namespace)
    ws = parse(WorkspaceSandbox, {"metadata": data["metadata"], "spec": data["spec"]}, "")
    return sandbox_namespace(resolve(ws, {}))


def test_alice_gets_a_readable_name_under_the_tenant() -> None:
    assert HOME == name_of(NAMESPACE, "alice-api")
    assert HOME.startswith("sandbox-acme-alice-api-")
    assert HOME == "sandbox-acme-alice-api-x4rjbdt4jlxh7rierg7rlaebbf"


@given(namespace=namespaces, name=xr_names)
def test_every_sandbox_namespace_is_a_dns_label_of_at_most_52_starting_sandbox(
    namespace: str, name: str
) -> None:
    got = name_of(namespace, name)
    assert DNS_LABEL.fullmatch(got), got
    assert len(got) <= 52
    assert got.startswith("sandbox-")
    assert name_of(namespace, name) == got


@given(pair=split_pairs())
def test_a_tenant_and_xr_split_of_one_string_get_two_namespaces(
    pair: tuple[tuple[str, str], tuple[str, str]],
) -> None:
    (ns_one, xr_one), (ns_two, xr_two) = pair
    assert name_of(ns_one, xr_one) != name_of(ns_two, xr_two)


@given(one=st.tuples(namespaces, xr_names), other=st.tuples(namespaces, xr_names))
def test_two_different_sandboxes_never_share_a_namespace(
    one: tuple[str, str], other: tuple[str, str]
) -> None:
    if one != other:
        assert name_of(*one) != name_of(*other)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        pytest.param(("tenant-a", "x-y"), ("tenant-a-x", "y"), id="dash-moved-across"),
        pytest.param(("tenant-acme", "api"), ("acme", "api"), id="tenant-prefix-dropped"),
        pytest.param(("tenant-acme", "alice-api"), ("tenant-evil", "alice-api"), id="same-xr"),
    ],
)
def test_pairs_built_to_collide_get_two_namespaces(
    one: tuple[str, str], other: tuple[str, str]
) -> None:
    assert name_of(*one) != name_of(*other)


@pytest.mark.parametrize("preset", [ISOLATED, ISOLATED_KATA])
def test_an_observed_sandbox_keeps_its_observed_namespace(preset: str) -> None:
    settled, observed = settled_in_namespace(preset)
    earlier = "sandbox-acme-alice-api-made-by-an-earlier-release"
    was = copy.deepcopy(observed)
    obj = was["sandbox-namespace"]
    for manifest in (
        obj["spec"]["forProvider"]["manifest"],
        obj["status"]["atProvider"]["manifest"],
    ):
        manifest["metadata"]["name"] = earlier
    out = run(preset, observed=was)
    assert sorted(out.resources) == sorted(settled.resources)
    assert carried(out, "sandbox-namespace")["metadata"]["name"] == earlier
    assert out.status["sandboxNamespace"] == earlier
    for key, m in out.resources.items():
        if m["kind"] == "Object" and key != "sandbox-namespace":
            assert carried(out, key)["metadata"]["namespace"] == earlier, key
    # And it stays there through the next render.
    assert run(preset, observed=applied(out)).resources == out.resources
