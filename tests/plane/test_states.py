"""ComputePlane placements: from a missing plane to a running, suspended and grown sandbox."""

from collections.abc import Mapping
from typing import Any

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.compose.kubernetes_object import (
    STATEFULSET_RUNNING,
    STATEFULSET_STOPPED,
    condition_query,
)
from function.compose.names import (
    EGRESS_LABEL,
    WORKSPACE_LABEL,
    object_name,
    plane_name,
    snapshot_name,
)
from function.errors import FieldError
from function.fn import FunctionRunner
from function.model import Manifest
from function.render import Rendered, render
from tests.cluster import Observed, applied
from tests.plane.provider import (
    ALICE_API,
    BOTH,
    CLAIM,
    DEDICATED,
    DEDICATED_MANAGEMENT,
    IDENTITY,
    IN_PLANE,
    LABELS,
    OBJECT_API,
    PLACEMENTS,
    PLANE_API,
    PROVIDER_CONFIG,
    SHARED,
    STAGE_TWO,
    Placement,
    Required,
    inner,
    plane_world,
    pod_spec,
    pod_template,
    provisioned,
    run,
    settled_in_plane,
)
from tests.support import (
    NAMESPACE,
    NOW,
    owned,
    platform_input,
    request,
    results,
    workspace,
)


def _status(p: Placement, phase: str, **extra: Any) -> dict[str, Any]:
    return {
        "phase": phase,
        "preset": p.preset,
        "runtime": p.runtime,
        "placement": p.placement,
        "snapshots": [],
        "computePlane": p.plane,
        **extra,
    }


def asked(out: Rendered) -> dict[str, dict[str, str]]:
    """What the render requires besides the look-ups of the names it is about to take."""
    return {k: v for k, v in out.requirements.items() if not k.startswith("existing-")}


def _requirements(p: Placement, *, observed: bool = False) -> dict[str, dict[str, str]]:
    secret = {"apiVersion": "v1", "kind": "Secret", "name": p.secret, "namespace": NAMESPACE}
    # A shared plane is looked up; a dedicated one too, until its Object is observed, so that
    # one of its name that already exists is refused (test_a_plane_of_the_name_is_never_taken).
    if p.dedicated and observed:
        return {"plane-kubeconfig": secret}
    plane = {"apiVersion": PLANE_API, "kind": "ComputePlane", "name": p.plane}
    return {"plane-kubeconfig": secret, "compute-plane": {**plane, "namespace": NAMESPACE}}


@pytest.mark.parametrize(
    ("p", "message"),
    [
        pytest.param(
            SHARED,
            "ComputePlane 'computeplane' does not exist in namespace 'tenant-acme'; preset "
            "'shared-plane' places sandboxes into it, so create it first",
            id="shared-requirement-answered-empty",
        ),
        pytest.param(
            DEDICATED,
            f"waiting for ComputePlane {DEDICATED.plane!r} to be created",
            id="dedicated-not-observed-yet",
        ),
    ],
)
def test_a_missing_plane_gets_nothing_placed_into_it(p: Placement, message: str) -> None:
    observed, required = plane_world(p, exists=False)
    out = run(p, {}, observed, required)
    assert sorted(out.resources) == p.own
    assert out.status == _status(p, "Pending")
    assert provisioned(out) == ("False", "WaitingForComputePlane", message)
    assert asked(out) == _requirements(p)
    assert out.composite_ready is False
    # Crossplane's first call carries no required resources at all: the same answer.
    assert run(p, {}, observed).resources == out.resources


