"""Every rendered object validates against the real upstream schema of its kind, and so does
every object the examples feed the function."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from function.compose.names import MANAGED_BY
from function.model.platform import SandboxPlatform
from function.render import render
from tests.schemas import validate
from tests.strategies import specs, xr_names
from tests.support import (
    AGENT_PLATFORM,
    EXAMPLES,
    NAMESPACE,
    NOW,
    PLATFORM,
    load_stream,
    observed_of,
    owned,
    owner_reference,
    platform,
    platform_input,
    required_of,
    workspace,
)


def as_applied(manifest: dict[str, Any]) -> dict[str, Any]:
    """What Crossplane sends to the API server: the manifest in the XR's namespace."""
    return {**manifest, "metadata": {**manifest["metadata"], "namespace": NAMESPACE}}


@pytest.mark.parametrize(
    "p", [PLATFORM, AGENT_PLATFORM], ids=["shipped-platform", "agent-delivered"]
)
@pytest.mark.parametrize("case", EXAMPLES, ids=[c.name for c in EXAMPLES])
def test_every_object_from_every_example_is_schema_valid(case: Path, p: SandboxPlatform) -> None:
    composite = load_stream(case / "xr.yaml")[0]
    ws = workspace(composite["spec"], composite["metadata"]["name"])
    first = render(ws, p, observed_of(case), NOW)
    out = render(ws, p, observed_of(case), NOW, required_of(case, first.requirements))
    assert out.resources
    for name, manifest in out.resources.items():
        assert validate(as_applied(manifest)) == [], name


def example_inputs() -> Iterator[Any]:
    """Each object of every observed.yaml and required.yaml, and each object an Object observes."""
    for case in EXAMPLES:
        for file in ("observed.yaml", "required.yaml"):
            path = case / file
            for doc in load_stream(path) if path.exists() else []:
                where = f"{case.name}/{file}:{doc['kind']}/{doc['metadata']['name']}"
                yield pytest.param(doc, id=where)
                inside = (doc.get("status") or {}).get("atProvider", {}).get("manifest")
                if inside is not None:
                    yield pytest.param(inside, id=f"{where}:{inside['kind']}")


@pytest.mark.parametrize("obj", list(example_inputs()))
def test_every_object_the_examples_feed_the_function_is_schema_valid(obj: dict[str, Any]) -> None:
    assert validate(obj) == []


@pytest.mark.parametrize(
    "case", [c for c in EXAMPLES if (c / "observed.yaml").exists()], ids=lambda c: c.name
)
def test_observed_examples_carry_what_the_api_server_and_crossplane_set(case: Path) -> None:
    composite = load_stream(case / "xr.yaml")[0]
    name = composite["metadata"]["name"]
    owners = []
    for doc in load_stream(case / "observed.yaml"):
        meta = doc["metadata"]
        assert {"uid", "resourceVersion", "creationTimestamp"} <= meta.keys(), meta["name"]
        assert "crossplane.io/composition-resource-name" in meta["annotations"], meta["name"]
        assert meta["labels"]["crossplane.io/composite"] == name, meta["name"]
        [owner] = meta["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["controller"]) == (
            composite["kind"],
            name,
            True,
        )
        owners.append(owner["uid"])
    assert len(set(owners)) == 1, "every composed resource has the same XR as its controller"


@settings(max_examples=40, deadline=None)
@given(spec=specs, name=xr_names)
def test_every_object_from_random_specs_is_schema_valid(spec: dict[str, Any], name: str) -> None:
    for manifest in render(workspace(spec, name), PLATFORM, {}, NOW).resources.values():
        assert validate(as_applied(manifest)) == []


def test_the_validator_would_catch_a_broken_render() -> None:
    vm = render(workspace(), PLATFORM, {}, NOW).resources["vm"]
    broken = {**vm, "spec": {**vm["spec"], "running": "yes"}}
    assert validate(as_applied(broken)) != []
    assert (
        validate(as_applied({**vm, "metadata": {"name": "Bad_Name", "labels": MANAGED_BY}})) != []
    )


@pytest.mark.parametrize("namespaces_allow_internet", [True, False])
@pytest.mark.parametrize(
    ("spec", "cluster_dns"),
    [
        pytest.param({"network": {"egress": "None"}}, False, id="egress-none"),
        pytest.param(
            {
                "network": {
                    "egress": "Allowlist",
                    "allow": [
                        {"cidr": "151.101.0.0/16", "ports": [443]},
                        {"cidr": "2a04:4e42::/32"},
                    ],
                }
            },
            False,
            id="allowlist",
        ),
        pytest.param(
            {"network": {"egress": "Allowlist", "allow": [{"cidr": "151.101.0.0/16"}]}},
            True,
            id="allowlist-cluster-dns",
        ),
        pytest.param({}, True, id="internet-cluster-dns"),
    ],
)
def test_every_policy_variant_is_schema_valid(
    spec: dict[str, Any], cluster_dns: bool, namespaces_allow_internet: bool
) -> None:
    presets = {"standard": {**platform_input()["presets"]["standard"], "clusterDns": cluster_dns}}
    network = {**platform_input()["network"], "namespacesAllowInternet": namespaces_allow_internet}
    if not namespaces_allow_internet and "allow" in spec.get("network", {}):
        spec = {
            "network": {
                **spec["network"],
                "allow": [*spec["network"]["allow"], {"fqdn": "*.pypi.org", "ports": [443]}],
            }
        }
    out = render(workspace(spec), platform(presets=presets, network=network), {}, NOW)
    for name, manifest in out.resources.items():
        assert validate(as_applied(manifest)) == [], name


def test_snapshots_and_a_restored_disk_are_schema_valid() -> None:
    observed = {"workspace-volume": {"status": {"phase": "Succeeded"}}}
    spec = {"snapshots": [{"name": "nightly"}, {"name": "before-refactor"}]}
    out = render(workspace(spec), PLATFORM, owned(observed), NOW)
    snapshots = [m for k, m in out.resources.items() if k.startswith("snapshot-")]
    assert len(snapshots) == 2
    ready = {
        "metadata": {"ownerReferences": [owner_reference("alice-api")]},
        "status": {"readyToUse": True, "restoreSize": "20Gi"},
    }
    nightly = snapshots[1]["metadata"]["name"]
    restored = render(
        workspace({"restoreFrom": {"snapshot": nightly}}, "fork"),
        PLATFORM,
        {},
        NOW,
        {"restore-snapshot": [ready]},
    )
    for manifest in [*snapshots, restored.resources["workspace-volume"], restored.resources["vm"]]:
        assert validate(as_applied(manifest)) == [], manifest["kind"]


def test_a_compute_plane_is_checked_against_its_application_definition() -> None:
    carrier = render(workspace({"preset": "dedicated-plane"}), PLATFORM, {}, NOW).resources[
        "compute-plane"
    ]
    assert validate(as_applied(carrier)) == []
    plane = carrier["spec"]["forProvider"]["manifest"]
    assert validate(plane) == []
    groups = {"md0": {"minReplicas": "one", "roles": "ingress-nginx"}}
    broken = {**plane, "spec": {"nodeGroups": groups}}
    assert validate(as_applied(broken)) == [
        "spec.nodeGroups.md0.minReplicas: 'one' is not of type 'integer'",
        "spec.nodeGroups.md0.roles: 'ingress-nginx' is not of type 'array'",
    ]
