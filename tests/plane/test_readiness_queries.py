"""The readiness queries, as the provider evaluates them."""

from dataclasses import replace
from typing import Any

import pytest

from function.compose.kubernetes_object import (
    CEL_READY,
    GROWN,
    STATEFULSET_RUNNING,
    STATEFULSET_STOPPED,
    condition_query,
)
from function.model import Manifest
from tests.cluster import api_condition, cel
from tests.plane.provider import (
    AGENT_SANDBOX,
    CLAIM,
    IN_PLANE,
    LABELS,
    PLACEMENTS,
    SHARED,
    Placement,
    inner,
    settled_in_plane,
)
from tests.schemas import validate


def _meta(kind: str, api: str = "v1", **extra: Any) -> Manifest:
    metadata = {
        "name": "alice-api",
        "namespace": IN_PLANE,
        "uid": "5a1c4e1e-0b5e-4f0e-9c53-2d1f0c9c8b11",
        "resourceVersion": "48213",
        "generation": 2,
        "creationTimestamp": "2026-11-29T11:58:00Z",
        "labels": LABELS,
    }
    return {"apiVersion": api, "kind": kind, "metadata": metadata, **extra}


def namespace(phase: str | None) -> Manifest:
    ns = _meta("Namespace", spec={"finalizers": ["kubernetes"]})
    return ns if phase is None else {**ns, "status": {"phase": phase}}


def claim(phase: str | None, *conditions: tuple[str, str]) -> Manifest:
    spec = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "30Gi"}},
        "storageClassName": "kubevirt",
        "volumeMode": "Filesystem",
        "volumeName": "pvc-0d9d1f4e",
    }
    pvc = _meta("PersistentVolumeClaim", spec=spec)
    if phase is None:
        return pvc
    status: dict[str, Any] = {"phase": phase}
    if phase == "Bound":
        status |= {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "20Gi"}}
    if conditions:
        status["conditions"] = [api_condition(t, s) for t, s in conditions]
    return {**pvc, "status": status}


# The workloads as rendered, so the observed objects carry everything the API server requires.
_STATEFULSET = inner(settled_in_plane(SHARED)[0], "statefulset")
_SANDBOX = inner(
    settled_in_plane(replace(SHARED, platform=AGENT_SANDBOX, workload="sandbox"))[0], "sandbox"
)


def statefulset(desired: int, /, **status: int) -> Manifest:
    spec = {**_STATEFULSET["spec"], "replicas": desired, "podManagementPolicy": "OrderedReady"}
    sts = _meta("StatefulSet", "apps/v1", spec=spec)
    if not status:
        return sts
    counts = {"observedGeneration": 2, "currentRevision": "alice-api-6d5f", "collisionCount": 0}
    return {**sts, "status": {**counts, **status}}


def agent_sandbox(*conditions: tuple[str, str, str], mode: str = "Running") -> Manifest:
    spec = {**_SANDBOX["spec"], "operatingMode": mode}
    box = _meta("Sandbox", "agents.x-k8s.io/v1beta1", spec=spec)
    if not conditions:
        return box
    found = [api_condition(t, s, r) for t, s, r in conditions]
    return {**box, "status": {"conditions": found, "nodeName": "alice-plane-md0-x7k2p"}}


def volume_snapshot(**status: Any) -> Manifest:
    spec = {
        "volumeSnapshotClassName": "kubevirt",
        "source": {"persistentVolumeClaimName": CLAIM},
    }
    snap = _meta("VolumeSnapshot", "snapshot.storage.k8s.io/v1", spec=spec)
    if not status:
        return snap
    bound = {"boundVolumeSnapshotContentName": "snapcontent-8f1e", **status}
    return {**snap, "status": bound}


NS_QUERY = CEL_READY["Namespace"]
PVC_QUERY = CEL_READY["PersistentVolumeClaim"]
SNAPSHOT_QUERY = CEL_READY["VolumeSnapshot"]
SANDBOX_READY = condition_query("Ready")
SANDBOX_SUSPENDED = condition_query("Suspended")
_DONE = ("Ready", "True", "DependenciesReady")