def test_a_dedicated_plane_is_composed_from_the_preset() -> None:
    """Through a provider-kubernetes Object: Cozystack's API server keeps no owner reference on
    the plane, and the Object, which the garbage collector deletes with the XR, deletes it."""
    out = run(DEDICATED)
    assert out.resources["compute-plane"] == {
        "apiVersion": OBJECT_API,
        "kind": "Object",
        "metadata": {"name": object_name(ALICE_API, "compute-plane"), "labels": LABELS},
        "spec": {
            "forProvider": {
                "manifest": {
                    "apiVersion": PLANE_API,
                    "kind": "ComputePlane",
                    "metadata": {
                        "name": DEDICATED.plane,
                        "labels": LABELS,
                        "namespace": NAMESPACE,
                    },
                    "spec": {
                        "nodeGroups": {
                            "md0": {
                                "minReplicas": 1,
                                "maxReplicas": 1,
                                "instanceType": "u1.xlarge",
                                "diskSize": "40Gi",
                                "roles": ["ingress-nginx"],
                                "storageClass": "replicated",
                            }
                        }
                    },
                }
            },
            "providerConfigRef": {
                "kind": "ClusterProviderConfig",
                "name": "workspace-sandbox-planes",
            },
            "readiness": {"policy": "DeriveFromCelQuery", "celQuery": condition_query("Ready")},
        },
    }
    assert out.ready == {
        "compute-plane": False,
        "plane-workers": False,
        "usage-plane-workers": False,
    }


def test_a_plane_of_the_name_is_never_taken() -> None:
    """A ComputePlane that exists under the name the sandbox's plane would take is refused
    before the Object is created: the provider would adopt it and delete it with the sandbox."""
    _, required = plane_world(DEDICATED)
    taken = {"apiVersion": PLANE_API, "kind": "ComputePlane", "metadata": {"name": DEDICATED.plane}}
    with pytest.raises(FieldError) as err:
        run(DEDICATED, {}, {}, {**required, "compute-plane": [taken]})
    assert err.value.path == "metadata.name"
    assert err.value.message == (
        f"the ComputePlane {DEDICATED.plane!r} this sandbox would create (compute-plane) already "
        "exists; a sandbox never takes over an object it did not create, and deleting the "
        f"sandbox would delete that plane. Delete it (kubectl delete computeplane "
        f"{DEDICATED.plane} -n {NAMESPACE}) or give the sandbox another name"
    )
    # The sandbox's own Object, existing though not observed (its reference lost): its plane.
    carrier = owned({"compute-plane": plane_world(DEDICATED)[0]["compute-plane"]})
    found = {
        **required,
        "compute-plane": [taken],
        "existing-compute-plane": [carrier["compute-plane"]],
    }
    out = run(DEDICATED, {}, {}, found)
    assert "compute-plane" in out.resources
    # Once the Object is observed, the plane it made is its own: no longer looked up.
    observed, required = plane_world(DEDICATED)
    out = run(DEDICATED, {}, observed, {**required, "compute-plane": [taken]})
    assert "compute-plane" not in asked(out)


def test_a_plane_object_not_reporting_yet_waits_for_the_plane() -> None:
    observed, required = plane_world(DEDICATED)
    reporting = observed["compute-plane"]
    observed["compute-plane"] = {k: v for k, v in reporting.items() if k != "status"}
    out = run(DEDICATED, {}, observed, required)
    message = f"waiting for ComputePlane {DEDICATED.plane!r} to be created"
    assert provisioned(out) == ("False", "WaitingForComputePlane", message)
    assert sorted(out.resources) == DEDICATED.own


@pytest.mark.parametrize("p", BOTH)
@pytest.mark.parametrize(
    ("condition", "why"),
    [
        pytest.param(
            {"status": "False", "reason": "Reconciling", "message": "HelmRelease is installing"},
            "HelmRelease is installing",
            id="its-message",
        ),
        pytest.param({"status": "False", "reason": "Reconciling"}, "Reconciling", id="its-reason"),
        pytest.param({"status": "Unknown"}, "not reported yet", id="unknown"),
        pytest.param(None, "not reported yet", id="no-condition"),
    ],
)
def test_an_unready_plane_gets_nothing_placed_into_it(
    p: Placement, condition: dict[str, str] | None, why: str
) -> None:
    observed, required = plane_world(p, condition)
    out = run(p, {}, observed, required)
    assert sorted(out.resources) == p.own
    assert out.status == _status(p, "Pending")
    message = f"waiting for ComputePlane {p.plane!r} to be ready: {why}"
    assert provisioned(out) == ("False", "WaitingForComputePlane", message)
    assert asked(out) == _requirements(p, observed=True)


