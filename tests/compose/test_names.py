"""Composed names: injective across XRs and roles, off every legacy and foreign name, kept."""

import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from function.compose import (
    names,
    network_policy,
    service,
    service_account,
    snapshots,
    workspace_claim,
)
from function.compose.names import (
    MAX_NAME,
    composed_name,
    new_identity,
    object_name,
    plane_name,
    plane_namespace,
    provider_config_name,
    resolve,
    sandbox_name,
    service_account_name,
    snapshot_name,
    workspace_volume_name,
)
from function.compose.placements import plane
from function.compose.workloads.agent_sandbox import sandbox
from function.compose.workloads.kubevirt import virtual_machine, workspace_volume
from function.compose.workloads.plane_statefulset import statefulset
from function.model import parse
from function.model.spec import WorkspaceSandbox
from tests.legacy_names import legacy, legacy_hash_collision
from tests.strategies import snapshot_names, split_pairs, xr_names
from tests.support import owned

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
HASH = re.compile(r"[a-z2-7]{26}")


def unresolved(xr: str) -> WorkspaceSandbox:
    data = {"metadata": {"name": xr, "namespace": "t"}, "spec": {"image": "ubuntu-24.04"}}
    return parse(WorkspaceSandbox, data, "")


def new(xr: str) -> WorkspaceSandbox:
    """A sandbox with nothing observed yet."""
    return resolve(unresolved(xr), {})


def every_name(ws: WorkspaceSandbox, snapshot_list: list[str]) -> Iterator[tuple[str, str]]:
    """(role, name) for every name a sandbox composes, in one namespace."""
    yield "sandbox", sandbox_name(ws, "vm")
    yield "workspace", workspace_volume_name(ws)
    yield "service-account", service_account_name(ws)
    yield "plane", plane_name(ws)
    yield "plane-access", provider_config_name(ws)
    yield "plane-namespace", plane_namespace(ws)
    for s in snapshot_list:
        yield f"snapshot {s}", snapshot_name(ws, s)
    for key in (
        "service",
        "statefulset",
        "plane-namespace",
        *(f"snapshot-{s}" for s in snapshot_list),
    ):
        yield f"object {key}", object_name(ws, key)


# --- the shape -----------------------------------------------------------------------------


def test_a_new_name_is_a_readable_prefix_and_130_bits_of_hash() -> None:
    # Pinned: a change here renames the children every new sandbox is about to get.
    ws = new("alice-api")
    assert sandbox_name(ws, "vm") == "alice-api-umrltp23ylef2im2lmd44rtzwa"
    assert workspace_volume_name(ws) == "alice-api-workspace-v3w3kqmqq5sp3zwrsn73hfpshr"
    assert snapshot_name(ws, "nightly") == "alice-api-nightly-3ijyim2xzhm4sjtq73bdpfxmkt"
    assert plane_namespace(ws) == "sandbox-alice-api-5wfm3qycmt67ayss3d6wsbwztm"


@pytest.mark.parametrize(
    ("xr", "prefix"),
    [
        pytest.param("a.b", "a-b-", id="dots-become-dashes"),
        pytest.param("0day", "ws-0day-", id="a-leading-digit-gets-a-letter"),
        pytest.param("x" * 253, "x" * 25 + "-", id="the-longest-xr-name"),
        pytest.param("a" * 24 + ".b", "a" * 24 + "-", id="no-dash-before-the-hash-twice"),
    ],
)
def test_every_new_name_is_a_dns_1035_label_of_at_most_52_characters(xr: str, prefix: str) -> None:
    name = sandbox_name(new(xr), "vm")
    assert name.startswith(prefix)
    assert len(name) <= MAX_NAME
    assert DNS_1035.fullmatch(name)
    assert HASH.fullmatch(name.rsplit("-", 1)[1])


@given(xr=xr_names, snapshot_list=st.lists(snapshot_names, max_size=4, unique=True))
def test_random_xrs_get_dns_labels_that_end_in_their_hash(
    xr: str, snapshot_list: list[str]
) -> None:
    for _, name in every_name(new(xr), snapshot_list):
        assert len(name) <= MAX_NAME
        assert DNS_1035.fullmatch(name), name
        assert HASH.fullmatch(name.rsplit("-", 1)[1]), name


