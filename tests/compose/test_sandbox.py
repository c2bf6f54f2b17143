"""Kata and gVisor sandboxes: the agent-sandbox Sandbox, its ServiceAccount, status and checks."""

from typing import Any

import pytest

from function.compose.names import new_identity, service_account_name, workspace_volume_name
from function.errors import FieldError
from function.render import Rendered, render
from tests.render.pod_security import all_violations
from tests.schemas import validate
from tests.support import (
    AGENT_IMAGE,
    AGENT_PLATFORM,
    NAMESPACE,
    NOW,
    PLATFORM,
    owned,
    owner_reference,
    platform,
    platform_input,
    workspace,
)

PRESETS = ["kata", "gvisor"]
IDENTITY = new_identity("alice-api")
CLAIM = workspace_volume_name(workspace())


def run(
    spec: dict[str, Any], observed: dict[str, Any] | None = None, p: Any = PLATFORM, **kw: Any
) -> Rendered:
    return render(workspace(spec), p, owned(observed), NOW, kw.get("required"))


def pod_spec(out: Rendered) -> dict[str, Any]:
    spec: dict[str, Any] = out.resources["sandbox"]["spec"]["podTemplate"]["spec"]
    return spec


def ready(status: str, reason: str = "", **extra: Any) -> dict[str, Any]:
    return {
        "status": {"conditions": [{"type": "Ready", "status": status, "reason": reason, **extra}]}
    }


@pytest.mark.parametrize("preset", PRESETS)
def test_a_pod_preset_renders_a_sandbox_and_no_vm(preset: str) -> None:
    out = run({"preset": preset})
    assert sorted(out.resources) == [
        "cilium-policy",
        "network-policy",
        "sandbox",
        "service",
        "service-account",
        "workspace-claim",
    ]
    for manifest in out.resources.values():
        applied = {**manifest, "metadata": {**manifest["metadata"], "namespace": NAMESPACE}}
        assert validate(applied) == [], manifest["kind"]


@pytest.mark.parametrize(
    "p", [PLATFORM, AGENT_PLATFORM], ids=["agent-from-the-image", "agent-delivered"]
)
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({}, id="defaults"),
        pytest.param(
            {"ports": [{"name": "preview", "port": 3000}], "power": "Suspended"},
            id="ports-suspended",
        ),
        pytest.param({"resources": {"cpu": "500m", "memory": "1Gi", "disk": "30Gi"}}, id="sized"),
    ],
)
def test_every_pod_passes_restricted_and_our_stricter_rules(
    preset: str, spec: dict[str, Any], p: Any
) -> None:
    out = run({"preset": preset, **spec}, p=p)
    account = out.resources["service-account"]["metadata"]["name"]
    assert all_violations(pod_spec(out), service_account=account) == []
    manifest = out.resources["sandbox"]
    applied = {**manifest, "metadata": {**manifest["metadata"], "namespace": NAMESPACE}}
    assert validate(applied) == []


PROBE = {
    "httpGet": {"path": "/health", "port": 49983},
    "initialDelaySeconds": 2,
    "periodSeconds": 5,
    "timeoutSeconds": 2,
    "failureThreshold": 3,
}
AGENT_ARGS = ["--address", "0.0.0.0:49983", "--root", "/workspace"]


@pytest.mark.parametrize("preset", PRESETS)
def test_a_delivered_agent_is_copied_in_first_and_run_read_only(preset: str) -> None:
    spec = pod_spec(run({"preset": preset}, p=AGENT_PLATFORM))
    (sandbox,) = spec["containers"]
    (copy,) = spec["initContainers"]
    # The sandbox container's CPU, which takes no more of the node: a pod's effective request is
    # the larger of its init containers' and its containers'.
    cpu = sandbox["resources"]["limits"]["cpu"]
    assert copy == {
        "name": "agent",
        "image": AGENT_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["cp", "-R", "/opt/workspace-sandbox-agent/.", "/agent"],
        "resources": {
            "requests": {"cpu": cpu, "memory": "64Mi", "ephemeral-storage": "64Mi"},
            "limits": {"cpu": cpu, "memory": "64Mi", "ephemeral-storage": "64Mi"},
        },
        # As hardened as the sandbox's own container.
        "securityContext": sandbox["securityContext"],
        "volumeMounts": [{"name": "agent", "mountPath": "/agent"}],
    }
    assert {"name": "agent", "emptyDir": {"sizeLimit": "128Mi"}} in spec["volumes"]
    assert sandbox["volumeMounts"][-1] == {
        "name": "agent",
        "mountPath": "/opt/workspace-sandbox-agent",
        "readOnly": True,
    }
    assert sandbox["command"] == [
        "/usr/bin/python3",
        "-I",
        "/opt/workspace-sandbox-agent/workspace-sandbox-agent",
        *AGENT_ARGS,
    ]
    assert sandbox["readinessProbe"] == PROBE


