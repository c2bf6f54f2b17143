"""Whole renders: determinism, order independence, no data loss, and the invariants so far."""

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from function.compose.names import EGRESS_LABEL, WORKSPACE_LABEL, identity_labels
from function.compose.readiness import is_ready
from function.errors import FieldError
from function.render import Rendered, render
from tests.legacy_names import legacy, legacy_hash_collision
from tests.strategies import specs, split_pairs, xr_names
from tests.support import (
    EXAMPLES,
    NOW,
    PLATFORM,
    load_stream,
    observed_of,
    owned,
    required_of,
    workspace,
)

WITH_OBSERVED = [c for c in EXAMPLES if (c / "observed.yaml").exists()]

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def rendered(spec: dict[str, Any], name: str = "alice-api", observed: Any = None) -> Rendered:
    return render(workspace(spec, name), PLATFORM, owned(observed, name), NOW)


def as_observed(out: Rendered) -> dict[str, Any]:
    """What Crossplane would observe once the API server accepted every desired object."""
    return json.loads(json.dumps(out.resources))


@given(spec=specs)
def test_list_order_never_changes_the_output(spec: dict[str, Any]) -> None:
    reordered = {
        **spec,
        "ports": list(reversed(spec.get("ports", []))),
        "snapshots": list(reversed(spec.get("snapshots", []))),
    }
    assert rendered(spec) == rendered(reordered)


@given(spec=specs)
def test_rendering_is_deterministic_to_the_byte(spec: dict[str, Any]) -> None:
    a, b = rendered(spec), rendered(spec)
    assert json.dumps(a.resources, sort_keys=False) == json.dumps(b.resources, sort_keys=False)
    assert json.dumps(a.status) == json.dumps(b.status)


@given(before=specs, after=specs)
def test_a_spec_change_never_drops_an_existing_resource(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    observed = as_observed(rendered(before))
    try:
        out = rendered(after, observed=observed)
    except FieldError as err:
        # A FATAL result applies and deletes nothing; only an explicit shrink is refused.
        assert err.path == "spec.resources.disk"
        assert "disks never shrink" in err.message
        return
    wanted_snapshots = {f"snapshot-{s['name']}" for s in after.get("snapshots", [])}
    dropped = set(observed) - set(out.resources)
    # Only removing a snapshot entry deletes something, and that is the tenant's explicit act.
    assert dropped <= {k for k in observed if k.startswith("snapshot-")} - wanted_snapshots
    assert out.resources["workspace-volume"]["spec"] == observed["workspace-volume"]["spec"]
    for key in set(observed) & set(out.resources):
        if key.startswith("snapshot-"):
            assert out.resources[key]["spec"] == observed[key]["spec"]


@given(spec=specs, name=xr_names)
def test_every_name_is_a_dns_label_derived_from_the_xr(spec: dict[str, Any], name: str) -> None:
    out = rendered(spec, name)
    for manifest in out.resources.values():
        # 52: room for the revision hash a StatefulSet appends in a label, and a Helm release.
        assert len(manifest["metadata"]["name"]) <= 52
        assert DNS_1035.fullmatch(manifest["metadata"]["name"])
    assert rendered(spec, name) == out


@given(a=xr_names, b=xr_names)
def test_different_workspaces_never_share_an_identity(a: str, b: str) -> None:
    if a != b:
        assert identity_labels(workspace(name=a)) != identity_labels(workspace(name=b))


# --- DESIGN invariant 10: no two XRs compose one name, even XRs built to collide --------------

DISK_MADE = {"workspace-volume": {"status": {"phase": "Succeeded"}}}


def composed(name: str, snapshot: str | None = None) -> tuple[str, set[tuple[str, str]]]:
    """A new sandbox's identity, and (kind, name) of everything it composes."""
    spec = {"snapshots": [{"name": snapshot}]} if snapshot else {}
    out = rendered(spec, name, DISK_MADE if snapshot else None)
    identity = out.resources["vm"]["spec"]["template"]["metadata"]["labels"][WORKSPACE_LABEL]
    return identity, {(m["kind"], m["metadata"]["name"]) for m in out.resources.values()}


def apart(one: tuple[str, set[tuple[str, str]]], other: tuple[str, set[tuple[str, str]]]) -> None:
    assert one[0] != other[0], "one identity: each sandbox's policies and Service select both"
    assert not one[1] & other[1], "one name for two objects: the later apply takes the other's"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # Literal and hashed names shared one space: XR a.b's legacy name is a name of its own.
        pytest.param("a.b", "a-b-2e7336dc", id="a-dotted-name-and-its-hash"),
        pytest.param("0.ws", legacy("0.ws"), id="a-leading-digit-and-its-hash"),
        pytest.param(*legacy_hash_collision(), id="a-birthday-collision-of-32-bits"),
    ],
)
def test_xrs_built_to_collide_compose_nothing_in_common(a: str, b: str) -> None:
    apart(composed(a), composed(b))


@pytest.mark.parametrize(
    ("one", "other"),
    [pytest.param(("a", "b-c"), ("a-b", "c"), id="xr-a-snapshot-b-c-and-xr-a-b-snapshot-c")],
)
def test_snapshots_built_to_collide_are_two_volume_snapshots(
    one: tuple[str, str], other: tuple[str, str]
) -> None:
    apart(composed(*one), composed(*other))


@given(pair=split_pairs())
def test_every_xr_and_snapshot_split_of_one_string_composes_apart(
    pair: tuple[tuple[str, str], tuple[str, str]],
) -> None:
    apart(composed(*pair[0]), composed(*pair[1]))