@pytest.mark.parametrize("p", BOTH)
def test_a_ready_plane_without_its_kubeconfig_gets_nothing_placed(p: Placement) -> None:
    observed, required = plane_world(p, secret=False)
    out = run(p, {}, observed, required)
    assert sorted(out.resources) == p.own
    message = f"waiting for ComputePlane {p.plane!r}'s kubeconfig Secret {p.secret!r}"
    assert provisioned(out) == ("False", "WaitingForComputePlane", message)
    assert out.status["phase"] == "Pending"


@pytest.mark.parametrize("p", BOTH)
def test_a_ready_plane_gets_its_access_and_the_namespace_first(p: Placement) -> None:
    observed, required = plane_world(p)
    out = run(p, {}, observed, required)
    assert sorted(out.resources) == sorted(p.own + p.stage_one)
    assert out.resources["plane-access"] == {
        "apiVersion": OBJECT_API,
        "kind": "ProviderConfig",
        "metadata": {
            "name": PROVIDER_CONFIG,
            "labels": LABELS,
            # The plane it was placed in, which it never leaves.
            "annotations": {"sandbox.cozystack.io/compute-plane": p.plane},
        },
        "spec": {
            "credentials": {
                "source": "Secret",
                "secretRef": {"namespace": NAMESPACE, "name": p.secret, "key": "super-admin.svc"},
            }
        },
    }
    management = {"managementPolicies": DEDICATED_MANAGEMENT} if p.dedicated else {}
    assert out.resources["plane-namespace"] == {
        "apiVersion": OBJECT_API,
        "kind": "Object",
        "metadata": {"name": object_name(ALICE_API, "plane-namespace"), "labels": LABELS},
        "spec": {
            "forProvider": {
                "manifest": {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": IN_PLANE,
                        "labels": {
                            **LABELS,
                            "pod-security.kubernetes.io/enforce": "restricted",
                            "pod-security.kubernetes.io/audit": "restricted",
                            "pod-security.kubernetes.io/warn": "restricted",
                        },
                    },
                }
            },
            "providerConfigRef": {"kind": "ProviderConfig", "name": PROVIDER_CONFIG},
            "readiness": {
                "policy": "DeriveFromCelQuery",
                "celQuery": "has(object.status) && object.status.phase == 'Active'",
            },
            **management,
        },
    }
    assert out.ready == dict.fromkeys(p.own + p.stage_one, False) | (
        {"compute-plane": True} if p.dedicated else {}
    )
    assert out.status == _status(p, "Provisioning")


def _after(p: Placement, spec: Mapping[str, Any], steps: int, **provider: Any) -> Rendered:
    """Render, apply and observe `steps` times, the last observation shaped by `provider`."""
    world, required = plane_world(p)
    observed: Observed = {}
    for i in range(steps + 1):
        out = run(p, spec, {**observed, **world}, required)
        observed = applied(out, **(provider if i == steps - 1 else {}))
    return out


@pytest.mark.parametrize("p", PLACEMENTS)
def test_an_unready_namespace_holds_everything_else_back(p: Placement) -> None:
    out = _after(p, {}, 1, hold=["plane-namespace"])
    assert sorted(out.resources) == sorted(p.own + p.stage_one)


