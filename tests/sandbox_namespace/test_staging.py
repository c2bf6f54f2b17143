"""The SandboxNamespace placement, stage by stage: nothing runs before what isolates it."""

import pytest

from function.compose.names import WORKSPACE_LABEL, new_identity
from function.render import Rendered
from tests.cluster import applied
from tests.sandbox_namespace.world import (
    CONFIG,
    FIRST,
    HOME,
    ISOLATED,
    ISOLATED_KATA,
    SECOND,
    TENANT_LABEL,
    WORKLOAD,
    carried,
    objects,
    run,
    settled_in_namespace,
    steps,
)
from tests.support import NAMESPACE, platform

PRESETS = [pytest.param(ISOLATED, id="kubevirt"), pytest.param(ISOLATED_KATA, id="kata")]
OBJECT_API = "kubernetes.m.crossplane.io/v1alpha1"
USAGE_API = "protection.crossplane.io/v1beta1"
POD_SECURITY = {
    f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")
}


def _usages(out: Rendered) -> list[str]:
    return sorted(k for k, m in out.resources.items() if m["kind"] == "Usage")


@pytest.mark.parametrize("preset", PRESETS)
def test_the_namespace_comes_first_then_the_policies_then_the_workload(preset: str) -> None:
    renders = [out for out, _ in steps(preset)]
    placed = [objects(out) for out in renders]
    assert placed[0] == FIRST
    assert placed[1] == sorted(FIRST + SECOND[preset])
    assert placed[2] == sorted(FIRST + SECOND[preset] + WORKLOAD[preset])
    assert placed[-1] == placed[2]
    # Nothing beside the Objects until the workload is placed; then only the Usages.
    assert [_usages(out) for out in renders[:2]] == [[], []]
    assert {k for k, m in renders[0].resources.items() if m["kind"] != "Object"} == set()
    for out in renders:
        assert {m["kind"] for m in out.resources.values()} <= {"Object", "Usage"}
        assert {m["apiVersion"] for m in out.resources.values() if m["kind"] == "Object"} == {
            OBJECT_API
        }
    assert renders[-1].status["phase"] == "Running"
    assert renders[-1].composite_ready


@pytest.mark.parametrize("preset", PRESETS)
def test_the_workload_waits_for_every_policy_to_be_ready(preset: str) -> None:
    first, _ = steps(preset)[1]
    # An Object whose apply failed is never Ready (the policies' Objects are Ready once
    # created: they have no status to wait for).
    for failed in SECOND[preset]:
        out = run(preset, observed=applied(first, failed=[failed]))
        assert not set(WORKLOAD[preset]) & set(out.resources), failed
        c = next(c for c in out.conditions if c.type == "Provisioned")
        assert (c.status, c.reason) == ("False", "PlacingInSandboxNamespace")
        assert c.message == (
            f"placing the sandbox into its namespace {HOME!r}: waiting for {failed}"
        )


@pytest.mark.parametrize("preset", PRESETS)
def test_the_policies_wait_for_the_namespace(preset: str) -> None:
    first = run(preset)
    for observed in (applied(first, hold=FIRST), applied(first, failed=FIRST)):
        out = run(preset, observed=observed)
        assert objects(out) == FIRST
        c = next(c for c in out.conditions if c.type == "Provisioned")
        assert c.message == (
            f"placing the sandbox into its namespace {HOME!r}: waiting for sandbox-namespace"
        )


@pytest.mark.parametrize("preset", PRESETS)
def test_every_object_goes_through_the_sandbox_namespaces_config_into_the_namespace(
    preset: str,
) -> None:
    out, _ = settled_in_namespace(preset)
    for key in objects(out):
        m = out.resources[key]
        assert m["spec"]["providerConfigRef"] == CONFIG, key
        inner = carried(out, key)
        if inner["kind"] == "Namespace":
            assert "namespace" not in inner["metadata"]
        else:
            assert inner["metadata"]["namespace"] == HOME, key
        assert inner["kind"] not in {"Role", "RoleBinding", "Secret", "ConfigMap"}, key