@pytest.mark.parametrize("case", WITH_OBSERVED, ids=[c.name for c in WITH_OBSERVED])
def test_an_existing_sandbox_keeps_every_name_it_has(case: Path) -> None:
    """Byte for byte: the name of each observed object, of each object an Object carries, and
    the identity label, whatever the scheme new sandboxes get."""
    composite = load_stream(case / "xr.yaml")[0]
    ws = workspace(composite["spec"], composite["metadata"]["name"])
    observed = observed_of(case)
    first = render(ws, PLATFORM, observed, NOW)
    out = render(ws, PLATFORM, observed, NOW, required_of(case, first.requirements))
    kept = set(observed) & set(out.resources)
    assert kept
    for key in kept:
        was, now = observed[key], out.resources[key]
        assert now["metadata"]["name"] == was["metadata"]["name"], key
        assert (
            now["metadata"]["labels"][WORKSPACE_LABEL]
            == (was["metadata"]["labels"][WORKSPACE_LABEL])
        ), key
        if now["kind"] == "Object":
            inner, seen = (m["spec"]["forProvider"]["manifest"] for m in (now, was))
            assert inner["metadata"]["name"] == seen["metadata"]["name"], key


@given(spec=specs, name=xr_names)
def test_the_vm_and_service_carry_only_our_identity(spec: dict[str, Any], name: str) -> None:
    out = rendered(spec, name)
    identity = identity_labels(workspace(spec, name))
    assert list(identity) == [WORKSPACE_LABEL]
    egress = {EGRESS_LABEL: workspace(spec, name).spec.network.egress}
    assert out.resources["vm"]["spec"]["template"]["metadata"]["labels"] == identity | egress
    assert out.resources["service"]["spec"]["selector"] == identity


@given(spec=specs)
def test_an_unobserved_resource_is_never_ready(spec: dict[str, Any]) -> None:
    out = rendered(spec)
    assert not any(out.ready.values())
    assert not out.composite_ready
    for manifest in out.resources.values():
        assert not is_ready(manifest, None)


@settings(max_examples=50)
@given(spec=specs)
def test_the_sandbox_is_never_weaker_than_the_design(spec: dict[str, Any]) -> None:
    out = rendered(spec)
    vm = out.resources["vm"]["spec"]["template"]["spec"]
    devices = vm["domain"]["devices"]
    # Pod network only, NATed; no Multus, no host devices, no vsock, no token or secret volumes.
    assert vm["networks"] == [{"name": "default", "pod": {}}]
    assert devices["interfaces"] == [{"name": "default", "masquerade": {}}]
    assert devices["autoattachVSOCK"] is False
    # Nothing virtctl could reach past the gateway and the policies: no VNC, no serial console.
    assert devices["autoattachGraphicsDevice"] is False
    assert devices["autoattachSerialConsole"] is False
    for forbidden in ("hostDevices", "gpus", "filesystems", "downwardMetrics"):
        assert forbidden not in devices
    volume_kinds = {k for v in vm["volumes"] for k in v if k != "name"}
    assert volume_kinds == {"dataVolume", "cloudInitNoCloud"}
    assert "serviceAccountName" not in vm
    assert "nodeSelector" not in vm  # the shipped preset sets none, and tenants can't
    assert out.resources["service"]["spec"]["type"] == "ClusterIP"
    assert "externalIPs" not in out.resources["service"]["spec"]
    storage = out.resources["workspace-volume"]["spec"]["storage"]
    assert storage["storageClassName"] == "replicated"
    user_data = vm["volumes"][1]["cloudInitNoCloud"]["userData"]
    assert len(user_data.encode()) <= 2048
    assert "password" not in user_data.lower()


@given(spec=specs, power=st.sampled_from(["Running", "Suspended"]))
def test_power_maps_to_a_run_strategy(spec: dict[str, Any], power: str) -> None:
    out = rendered({**spec, "power": power})
    strategy = out.resources["vm"]["spec"]["runStrategy"]
    assert strategy == {"Running": "Always", "Suspended": "Halted"}[power]
    assert "running" not in out.resources["vm"]["spec"]


RESERVED = (
    "kubernetes.io/",
    "k8s.io/",
    "cilium.io/",
    "policy.cozystack.io/",
    "cozystack.io/",
    "kubevirt.io/",
    "app.kubernetes.io/instance",
    "argocd.argoproj.io/",
)
# Every label key the function writes: ours, and the platform's gateway and DNS selectors.
OUR_KEYS = {WORKSPACE_LABEL, EGRESS_LABEL, "app.kubernetes.io/managed-by"}


def _label_maps(obj: Any) -> list[dict[str, str]]:
    found = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("labels", "matchLabels", "selector", "nodeSelector") and isinstance(
                value, dict
            ):
                found.append(value)
            found += _label_maps(value)
    elif isinstance(obj, list):
        for item in obj:
            found += _label_maps(item)
    return found


@given(spec=specs, name=xr_names)
def test_tenant_text_never_becomes_a_label_key(spec: dict[str, Any], name: str) -> None:
    out = rendered(spec, name)
    object_labels = [m["metadata"]["labels"] for m in out.resources.values()]
    template = out.resources["vm"]["spec"]["template"]["metadata"]["labels"]
    for labels in [*object_labels, template]:
        assert set(labels) <= OUR_KEYS
        assert not [k for k in labels if k.startswith(RESERVED) and k not in OUR_KEYS]
    platform_keys = {
        "io.kubernetes.pod.namespace",
        "app.kubernetes.io/name",
        "k8s-app",
        "kubernetes.io/metadata.name",
    }
    for labels in _label_maps(out.resources):
        assert set(labels) <= OUR_KEYS | platform_keys