@pytest.mark.parametrize("p", PLACEMENTS)
def test_a_ready_namespace_lets_policies_quota_and_claim_in(p: Placement) -> None:
    out = _after(p, {}, 1)
    assert sorted(out.resources) == sorted(p.own + p.stage_one + STAGE_TWO)
    namespaces = {inner(out, k)["metadata"].get("namespace") for k in STAGE_TWO}
    assert namespaces == {IN_PLANE}
    assert out.status["phase"] == "Provisioning"


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize(
    ("steps", "provider", "waiting"),
    [
        pytest.param(
            0, {}, ["plane-guard", "plane-namespace", "plane-workers"], id="nothing-observed"
        ),
        pytest.param(1, {"hold": ["plane-namespace"]}, ["plane-namespace"], id="namespace-unready"),
        pytest.param(1, {}, STAGE_TWO, id="stage-two-not-observed"),
        pytest.param(
            2,
            {"failed": ["cilium-policy", "plane-quota"]},
            ["cilium-policy", "plane-quota"],
            id="stage-two-partly-unready",
        ),
    ],
)
def test_placing_says_what_it_waits_for(
    p: Placement, steps: int, provider: dict[str, list[str]], waiting: list[str]
) -> None:
    out = _after(p, {}, steps, **provider)
    shown = ", ".join(sorted(waiting))
    message = f"placing the sandbox into ComputePlane {p.plane!r}: waiting for {shown}"
    assert provisioned(out) == ("False", "PlacingInComputePlane", message)
    assert out.status["phase"] == "Provisioning"


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize(
    ("provider", "placed"),
    [
        pytest.param({}, True, id="all-ready"),
        # A WaitForFirstConsumer claim binds only once its pod exists.
        pytest.param({"hold": ["workspace-claim"]}, True, id="claim-pending-is-enough"),
        pytest.param({"hold": ["plane-quota"]}, True, id="quota-without-status-is-applied"),
        pytest.param({"failed": ["cilium-policy"]}, False, id="policy-not-applied"),
        pytest.param({"failed": ["network-policy"]}, False, id="network-policy-not-applied"),
        pytest.param({"failed": ["service-account"]}, False, id="service-account-not-applied"),
        pytest.param({"failed": ["plane-limits"]}, False, id="limits-not-applied"),
    ],
)
def test_the_workload_waits_for_every_part_of_stage_two(
    p: Placement, provider: dict[str, list[str]], placed: bool
) -> None:
    out = _after(p, {}, 2, **provider)
    assert (p.workload in out.resources) is placed
    if not placed:
        assert sorted(out.resources) == sorted(p.own + p.stage_one + STAGE_TWO)


@pytest.mark.parametrize("p", PLACEMENTS)
def test_the_workload_comes_last_and_runs_one_pod(p: Placement) -> None:
    out = _after(p, {}, 2)
    assert sorted(out.resources) == sorted(p.own + p.stage_one + STAGE_TWO + p.with_workload)
    workload = inner(out, p.workload)
    assert workload["metadata"]["namespace"] == IN_PLANE
    assert pod_template(workload)["metadata"]["labels"] == {
        WORKSPACE_LABEL: IDENTITY,
        EGRESS_LABEL: "Internet",
    }
    if p.workload == "statefulset":
        # A StatefulSet's selector can't change: it stays the identity alone.
        assert workload["spec"]["selector"] == {"matchLabels": {WORKSPACE_LABEL: IDENTITY}}
    if p.workload == "statefulset":
        assert workload["spec"]["replicas"] == 1
        assert out.resources[p.workload]["spec"]["readiness"]["celQuery"] == STATEFULSET_RUNNING
    else:
        assert workload["spec"]["operatingMode"] == "Running"
        assert out.resources[p.workload]["spec"]["readiness"]["celQuery"] == condition_query(
            "Ready"
        )
    volumes = pod_spec(workload)["volumes"]
    assert volumes[0] == {
        "name": "workspace",
        "persistentVolumeClaim": {"claimName": CLAIM},
    }
    assert inner(out, "workspace-claim")["metadata"]["name"] == CLAIM


