"""Invariants for random specs placed into a plane."""

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cluster import Observed, applied
from tests.plane.provider import (
    PLACEMENTS,
    Placement,
    expected_violations,
    inner,
    plane_world,
    pod_spec,
    run,
)
from tests.render.pod_security import all_violations
from tests.strategies import allowlists, specs, xr_names
from tests.support import NAMESPACE

_TOO_BIG = {"cpu": {"8"}, "memory": {"16Gi"}, "disk": {"200Gi"}}


def _fits(spec: Mapping[str, Any]) -> bool:
    """Within the plane presets' maximum (4 CPUs, 8Gi, 100Gi)."""
    return not any(spec.get("resources", {}).get(k) in v for k, v in _TOO_BIG.items())


plane_specs = st.builds(
    lambda spec, allow: {
        **spec,
        **({"network": {"egress": "Allowlist", "allow": allow}} if allow is not None else {}),
    },
    # Plane presets run pods, which take no SSH keys.
    specs.filter(_fits).map(
        lambda spec: {k: v for k, v in spec.items() if k not in {"preset", "ssh"}}
    ),
    st.one_of(st.none(), allowlists()),
)
placements = st.sampled_from([p.values[0] for p in PLACEMENTS])


WORLDS: dict[str, dict[str, Any]] = {
    "ready": {},
    "unready": {"plane": {"status": "False", "reason": "Upgrading"}},
    "no-kubeconfig": {"secret": False},
    "gone": {"exists": False},
}


@settings(max_examples=40, deadline=None)
@given(
    p=placements,
    spec=plane_specs,
    name=xr_names,
    worlds=st.lists(st.sampled_from(sorted(WORLDS)), min_size=1, max_size=8),
)
def test_placed_sandboxes_stay_in_their_namespace_and_keep_their_claim(
    p: Placement, spec: dict[str, Any], name: str, worlds: list[str]
) -> None:
    """Whatever the plane does between calls; then it stays ready until the sandbox settles."""
    observed: Observed = {}
    claimed = False
    namespaces = set()
    for state in [*worlds, "ready", "ready", "ready", "ready"]:
        world, required = plane_world(p, **WORLDS[state], name=name)
        out = run(p, spec, {**observed, **world}, required, name=name)
        # Nothing once placed ever leaves the desired state; the claim least of all.
        assert set(observed) <= set(out.resources)
        claimed = claimed or "workspace-claim" in observed
        objects = [k for k, m in out.resources.items() if m["kind"] == "Object"]
        if "compute-plane" in objects:
            # The dedicated plane's own Object: on the host, in the tenant's namespace.
            objects.remove("compute-plane")
            assert inner(out, "compute-plane")["metadata"]["namespace"] == NAMESPACE
        if objects:
            own = inner(out, "plane-namespace")["metadata"]
            assert "namespace" not in own
            in_plane = own["name"]
            namespaces.add(in_plane)
        for key in objects:
            wrapped = inner(out, key)
            if key in ("plane-namespace", "plane-guard"):
                assert "namespace" not in wrapped["metadata"], key  # cluster-scoped
                continue
            assert wrapped["metadata"]["namespace"] == in_plane, key
            if key == p.workload:
                account = inner(out, "service-account")["metadata"]["name"]
                assert all_violations(pod_spec(wrapped), service_account=account) == (
                    expected_violations(p)
                )
        observed = applied(out)
    assert claimed
    assert len(namespaces) == 1