@pytest.mark.parametrize("preset", PRESETS)
def test_a_platform_names_its_own_config(preset: str) -> None:
    own = platform(sandboxNamespaces={"clusterProviderConfig": "sandbox-writer"})
    out, _ = settled_in_namespace(preset, platform=own)
    refs = {str(out.resources[k]["spec"]["providerConfigRef"]) for k in objects(out)}
    assert refs == {str({"kind": "ClusterProviderConfig", "name": "sandbox-writer"})}


@pytest.mark.parametrize("preset", PRESETS)
def test_the_namespace_is_marked_as_the_tenants_sandbox_namespace_and_restricted(
    preset: str,
) -> None:
    out = run(preset)
    assert carried(out, "sandbox-namespace") == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": HOME,
            "labels": {
                "app.kubernetes.io/managed-by": "function-workspace-sandbox",
                WORKSPACE_LABEL: new_identity("alice-api"),
                TENANT_LABEL: NAMESPACE,
                **POD_SECURITY,
            },
        },
    }
    assert out.status["sandboxNamespace"] == HOME


@pytest.mark.parametrize("preset", PRESETS)
def test_once_placed_nothing_leaves_when_an_object_turns_unready(preset: str) -> None:
    settled, _ = settled_in_namespace(preset)
    for key in objects(settled):
        for broken in (applied(settled, failed=[key]), applied(settled, hold=[key])):
            out = run(preset, observed=broken)
            assert sorted(out.resources) == sorted(settled.resources), key
    everything = applied(settled, failed=objects(settled))
    assert sorted(run(preset, observed=everything).resources) == sorted(settled.resources)


@pytest.mark.parametrize("preset", PRESETS)
def test_the_workload_outlives_neither_its_policies_nor_its_namespace(preset: str) -> None:
    out, _ = settled_in_namespace(preset)
    workload = WORKLOAD[preset][0]
    uses = {
        k: (m["spec"]["of"]["resourceRef"]["name"], m["spec"]["by"]["resourceRef"]["name"])
        for k, m in out.resources.items()
        if m["kind"] == "Usage"
    }
    name = {k: out.resources[k]["metadata"]["name"] for k in objects(out)}
    assert uses == {
        f"usage-{used}": (name[used], name[workload])
        for used in ("cilium-policy", "network-policy", "sandbox-namespace")
    }
    for m in out.resources.values():
        if m["kind"] == "Usage":
            assert m["apiVersion"] == USAGE_API
            assert m["spec"]["of"]["apiVersion"] == m["spec"]["by"]["apiVersion"] == OBJECT_API
            assert m["spec"]["replayDeletion"] is True


NO_EXPOSURE = {"services": "1", "services.loadbalancers": "0", "services.nodeports": "0"}


@pytest.mark.parametrize(
    ("preset", "hard"),
    [
        pytest.param(
            ISOLATED,
            {
                # The VM (2 CPU, 4Gi) twice for a live migration, plus the preset's headroom;
                # CDI's clone fills the disk through a second claim, beside a worker pod.
                "requests.cpu": "5",
                "requests.memory": "9Gi",
                "requests.storage": "40Gi",
                "persistentvolumeclaims": "2",
                "pods": "3",
                **NO_EXPOSURE,
            },
            id="kubevirt",
        ),
        pytest.param(
            ISOLATED_KATA,
            {
                # The pod, its RuntimeClass overhead (250m, 320Mi) and the headroom.
                **{f"{k}.cpu": "2750m" for k in ("requests", "limits")},
                **{f"{k}.memory": "4928Mi" for k in ("requests", "limits")},
                **{f"{k}.ephemeral-storage": "2Gi" for k in ("requests", "limits")},
                "requests.storage": "20Gi",
                "persistentvolumeclaims": "1",
                "pods": "1",
                **NO_EXPOSURE,
            },
            id="kata",
        ),
    ],
)
def test_the_quota_holds_one_sandbox_and_exposes_nothing(preset: str, hard: dict[str, str]) -> None:
    out, _ = settled_in_namespace(preset)
    assert carried(out, "namespace-quota")["spec"] == {"hard": dict(sorted(hard.items()))}
    limits = carried(out, "namespace-limits")["spec"]["limits"]
    assert {"type": "PersistentVolumeClaim", "max": {"storage": "20Gi"}} in limits