@pytest.mark.parametrize("p", PLACEMENTS)
def test_a_ready_workload_makes_the_sandbox_running(p: Placement) -> None:
    out, _ = settled_in_plane(p)
    assert out.status == _status(
        p,
        "Running",
        endpoint=f"{IDENTITY}.{IN_PLANE}.svc",
        workspaceVolume=CLAIM,
    )
    assert [(c.type, c.status, c.reason, c.message) for c in out.conditions] == [
        ("Provisioned", "True", "Provisioned", "the pod is running and ready"),
        ("Suspended", "False", "PowerRunning", "spec.power is Running"),
        ("Snapshots", "True", "Ready", "none requested"),
    ]
    assert out.composite_ready is True
    assert set(out.ready.values()) == {True}


@pytest.mark.parametrize("p", PLACEMENTS)
def test_dedicated_plane_objects_never_delete_but_snapshots_still_do(
    p: Placement,
) -> None:
    out, _ = settled_in_plane(p, {"snapshots": [{"name": "nightly"}]})
    assert "snapshot-nightly" in out.resources
    for key, m in out.resources.items():
        if m["kind"] != "Object":
            continue
        # The guard in the plane is never deleted, in any plane.
        # The dedicated plane's own Object is what deletes the plane, and everything in it.
        keep = key == "plane-guard" or (
            p.dedicated and not key.startswith("snapshot-") and key != "compute-plane"
        )
        assert m["spec"].get("managementPolicies") == (DEDICATED_MANAGEMENT if keep else None), key


@pytest.mark.parametrize("p", PLACEMENTS)
def test_a_snapshot_waits_for_the_workspace_claim_then_snapshots_it(p: Placement) -> None:
    spec = {"snapshots": [{"name": "nightly"}]}
    early = _after(p, spec, 2)
    assert p.workload in early.resources
    assert "snapshot-nightly" not in early.resources
    entry = {"name": "nightly", "volumeSnapshot": snapshot_name(ALICE_API, "nightly")}
    assert early.status["snapshots"] == [
        {
            **entry,
            "readyToUse": False,
            "state": "Waiting",
            "message": "waiting for the workspace disk to be created",
        }
    ]
    out, _ = settled_in_plane(p, spec)
    assert inner(out, "snapshot-nightly") == {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": snapshot_name(ALICE_API, "nightly"),
            "labels": LABELS,
            "annotations": {"sandbox.cozystack.io/consistency": "Crash"},
            "namespace": IN_PLANE,
        },
        "spec": {
            "volumeSnapshotClassName": "kubevirt",
            "source": {"persistentVolumeClaimName": CLAIM},
        },
    }
    assert out.status["snapshots"] == [
        {
            **entry,
            "readyToUse": True,
            "restoreSize": "20Gi",
            "creationTime": "2026-11-29T11:00:00Z",
            "consistency": "Crash",
            "state": "Ready",
        }
    ]


@pytest.mark.parametrize("p", PLACEMENTS)
def test_suspending_scales_the_pod_away_and_keeps_the_claim(p: Placement) -> None:
    _, running = settled_in_plane(p)
    world, required = plane_world(p)
    out = run(p, {"power": "Suspended"}, running, required)
    assert sorted(out.resources) == sorted(running)
    if p.workload == "statefulset":
        assert inner(out, "statefulset")["spec"]["replicas"] == 0
        assert out.resources["statefulset"]["spec"]["readiness"]["celQuery"] == STATEFULSET_STOPPED
        stopping = "waiting for the StatefulSet to scale to zero"
    else:
        assert inner(out, "sandbox")["spec"]["operatingMode"] == "Suspended"
        query = out.resources["sandbox"]["spec"]["readiness"]["celQuery"]
        assert query == condition_query("Suspended")
        stopping = "waiting for the pod to terminate (Running)"
    assert inner(out, "workspace-claim") == inner(settled_in_plane(p)[0], "workspace-claim")
    assert out.status["phase"] == "Suspending"
    assert [(c.type, c.status, c.reason, c.message) for c in out.conditions[:2]] == [
        ("Provisioned", "True", "Provisioned", "the workspace claim is kept"),
        ("Suspended", "False", "Suspending", stopping),
    ]

    stopped = run(p, {"power": "Suspended"}, {**applied(out), **world}, required)
    assert stopped.status == _status(
        p,
        "Suspended",
        endpoint=f"{IDENTITY}.{IN_PLANE}.svc",
        workspaceVolume=CLAIM,
    )
    assert [(c.type, c.status, c.reason, c.message) for c in stopped.conditions[:2]] == [
        ("Provisioned", "True", "Provisioned", "the workspace claim is kept"),
        ("Suspended", "True", "Suspended", "the pod is gone; the workspace is kept"),
    ]
    assert "workspace-claim" in stopped.resources
    assert stopped.composite_ready is False