# --- constructed collisions: legacy names meet, new names don't -------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # A dotted name's legacy hash is a name another XR may have: one identity for both.
        pytest.param("a.b", "a-b-2e7336dc", id="a-dotted-name-and-its-legacy-hash"),
        pytest.param("0.ws", legacy("0.ws"), id="a-leading-digit-and-its-legacy-hash"),
    ],
)
def test_xrs_whose_legacy_identities_meet_get_apart(a: str, b: str) -> None:
    assert legacy(a) == legacy(b)
    assert new_identity(a) != new_identity(b)
    assert sandbox_name(new(a), "vm") != sandbox_name(new(b), "vm")
    assert workspace_volume_name(new(a)) != workspace_volume_name(new(b))


# XR `a` with snapshot `b-c` and XR `a-b` with snapshot `c`: one legacy VolumeSnapshot, `a-b-c`.
SNAPSHOT_PAIRS = [
    pytest.param(("a", "b-c"), ("a-b", "c"), id="xr-and-snapshot-split-differently"),
    pytest.param(("dana", "ml-baseline"), ("dana-ml", "baseline"), id="a-real-looking-pair"),
]


@pytest.mark.parametrize(("one", "other"), SNAPSHOT_PAIRS)
def test_snapshots_whose_legacy_names_meet_get_apart(
    one: tuple[str, str], other: tuple[str, str]
) -> None:
    assert legacy(*one) == legacy(*other)
    assert snapshot_name(new(one[0]), one[1]) != snapshot_name(new(other[0]), other[1])


def test_objects_whose_legacy_names_meet_get_apart() -> None:
    # XR dana's snapshot `service` and XR dana-snapshot's Service: Object `dana-snapshot-service`.
    assert legacy("dana", "snapshot-service") == legacy("dana-snapshot", "service")
    assert object_name(new("dana"), "snapshot-service") != object_name(
        new("dana-snapshot"), "service"
    )


def test_a_new_claim_never_takes_an_older_sandboxs_templated_claim() -> None:
    # The agent-sandbox controller named XR a-workspace's claim workspace-a-workspace, the
    # legacy name of XR workspace-a's own claim.
    templated = f"workspace-{legacy('a-workspace')}"
    assert templated == legacy("workspace-a", "workspace")
    assert workspace_volume_name(new("workspace-a")) != templated


def test_a_birthday_search_that_breaks_legacy_names_breaks_no_new_name() -> None:
    a, b = legacy_hash_collision()
    assert a != b
    assert legacy(a) == legacy(b)
    mine, theirs = dict(every_name(new(a), ["s"])), dict(every_name(new(b), ["s"]))
    assert not set(mine.values()) & set(theirs.values())


@given(pair=split_pairs())
def test_every_split_that_legacy_names_join_is_kept_apart(
    pair: tuple[tuple[str, str], tuple[str, str]],
) -> None:
    (xr_a, snap_a), (xr_b, snap_b) = pair
    assert legacy(xr_a, snap_a) == legacy(xr_b, snap_b)
    assert snapshot_name(new(xr_a), snap_a) != snapshot_name(new(xr_b), snap_b)
    assert object_name(new(xr_a), f"snapshot-{snap_a}") != object_name(
        new(xr_b), f"snapshot-{snap_b}"
    )


@settings(max_examples=150)
@given(
    a=xr_names,
    b=xr_names,
    snaps_a=st.lists(snapshot_names, max_size=3, unique=True),
    snaps_b=st.lists(snapshot_names, max_size=3, unique=True),
)
def test_no_two_xrs_of_a_namespace_share_a_name(
    a: str, b: str, snaps_a: list[str], snaps_b: list[str]
) -> None:
    """Not within a role, not across roles, not against any child of the other sandbox."""
    mine = dict(every_name(new(a), snaps_a))
    if a == b:
        return
    theirs = set(dict(every_name(new(b), snaps_b)).values())
    assert not set(mine.values()) & theirs
    assert len(set(mine.values())) == len(mine)