@pytest.mark.parametrize("preset", PRESETS)
def test_without_a_delivered_agent_the_pod_runs_the_images_own(preset: str) -> None:
    spec = pod_spec(run({"preset": preset}))
    (sandbox,) = spec["containers"]
    assert "initContainers" not in spec
    assert [v["name"] for v in spec["volumes"]] == ["workspace", "tmp"]
    assert [m["name"] for m in sandbox["volumeMounts"]] == ["workspace", "tmp"]
    assert sandbox["command"] == ["/usr/local/bin/workspace-sandbox-agent", *AGENT_ARGS]
    assert sandbox["readinessProbe"] == PROBE


def test_a_pod_sandbox_is_never_warned_about_the_agent() -> None:
    # Its image may carry the agent; a VM without input.agent can't.
    assert run({"preset": "kata"}).notices == {}


def test_a_cluster_dns_pod_preset_passes_too() -> None:
    presets = {
        **platform_input()["presets"],
        "kata": {**platform_input()["presets"]["kata"], "clusterDns": True},
    }
    out = run({"preset": "kata"}, p=platform(presets=presets))
    assert pod_spec(out)["dnsPolicy"] == "ClusterFirst"
    account = out.resources["service-account"]["metadata"]["name"]
    assert all_violations(pod_spec(out), service_account=account, cluster_dns=True) == []


def test_the_service_account_is_secrets_free() -> None:
    account = run({"preset": "kata"}).resources["service-account"]
    assert account == {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": service_account_name(workspace()),
            "labels": {
                "app.kubernetes.io/managed-by": "function-workspace-sandbox",
                "sandbox.cozystack.io/workspace": IDENTITY,
            },
        },
        "automountServiceAccountToken": False,
    }


@pytest.mark.parametrize(
    ("preset", "runtime_class"),
    [pytest.param("kata", "kata-clh", id="kata"), pytest.param("gvisor", "gvisor", id="gvisor")],
)
def test_the_runtime_class_comes_from_the_preset(preset: str, runtime_class: str) -> None:
    assert pod_spec(run({"preset": preset}))["runtimeClassName"] == runtime_class


def test_kata_defaults_to_cloud_hypervisor_when_the_preset_names_no_class() -> None:
    kata = {k: v for k, v in platform_input()["presets"]["kata"].items() if k != "runtimeClassName"}
    out = run({"preset": "kata"}, p=platform(presets={**platform_input()["presets"], "kata": kata}))
    assert pod_spec(out)["runtimeClassName"] == "kata-clh"


def test_the_runtime_overhead_is_added_so_the_sandbox_keeps_its_size() -> None:
    kata = pod_spec(run({"preset": "kata", "resources": {"cpu": "2", "memory": "4Gi"}}))[
        "containers"
    ][0]["resources"]
    assert kata["limits"] == {"cpu": "2250m", "memory": "4416Mi", "ephemeral-storage": "2Gi"}
    assert kata["requests"] == kata["limits"]
    gvisor = pod_spec(run({"preset": "gvisor", "resources": {"cpu": "2", "memory": "4Gi"}}))[
        "containers"
    ][0]["resources"]
    assert gvisor["limits"] == {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "2Gi"}


def test_the_workspace_claim_is_mounted_as_the_working_directory() -> None:
    out = run({"preset": "kata", "resources": {"disk": "30Gi"}})
    spec = out.resources["sandbox"]["spec"]
    assert "volumeClaimTemplates" not in spec
    assert out.resources["workspace-claim"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": CLAIM,
            "labels": {
                "app.kubernetes.io/managed-by": "function-workspace-sandbox",
                "sandbox.cozystack.io/workspace": IDENTITY,
            },
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "replicated",
            "resources": {"requests": {"storage": "30Gi"}},
        },
    }
    assert {
        "name": "workspace",
        "persistentVolumeClaim": {"claimName": CLAIM},
    } in spec["podTemplate"]["spec"]["volumes"]
    container = spec["podTemplate"]["spec"]["containers"][0]
    assert container["workingDir"] == "/workspace"
    assert {"name": "workspace", "mountPath": "/workspace"} in container["volumeMounts"]
    assert spec["podTemplate"]["metadata"]["labels"] == {
        "sandbox.cozystack.io/workspace": IDENTITY,
        "sandbox.cozystack.io/egress": "Internet",
    }
    assert spec["service"] is False