GONE = {
    "shared-plane": "ComputePlane 'computeplane' does not exist in namespace 'tenant-acme'; preset "
    "'shared-plane' places sandboxes into it, so create it first",
    "dedicated-plane": f"waiting for ComputePlane {DEDICATED.plane!r} to be created",
}


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize(
    ("world", "why"),
    [
        pytest.param(
            {"plane": {"status": "False", "reason": "Upgrading"}},
            "waiting for ComputePlane {plane!r} to be ready: Upgrading",
            id="plane-unready",
        ),
        pytest.param(
            {"secret": False},
            "waiting for ComputePlane {plane!r}'s kubeconfig Secret {secret!r}",
            id="kubeconfig-gone",
        ),
        pytest.param({"exists": False}, "{gone}", id="plane-gone"),
    ],
)
def test_a_plane_that_stops_being_ready_never_shrinks_the_desired_state(
    p: Placement, world: dict[str, Any], why: str
) -> None:
    spec = {"snapshots": [{"name": "nightly"}], "ports": [{"name": "preview", "port": 3000}]}
    settled_out, running = settled_in_plane(p, spec)
    observed, required = plane_world(p, **world)
    placed = {k: v for k, v in running.items() if k != "compute-plane"}
    out = run(p, spec, {**placed, **observed}, required)
    assert out.resources == settled_out.resources
    assert out.status["phase"] == "Pending"
    message = why.format(plane=p.plane, secret=p.secret, gone=GONE[p.preset])
    assert provisioned(out) == ("False", "WaitingForComputePlane", message)
    assert out.composite_ready is False


@pytest.mark.parametrize("p", PLACEMENTS)
def test_a_larger_disk_grows_the_claim(p: Placement) -> None:
    _, running = settled_in_plane(p, {"resources": {"disk": "20Gi"}})
    _, required = plane_world(p)
    out = run(p, {"resources": {"disk": "30Gi"}}, running, required)
    assert out.warnings == []
    claim = inner(out, "workspace-claim")
    assert claim == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "labels": LABELS, "namespace": IN_PLANE},
        "spec": {
            "resources": {"requests": {"storage": "30Gi"}},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "kubevirt",
        },
    }
    # The quota and limit range make room for it.
    assert inner(out, "plane-quota")["spec"]["hard"]["requests.storage"] == "30Gi"
    assert inner(out, "plane-limits")["spec"]["limits"][1] == {
        "type": "PersistentVolumeClaim",
        "max": {"storage": "30Gi"},
    }
    # Leaving the size out later keeps the grown size.
    _, grown = settled_in_plane(p, {"resources": {"disk": "30Gi"}}, running)
    kept = run(p, {}, grown, required)
    assert inner(kept, "workspace-claim")["spec"]["resources"] == {"requests": {"storage": "30Gi"}}


SHRUNK = (
    "spec.resources.disk: 25Gi is smaller than the workspace disk already is (30Gi); "
    "disks never shrink"
)