READINESS = [
    pytest.param(NS_QUERY, namespace("Active"), True, id="namespace-active"),
    pytest.param(NS_QUERY, namespace("Terminating"), False, id="namespace-terminating"),
    pytest.param(NS_QUERY, namespace(None), False, id="namespace-no-status"),
    pytest.param(PVC_QUERY, claim("Bound"), True, id="claim-bound"),
    pytest.param(PVC_QUERY, claim("Bound", ("Resizing", "True")), True, id="claim-resizing"),
    pytest.param(PVC_QUERY, claim("Pending"), False, id="claim-pending"),
    pytest.param(PVC_QUERY, claim("Lost"), False, id="claim-lost"),
    pytest.param(PVC_QUERY, claim(None), False, id="claim-no-status"),
    pytest.param(
        STATEFULSET_RUNNING,
        statefulset(1, replicas=1, readyReplicas=1, availableReplicas=1, currentReplicas=1),
        True,
        id="statefulset-running",
    ),
    pytest.param(
        STATEFULSET_RUNNING,
        statefulset(1, replicas=1, currentReplicas=1),
        False,
        id="statefulset-pod-not-ready",
    ),
    pytest.param(STATEFULSET_RUNNING, statefulset(1), False, id="statefulset-no-status"),
    pytest.param(
        STATEFULSET_RUNNING,
        statefulset(1, replicas=2, readyReplicas=2),
        False,
        id="statefulset-two-pods",
    ),
    pytest.param(STATEFULSET_STOPPED, statefulset(0, replicas=0), True, id="statefulset-stopped"),
    pytest.param(STATEFULSET_STOPPED, statefulset(0), True, id="stopped-no-status"),
    pytest.param(
        STATEFULSET_STOPPED,
        statefulset(0, replicas=1, readyReplicas=1),
        False,
        id="statefulset-still-running",
    ),
    pytest.param(
        STATEFULSET_STOPPED,
        statefulset(0, replicas=1),
        False,
        id="statefulset-pod-terminating",
    ),
    pytest.param(
        SANDBOX_READY,
        agent_sandbox(_DONE, ("Suspended", "False", "Running")),
        True,
        id="sandbox-running",
    ),
    pytest.param(
        SANDBOX_READY,
        agent_sandbox(("Ready", "False", "DependenciesNotReady")),
        False,
        id="sandbox-starting",
    ),
    pytest.param(
        SANDBOX_READY,
        agent_sandbox(("Suspended", "True", "Suspended")),
        False,
        id="sandbox-only-suspended",
    ),
    pytest.param(SANDBOX_READY, agent_sandbox(), False, id="sandbox-without-status"),
    pytest.param(
        SANDBOX_READY,
        {**agent_sandbox(), "status": {"nodeName": "alice-plane-md0-x7k2p"}},
        False,
        id="sandbox-without-conditions",
    ),
    pytest.param(
        SANDBOX_SUSPENDED,
        agent_sandbox(
            ("Ready", "False", "SandboxSuspended"), ("Suspended", "True", "Done"), mode="Suspended"
        ),
        True,
        id="sandbox-suspended",
    ),
    pytest.param(
        SANDBOX_SUSPENDED,
        agent_sandbox(_DONE, ("Suspended", "False", "Running"), mode="Suspended"),
        False,
        id="sandbox-still-running",
    ),
    pytest.param(
        SANDBOX_SUSPENDED,
        agent_sandbox(_DONE, mode="Suspended"),
        False,
        id="sandbox-not-suspending-yet",
    ),
    pytest.param(
        SNAPSHOT_QUERY,
        volume_snapshot(readyToUse=True, restoreSize="20Gi", creationTime="2026-11-29T12:00:00Z"),
        True,
        id="snapshot-ready",
    ),
    pytest.param(SNAPSHOT_QUERY, volume_snapshot(readyToUse=False), False, id="snapshot-not-ready"),
    pytest.param(
        SNAPSHOT_QUERY,
        volume_snapshot(readyToUse=False, error={"message": "snapshot class not found"}),
        False,
        id="snapshot-failed",
    ),
    pytest.param(
        SNAPSHOT_QUERY,
        volume_snapshot(error={"message": "snapshot class not found"}),
        False,
        id="snapshot-failed-without-ready-flag",
    ),
    pytest.param(SNAPSHOT_QUERY, volume_snapshot(), False, id="snapshot-no-status"),
    pytest.param(GROWN, claim("Bound"), True, id="grown-bound"),
    pytest.param(
        GROWN,
        claim("Bound", ("Resizing", "False"), ("FileSystemResizePending", "False")),
        True,
        id="grown-after-resize",
    ),
    pytest.param(GROWN, claim("Bound", ("Resizing", "True")), False, id="grown-resizing"),
    pytest.param(
        GROWN,
        claim("Bound", ("FileSystemResizePending", "True")),
        False,
        id="grown-filesystem-pending",
    ),
    pytest.param(
        GROWN,
        claim("Bound", ("ModifyingVolume", "True")),
        True,
        id="grown-other-condition",
    ),
    pytest.param(GROWN, claim("Pending"), False, id="grown-unbound"),
    pytest.param(GROWN, claim(None), False, id="grown-no-status"),
]


@pytest.mark.parametrize(("query", "obj", "ready"), READINESS)
def test_readiness_queries(query: str, obj: Manifest, ready: bool) -> None:
    assert cel(query, obj) is ready


@pytest.mark.parametrize(("query", "obj", "ready"), READINESS)
def test_the_observed_objects_are_ones_the_api_server_would_return(
    query: str, obj: Manifest, ready: bool
) -> None:
    del query, ready
    assert validate(obj) == []


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize("power", ["Running", "Suspended"])
def test_every_object_is_judged_by_its_wrapped_kind(p: Placement, power: str) -> None:
    out, _ = settled_in_plane(p, {"power": power, "snapshots": [{"name": "nightly"}]})
    workload = {
        ("StatefulSet", "Running"): STATEFULSET_RUNNING,
        ("StatefulSet", "Suspended"): STATEFULSET_STOPPED,
        ("Sandbox", "Running"): SANDBOX_READY,
        ("Sandbox", "Suspended"): SANDBOX_SUSPENDED,
    }
    want = {
        "Namespace": NS_QUERY,
        "PersistentVolumeClaim": PVC_QUERY,
        "VolumeSnapshot": SNAPSHOT_QUERY,
        "StatefulSet": workload["StatefulSet", power],
        "Sandbox": workload["Sandbox", power],
        # Cozystack reports the plane's HelmRelease Ready as the ComputePlane's.
        "ComputePlane": SANDBOX_READY,
    }
    for m in out.resources.values():
        if m["kind"] != "Object":
            continue
        kind = m["spec"]["forProvider"]["manifest"]["kind"]
        expected = (
            {"policy": "DeriveFromCelQuery", "celQuery": want[kind]}
            if kind in want
            else {"policy": "SuccessfulCreate"}
        )
        assert m["spec"]["readiness"] == expected, kind