@pytest.mark.parametrize(("power", "mode"), [("Running", "Running"), ("Suspended", "Suspended")])
def test_power_sets_the_operating_mode(power: str, mode: str) -> None:
    assert (
        run({"preset": "gvisor", "power": power}).resources["sandbox"]["spec"]["operatingMode"]
        == mode
    )


def test_snapshots_are_of_the_sandbox_claim() -> None:
    # A sandbox made before composed names carried a hash keeps the names it has.
    observed = {
        "sandbox": {"metadata": {"name": "alice-api"}, **ready("True", "DependenciesReady")},
        "workspace-claim": {
            "metadata": {"name": "alice-api-workspace"},
            "spec": {},
            "status": {"phase": "Bound"},
        },
    }
    out = run({"preset": "kata", "snapshots": [{"name": "nightly"}]}, observed)
    assert out.resources["snapshot-nightly"]["spec"]["source"] == {
        "persistentVolumeClaimName": "alice-api-workspace"
    }
    assert out.status["workspaceVolume"] == "alice-api-workspace"


def test_an_older_sandbox_snapshots_its_templated_claim() -> None:
    claims = [{"metadata": {"name": "workspace"}, "spec": {}}]
    observed = {
        "sandbox": {
            "metadata": {"name": "alice-api"},
            **ready("True", "DependenciesReady"),
            "spec": {"volumeClaimTemplates": claims},
        }
    }
    out = run({"preset": "kata", "snapshots": [{"name": "nightly"}]}, observed)
    assert out.resources["snapshot-nightly"]["spec"]["source"] == {
        "persistentVolumeClaimName": "workspace-alice-api"
    }
    assert out.status["workspaceVolume"] == "workspace-alice-api"
    assert "workspace-claim" not in out.resources


def test_restore_puts_the_snapshot_on_the_claim_once_it_is_ready() -> None:
    spec = {"preset": "kata", "restoreFrom": {"snapshot": "bob-frontend-nightly"}}
    waiting = run(spec)
    assert "sandbox" not in waiting.resources
    snapshot = {
        "metadata": {"ownerReferences": [owner_reference("bob-frontend")]},
        "status": {"readyToUse": True, "restoreSize": "25Gi"},
    }
    out = run(spec, required={"restore-snapshot": [snapshot]})
    claim = out.resources["workspace-claim"]["spec"]
    assert claim["dataSource"] == {
        "apiGroup": "snapshot.storage.k8s.io",
        "kind": "VolumeSnapshot",
        "name": "bob-frontend-nightly",
    }
    assert claim["resources"]["requests"]["storage"] == "25Gi"


def test_an_existing_sandbox_keeps_its_claim_templates() -> None:
    claims = [
        {
            "metadata": {"name": "workspace"},
            "spec": {"storageClassName": "old", "resources": {"requests": {"storage": "20Gi"}}},
        }
    ]
    out = run(
        {"preset": "kata", "resources": {"disk": "50Gi"}},
        {"sandbox": {"spec": {"volumeClaimTemplates": claims}}},
    )
    assert out.resources["sandbox"]["spec"]["volumeClaimTemplates"] == claims
    # The templated claim is mounted by the controller under the template's name.
    volumes = out.resources["sandbox"]["spec"]["podTemplate"]["spec"]["volumes"]
    assert [v["name"] for v in volumes] == ["tmp"]
    assert "workspace-claim" not in out.resources