@pytest.mark.parametrize("p", PLACEMENTS)
def test_a_smaller_disk_is_refused(p: Placement) -> None:
    _, running = settled_in_plane(p, {"resources": {"disk": "30Gi"}})
    _, required = plane_world(p)
    with pytest.raises(FieldError) as err:
        run(p, {"resources": {"disk": "25Gi"}}, running, required)
    assert str(err.value) == SHRUNK


def _required_request(
    composite: Manifest, observed: Observed, required: Required, step_input: Manifest
) -> fnv1.RunFunctionRequest:
    req = request(composite, observed, step_input)
    for name, found in required.items():
        items = req.required_resources[name].items
        for obj in found:
            items.add().resource.update(obj)
    return req


@pytest.mark.parametrize("p", BOTH)
async def test_a_smaller_disk_is_one_fatal_result_at_the_edge(p: Placement) -> None:
    _, running = settled_in_plane(p, {"resources": {"disk": "30Gi"}})
    _, required = plane_world(p)
    composite = {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": "alice-api", "namespace": NAMESPACE},
        "spec": {"image": "ubuntu-24.04", "preset": p.preset, "resources": {"disk": "25Gi"}},
    }
    req = _required_request(composite, running, required, platform_input())
    rsp = await FunctionRunner(clock=lambda: NOW).RunFunction(req, None)
    assert [(r.severity, r.message) for r in results(rsp)] == [(fnv1.SEVERITY_FATAL, SHRUNK)]


@pytest.mark.parametrize("p", BOTH)
async def test_the_edge_renders_a_placed_sandbox_as_the_core_does(p: Placement) -> None:
    spec = {"snapshots": [{"name": "nightly"}], "resources": {"disk": "30Gi"}}
    out, running = settled_in_plane(p, spec)
    _, required = plane_world(p)
    composite = {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": "alice-api", "namespace": NAMESPACE},
        "spec": {"image": "ubuntu-24.04", "preset": p.preset, **spec},
    }
    req = _required_request(composite, running, required, platform_input())
    rsp = await FunctionRunner(clock=lambda: NOW).RunFunction(req, None)
    assert results(rsp) == []
    desired = {k: resource.struct_to_dict(v.resource) for k, v in rsp.desired.resources.items()}
    assert desired == out.resources
    assert {k: v.ready == fnv1.READY_TRUE for k, v in rsp.desired.resources.items()} == out.ready


UNFETCHED = {
    "shared": (
        "spec.preset: this Crossplane doesn't fetch required resources, so ComputePlane "
        "'computeplane' and Secret 'computeplane-cluster-admin-kubeconfig' can't be looked "
        "up; the sandbox can't be placed into ComputePlane 'computeplane' until they can"
    ),
    "dedicated": (
        "spec.preset: this Crossplane doesn't fetch required resources, so Secret "
        f"'{plane_name(ALICE_API)}-cluster-admin-kubeconfig' can't be looked up; the sandbox "
        f"can't be placed into ComputePlane '{plane_name(ALICE_API)}' until it can"
    ),
}


@pytest.mark.parametrize("p", BOTH)
async def test_a_crossplane_without_required_resources_is_told_what_the_plane_needs(
    p: Placement,
) -> None:
    """The warning names what was required: the plane and its Secret, not a restore."""
    world, _ = plane_world(p)
    composite = {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": "alice-api", "namespace": NAMESPACE},
        "spec": {"image": "ubuntu-24.04", "preset": p.preset},
    }
    req = request(composite, world)
    req.meta.capabilities.extend([fnv1.CAPABILITY_CAPABILITIES, fnv1.CAPABILITY_CONDITIONS])
    rsp = await FunctionRunner(clock=lambda: NOW).RunFunction(req, None)
    unsupported = [r for r in results(rsp) if r.reason == "RequiredResourcesUnsupported"]
    assert [(r.severity, r.message) for r in unsupported] == [
        (fnv1.SEVERITY_WARNING, UNFETCHED["dedicated" if p.dedicated else "shared"])
    ]