@given(
    xr=xr_names,
    parts=st.lists(
        st.from_regex(r"[a-z0-9][-a-z0-9.]{0,40}", fullmatch=True), min_size=1, max_size=3
    ),
)
def test_no_new_name_is_a_legacy_hashed_name(xr: str, parts: list[str]) -> None:
    """A legacy hashed name ends in 8 hex digits after its last dash; a new one in 26."""
    old = legacy(xr, *parts)
    if old != "-".join((xr, *parts)):
        assert len(old.rsplit("-", 1)[1]) == 8
    assert len(sandbox_name(new(xr), "vm").rsplit("-", 1)[1]) == 26


def test_the_encoding_under_the_hash_keeps_its_parts_apart() -> None:
    # Joined with '-', these were one string; joined with NUL they stay two.
    assert composed_name("x", "a", "snapshot", "b-c") != composed_name("x", "a-b", "snapshot", "c")
    assert composed_name("x", "a", "object", "snapshot-b") != composed_name(
        "x", "a", "snapshot", "b"
    )


# --- existing children keep their names -----------------------------------------------------


def crossplane_observed(**by_key: dict[str, Any]) -> dict[str, Any]:
    return owned({k: {"apiVersion": "v1", "kind": "Thing", **v} for k, v in by_key.items()})


def test_observed_children_keep_their_names_and_new_ones_get_new_names() -> None:
    ws = unresolved("alice-api")
    observed = crossplane_observed(
        vm={"metadata": {"name": "alice-api"}},
        service={"metadata": {"name": "alice-api"}},
        **{"workspace-volume": {"metadata": {"name": "alice-api-workspace"}}},
        **{"snapshot-nightly": {"metadata": {"name": "alice-api-nightly"}}},
    )
    named = resolve(ws, observed)
    assert named.names.identity == "alice-api"
    assert sandbox_name(named, "vm") == "alice-api"
    # The workload's other selectors, if made now, share its identity, so the label stays one.
    assert sandbox_name(named, "cilium-policy") == "alice-api"
    assert workspace_volume_name(named) == "alice-api-workspace"
    assert snapshot_name(named, "nightly") == "alice-api-nightly"
    # A snapshot added after the upgrade gets the new scheme.
    assert snapshot_name(named, "later") == snapshot_name(new("alice-api"), "later")


def test_an_objects_own_name_and_the_name_it_carries_are_both_kept() -> None:
    ws = unresolved("dana-ml")
    carried = {"metadata": {"name": "dana-ml"}}
    observed = owned(
        {
            "service": {
                "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
                "kind": "Object",
                "metadata": {"name": "dana-ml-service"},
                "spec": {"forProvider": {"manifest": carried}},
            }
        },
        "dana-ml",
    )
    named = resolve(ws, observed)
    assert object_name(named, "service") == "dana-ml-service"
    assert sandbox_name(named, "service") == "dana-ml"
    assert named.names.identity == "dana-ml"


def test_the_workloads_name_is_the_identity_even_if_its_service_was_made_again() -> None:
    ws = unresolved("alice-api")
    observed = crossplane_observed(
        vm={"metadata": {"name": "alice-api"}},
        service={"metadata": {"name": new_identity("alice-api")}},
    )
    assert resolve(ws, observed).names.identity == "alice-api"


def test_a_sandbox_is_read_from_observed_state_before_it_is_named() -> None:
    ws = unresolved("alice-api")
    with pytest.raises(TypeError):
        sandbox_name(ws, "vm")


def test_the_keys_names_reads_are_the_keys_the_modules_compose() -> None:
    assert names.SERVICE_KEY == service.KEY
    assert names.SNAPSHOT_PREFIX == snapshots.PREFIX
    assert names._WORKSPACE_KEYS == (workspace_volume.KEY, workspace_claim.KEY)
    assert set(names._IDENTITY_KEYS) == {
        virtual_machine.KEY,
        sandbox.KEY,
        statefulset.KEY,
        service.KEY,
        network_policy.KUBERNETES_KEY,
        network_policy.CILIUM_KEY,
    }
    assert names.PLANE_KEY == plane.PLANE_KEY
    assert names.PROVIDER_CONFIG_KEY == plane.PROVIDER_CONFIG_KEY
    assert names.PLANE_NAMESPACE_KEY == plane.NAMESPACE_KEY
    assert names.SERVICE_ACCOUNT_KEY == service_account.KEY