@pytest.mark.parametrize(
    ("power", "observed", "phase", "reason", "ready_flag"),
    [
        pytest.param("Running", None, "Pending", "Creating", False, id="not-created"),
        pytest.param(
            "Running",
            ready("False", "DependenciesNotReady", message="Pod is Pending"),
            "Provisioning",
            "StartingPod",
            False,
            id="starting",
        ),
        pytest.param(
            "Running",
            ready("True", "DependenciesReady"),
            "Running",
            "Provisioned",
            True,
            id="running",
        ),
        pytest.param(
            "Running",
            ready("False", "PodFailed", message="exit 1"),
            "Failed",
            "SandboxFailed",
            False,
            id="failed",
        ),
        pytest.param(
            "Running",
            ready("False", "ReconcilerError", lastTransitionTime="2026-11-29T11:59:00Z"),
            "Provisioning",
            "ControllerRetrying",
            False,
            id="controller-retrying",
        ),
        pytest.param(
            "Running",
            ready("False", "ReconcilerError", lastTransitionTime="2026-11-29T11:58:00Z"),
            "Failed",
            "SandboxFailed",
            False,
            id="controller-retrying-past-the-grace",
        ),
        pytest.param(
            "Running",
            ready("False", "ReconcilerError", lastTransitionTime="yesterday"),
            "Failed",
            "SandboxFailed",
            False,
            id="controller-retrying-since-an-unreadable-time",
        ),
        pytest.param(
            "Running",
            ready("False", "ReconcilerError"),
            "Failed",
            "SandboxFailed",
            False,
            id="controller-retrying-since-no-time",
        ),
        pytest.param(
            "Suspended",
            ready("False", "SandboxSuspended"),
            "Suspending",
            "Provisioned",
            False,
            id="suspending",
        ),
        pytest.param(
            "Suspended",
            {
                "status": {
                    "conditions": [
                        {"type": "Suspended", "status": "True", "reason": "PodTerminated"}
                    ]
                }
            },
            "Suspended",
            "Provisioned",
            True,
            id="suspended",
        ),
    ],
)
def test_status_and_readiness_follow_the_observed_sandbox(
    power: str, observed: Any, phase: str, reason: str, ready_flag: bool
) -> None:
    out = run({"preset": "kata", "power": power}, {"sandbox": observed} if observed else {})
    provisioned = next(c for c in out.conditions if c.type == "Provisioned")
    assert (out.status["phase"], provisioned.reason) == (phase, reason)
    assert out.ready.get("sandbox") is ready_flag
    assert out.composite_ready is (phase == "Running")


def _claim(size: str, **spec: Any) -> dict[str, Any]:
    return {
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "replicated",
            "resources": {"requests": {"storage": size}},
            "volumeMode": "Filesystem",
            "volumeName": "pvc-1234",
            **spec,
        },
        "status": {"phase": "Bound", "capacity": {"storage": size}},
    }


def test_a_pod_sandbox_disk_grows_by_raising_its_claim() -> None:
    observed = {"sandbox": ready("True"), "workspace-claim": _claim("30Gi")}
    grown = run({"preset": "kata", "resources": {"disk": "40Gi"}}, observed)
    assert grown.warnings == []
    assert grown.resources["workspace-claim"]["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "replicated",
        "volumeMode": "Filesystem",
        "resources": {"requests": {"storage": "40Gi"}},
    }


def test_a_claim_keeps_what_is_fixed_at_creation() -> None:
    source = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "old"}
    observed = {
        "sandbox": ready("True"),
        "workspace-claim": _claim("30Gi", storageClassName="old-class", dataSource=source),
    }
    changed = {**platform_input()["presets"]["kata"], "storageClass": "new-class"}
    p = platform(presets={**platform_input()["presets"], "kata": changed})
    out = run({"preset": "kata", "restoreFrom": {"snapshot": "old"}}, observed, p=p)
    spec = out.resources["workspace-claim"]["spec"]
    assert (spec["storageClassName"], spec["dataSource"]) == ("old-class", source)
    # No size in the spec keeps the disk's, even where the preset's default is smaller.
    assert spec["resources"] == {"requests": {"storage": "30Gi"}}


def test_a_pod_sandbox_claim_never_shrinks() -> None:
    observed = {"sandbox": ready("True"), "workspace-claim": _claim("30Gi")}
    with pytest.raises(FieldError) as err:
        run({"preset": "kata", "resources": {"disk": "20Gi"}}, observed)
    assert str(err.value) == (
        "spec.resources.disk: 20Gi is smaller than the workspace disk already is (30Gi); "
        "disks never shrink"
    )


def test_a_pod_sandbox_disk_never_shrinks_and_warns_on_growth() -> None:
    claims = [
        {
            "metadata": {"name": "workspace"},
            "spec": {"resources": {"requests": {"storage": "30Gi"}}},
        }
    ]
    observed = {"sandbox": {"spec": {"volumeClaimTemplates": claims}}}
    with pytest.raises(FieldError) as err:
        run({"preset": "kata", "resources": {"disk": "20Gi"}}, observed)
    assert (
        str(err.value)
        == "spec.resources.disk: 20Gi is smaller than the workspace disk already is (30Gi); disks never shrink"
    )
    grown = run({"preset": "kata", "resources": {"disk": "40Gi"}}, observed)
    assert grown.warnings == [
        "spec.resources.disk: the workspace disk stays at 30Gi; this Sandbox's claim template can't change after creation"
    ]