RESTORE_REFUSED = (
    "spec.restoreFrom: preset {preset!r} places each sandbox in its own namespace of a "
    "ComputePlane, and a claim can only be restored from a snapshot in its own namespace; "
    "restore into a sandbox of a Namespace preset"
)


@pytest.mark.parametrize("p", BOTH)
@pytest.mark.parametrize(
    "world",
    [
        pytest.param({}, id="plane-ready"),
        # Refused at once: a dedicated plane would otherwise be built for a spec it can't run.
        pytest.param({"exists": False}, id="plane-missing"),
        pytest.param({"plane": {"status": "False"}}, id="plane-unready"),
    ],
)
def test_a_restore_is_refused_in_a_plane(p: Placement, world: dict[str, Any]) -> None:
    observed, required = plane_world(p, **world)
    with pytest.raises(FieldError) as err:
        run(p, {"restoreFrom": {"snapshot": "bob-frontend-nightly"}}, observed, required)
    assert str(err.value) == RESTORE_REFUSED.format(preset=p.preset)


@pytest.mark.parametrize(
    ("was", "now"),
    [
        # Dropping the composed plane would delete it, and the workspace in it.
        pytest.param(DEDICATED, SHARED, id="dedicated-to-shared"),
        pytest.param(SHARED, DEDICATED, id="shared-to-dedicated"),
    ],
)
def test_a_placed_sandbox_stays_in_its_plane(was: Placement, now: Placement) -> None:
    _, running = settled_in_plane(was)
    observed, required = plane_world(now)
    with pytest.raises(FieldError) as err:
        run(now, {}, {**running, **observed}, required)
    assert str(err.value) == (
        f"spec.preset: preset {now.preset!r} places sandboxes in ComputePlane {now.plane!r}, but "
        f"this sandbox's workspace is in ComputePlane {was.plane!r}; moving would leave it "
        "behind. Keep the preset, or create a new sandbox"
    )


LEAVING = "but this sandbox's workspace lives on a ComputePlane; switching would leave it behind"


@pytest.mark.parametrize(
    ("preset", "runs"),
    [pytest.param("gvisor", "gvisor", id="pod"), pytest.param("standard", "kubevirt", id="vm")],
)
@pytest.mark.parametrize("p", BOTH)
def test_a_placed_sandbox_cannot_leave_for_a_namespace_preset(
    p: Placement, preset: str, runs: str
) -> None:
    _, running = settled_in_plane(p)
    with pytest.raises(FieldError) as err:
        render(workspace({"preset": preset}), p.platform, owned(running), NOW, {})
    assert err.value.path == "spec.preset"
    assert err.value.message.startswith(f"preset {preset!r} runs {runs}, {LEAVING}.")


@pytest.mark.parametrize("p", BOTH)
def test_leaving_a_plane_is_not_advised_through_a_restore_that_cannot_work(p: Placement) -> None:
    _, running = settled_in_plane(p)
    with pytest.raises(FieldError) as err:
        render(workspace({"preset": "gvisor"}), p.platform, owned(running), NOW, {})
    assert "restore" not in err.value.message
    assert err.value.message.endswith("Keep the preset, or create a new sandbox")


def test_a_plane_is_also_known_from_the_secret_of_an_unannotated_provider_config() -> None:
    _, running = settled_in_plane(SHARED)
    access = running["plane-access"]
    bare = {
        **access,
        "metadata": {k: v for k, v in access["metadata"].items() if k != "annotations"},
    }
    _, required = plane_world(DEDICATED)
    with pytest.raises(FieldError) as err:
        run(DEDICATED, {}, {**running, "plane-access": bare}, required)
    assert err.value.path == "spec.preset"
    assert "sandbox's workspace is in ComputePlane 'computeplane'" in err.value.message
