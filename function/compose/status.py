"""The XR's status and conditions, from observed state, never from what we asked for.

A sandbox is Running only when its disk is ready and its VM reports ready; Suspended only when
the VM is observed stopped. Until then the phase says what is still under way, and the
`Provisioned` and `Suspended` conditions say why.
"""

from dataclasses import dataclass, replace
from datetime import UTC
from typing import Any, Literal

from function.compose import (
    sandbox,
    snapshots,
    statefulset,
    virtual_machine,
    workspace_claim,
    workspace_volume,
)
from function.compose.names import (
    SERVICE_KEY,
    claim_name,
    plane_namespace,
    sandbox_name,
    snapshot_name,
)
from function.compose.observed import condition, dig
from function.compose.readiness import DISK_READY_PHASES
from function.model import Manifest, Observed
from function.model.platform import Preset
from function.model.spec import WorkspaceSandbox

# printableStatus values that need a human, not patience.
VM_FAILURES = frozenset(
    {
        "CrashLoopBackOff",
        "ErrorUnschedulable",
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrorPvcNotFound",
        "ErrorDataVolumeNotFound",
        "DataVolumeError",
    }
)


# Ready reasons of an agent-sandbox Sandbox that need a human, not patience.
POD_FAILURES = frozenset({"PodFailed", "PodSucceeded", "ReconcilerError", "MultiplePods"})


@dataclass(frozen=True)
class Condition:
    type: str
    status: Literal["True", "False"]
    reason: str
    message: str


def _done(type_: str, reason: str, message: str) -> Condition:
    return Condition(type_, "True", reason, message)


def _pending(type_: str, reason: str, message: str) -> Condition:
    return Condition(type_, "False", reason, message)


@dataclass(frozen=True)
class Progress:
    phase: str
    provisioned: Condition
    suspended: Condition


def _message(obj: Any, *kinds: str) -> str:
    for kind in kinds:
        c = condition(obj, kind)
        if c and c.get("message"):
            return str(c["message"])
    return ""


def _disk_step(dv: Any) -> str:
    phase = dig(dv, "status", "phase") or "Pending"
    progress = dig(dv, "status", "progress")
    shown = f" ({progress})" if isinstance(progress, str) and progress not in ("", "N/A") else ""
    return f"waiting for the workspace disk: DataVolume phase {phase}{shown}"


def _failed(vm: Any, dv: Any) -> Condition | None:
    if dig(dv, "status", "phase") == "Failed":
        msg = _message(dv, "Running", "Ready") or "the DataVolume failed"
        return _pending("Provisioned", "DiskFailed", msg)
    printable = dig(vm, "status", "printableStatus")
    if printable in VM_FAILURES:
        why = _message(vm, "Failure", "Ready") or "see its events"
        return _pending(
            "Provisioned", "VirtualMachineFailed", f"VirtualMachine is {printable}: {why}"
        )
    return None


def _progress(ws: WorkspaceSandbox, observed: Observed) -> Progress:  # noqa: PLR0911  # a phase each
    vm, dv = observed.get(virtual_machine.KEY), observed.get(workspace_volume.KEY)
    printable = dig(vm, "status", "printableStatus") or "unknown"
    running = _pending("Suspended", "PowerRunning", "spec.power is Running")
    suspend = ws.spec.power == "Suspended"

    failed = _failed(vm, dv)
    if failed is not None:
        return Progress("Failed", failed, running)
    if vm is None and dv is None:
        return _not_created(ws, "the disk and VM", running)
    if dig(dv, "status", "phase") not in DISK_READY_PHASES:
        waiting = _pending("Provisioned", "WaitingForDisk", _disk_step(dv))
        not_yet = _pending("Suspended", "WaitingForDisk", "the workspace disk is not ready yet")
        return Progress("Provisioning", waiting, not_yet if suspend else running)
    disk_ready = _done("Provisioned", "Provisioned", "the workspace disk is ready")
    if suspend and printable == "Stopped":
        stopped = _done("Suspended", "Suspended", "the VM is stopped; the workspace disk is kept")
        return Progress("Suspended", disk_ready, stopped)
    if suspend:
        waiting_msg = f"waiting for the VM to stop (printableStatus {printable})"
        return Progress("Suspending", disk_ready, _pending("Suspended", "Suspending", waiting_msg))
    if dig(vm, "status", "ready") is True:
        ready = _done("Provisioned", "Provisioned", "the disk is ready and the VM is running")
        return Progress("Running", ready, running)
    waiting_msg = f"waiting for the VM to become ready (printableStatus {printable})"
    return Progress("Provisioning", _pending("Provisioned", "StartingVM", waiting_msg), running)


def _not_created(ws: WorkspaceSandbox, what: str, running: Condition) -> Progress:
    waiting = _pending("Provisioned", "Creating", f"waiting for {what} to be created")
    not_yet = _pending("Suspended", "Creating", "not created yet")
    return Progress("Pending", waiting, not_yet if ws.spec.power == "Suspended" else running)


def _pod_progress(ws: WorkspaceSandbox, observed: Observed) -> Progress:  # a phase each
    pod = observed.get(sandbox.KEY)
    running = _pending("Suspended", "PowerRunning", "spec.power is Running")
    if pod is None:
        return _not_created(ws, "the Sandbox", running)
    ready, held = condition(pod, "Ready") or {}, condition(pod, "Suspended") or {}
    if ready.get("reason") in POD_FAILURES:
        why = f"Sandbox is {ready['reason']}: {ready.get('message') or 'see its events'}"
        return Progress("Failed", _pending("Provisioned", "SandboxFailed", why), running)
    if ws.spec.power == "Suspended":
        kept = _done("Provisioned", "Provisioned", "the workspace claim is kept")
        if held.get("status") == "True":
            stopped = _done("Suspended", "Suspended", "the pod is gone; the workspace is kept")
            return Progress("Suspended", kept, stopped)
        why = f"waiting for the pod to terminate ({held.get('reason') or 'not reported yet'})"
        return Progress("Suspending", kept, _pending("Suspended", "Suspending", why))
    if ready.get("status") == "True":
        up = _done("Provisioned", "Provisioned", "the pod is running and ready")
        return Progress("Running", up, running)
    why = ready.get("message") or ready.get("reason") or "not reported yet"
    return Progress(
        "Provisioning", _pending("Provisioned", "StartingPod", f"waiting: {why}"), running
    )


def _statefulset_progress(ws: WorkspaceSandbox, observed: Observed) -> Progress:
    sts = observed.get(statefulset.KEY)
    running = _pending("Suspended", "PowerRunning", "spec.power is Running")
    if sts is None:
        return _not_created(ws, "the StatefulSet", running)
    if ws.spec.power == "Suspended":
        kept = _done("Provisioned", "Provisioned", "the workspace claim is kept")
        if statefulset.stopped(sts):
            stopped = _done("Suspended", "Suspended", "the pod is gone; the workspace is kept")
            return Progress("Suspended", kept, stopped)
        why = "waiting for the StatefulSet to scale to zero"
        return Progress("Suspending", kept, _pending("Suspended", "Suspending", why))
    if statefulset.ready(sts):
        up = _done("Provisioned", "Provisioned", "the pod is running and ready")
        return Progress("Running", up, running)
    phase = dig(observed.get(workspace_claim.KEY), "status", "phase") or "not reported yet"
    why = f"waiting for the pod to become ready (workspace claim {phase})"
    return Progress("Provisioning", _pending("Provisioned", "StartingPod", why), running)


def _snapshot(
    ws: WorkspaceSandbox, name: str, desired: dict[str, Manifest], observed: Observed, why: str
) -> dict[str, Any]:
    composed, seen = desired.get(snapshots.key(name)), observed.get(snapshots.key(name))
    entry: dict[str, Any] = {
        "name": name,
        "volumeSnapshot": snapshot_name(ws, name),
        "readyToUse": dig(seen, "status", "readyToUse") is True,
    }
    for field in ("restoreSize", "creationTime"):
        value = dig(seen, "status", field)
        if isinstance(value, str):
            entry[field] = value
    if composed is None:
        return {**entry, "state": "Waiting", "message": why}
    entry["consistency"] = dig(composed, "metadata", "annotations", snapshots.CONSISTENCY)
    error = dig(seen, "status", "error", "message")
    if entry["readyToUse"]:
        return {**entry, "state": "Ready"}
    if isinstance(error, str) and error:
        return {**entry, "state": "Failed", "message": error}
    return {**entry, "state": "Creating"}


def _snapshots_condition(entries: list[dict[str, Any]]) -> Condition:
    by_state: dict[str, list[str]] = {}
    for e in entries:
        by_state.setdefault(e["state"], []).append(e["name"])
    if failed := by_state.get("Failed"):
        return _pending("Snapshots", "SnapshotFailed", f"failed: {', '.join(failed)}")
    if waiting := by_state.get("Waiting"):
        why = next(e["message"] for e in entries if e["state"] == "Waiting")
        return _pending("Snapshots", "WaitingToSnapshot", f"{', '.join(waiting)}: {why}")
    if creating := by_state.get("Creating"):
        return _pending("Snapshots", "Creating", f"being taken: {', '.join(creating)}")
    return _done("Snapshots", "Ready", f"{len(entries)} ready" if entries else "none requested")


def _lifetime_expired(progress: Progress, deadline: str) -> Progress:
    why = f"spec.lifetime.suspendAt ({deadline}) has passed; move it forward to resume"
    held = progress.suspended
    return replace(progress, suspended=Condition("Suspended", held.status, "LifetimeExpired", why))


def _where(ws: WorkspaceSandbox, observed: Observed, plane: str | None) -> dict[str, str]:
    """Where the gateway reaches the sandbox, and which claim holds its workspace."""
    out = {} if plane is None else {"computePlane": plane}
    namespace = ws.metadata.namespace if plane is None else plane_namespace(ws)
    if "service" in observed:
        out["endpoint"] = f"{sandbox_name(ws, SERVICE_KEY)}.{namespace}.svc"
    if workspace_volume.KEY in observed or workspace_claim.KEY in observed:
        out["workspaceVolume"] = claim_name(ws)
    elif sandbox.observed_claims(observed):
        out["workspaceVolume"] = claim_name(ws, templated=True)
    return out


def workspace_status(
    ws: WorkspaceSandbox,
    preset_name: str,
    preset: Preset,
    desired: dict[str, Manifest],
    observed: Observed,
    *,
    expired: bool,
    restoring: str | None,
    plane: str | None = None,
    plane_waiting: str | None = None,
    placing: str | None = None,
) -> tuple[dict[str, Any], tuple[Condition, ...], bool]:
    """The XR's whole status, its conditions, and whether the sandbox is usable now.

    For the ComputePlane placements, `observed` is what the Objects observe inside the plane,
    `plane` the plane's name, `plane_waiting` why nothing is placed in it yet, and `placing`
    what the workload's placement still waits for.
    """
    if preset.runtime == "kubevirt":
        progress = _progress(ws, observed)
    elif preset.compute_plane is not None and not preset.compute_plane.agent_sandbox:
        progress = _statefulset_progress(ws, observed)
    else:
        progress = _pod_progress(ws, observed)
    if restoring is not None:
        waiting = _pending("Provisioned", "WaitingForRestoreSnapshot", restoring)
        progress = replace(progress, phase="Pending", provisioned=waiting)
    if plane_waiting is not None:
        waiting = _pending("Provisioned", "WaitingForComputePlane", plane_waiting)
        progress = replace(progress, phase="Pending", provisioned=waiting)
    elif placing is not None:
        waiting = _pending("Provisioned", "PlacingInComputePlane", placing)
        progress = replace(progress, phase="Provisioning", provisioned=waiting)
    deadline = ws.spec.lifetime.suspend_at
    shown = deadline.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if deadline else None
    if expired and shown:
        progress = _lifetime_expired(progress, shown)
    why = snapshots.waiting(ws, preset_name, preset, observed) or ""
    entries = [
        _snapshot(ws, s.name, desired, observed, why)
        for s in sorted(ws.spec.snapshots, key=lambda s: s.name)
    ]
    status: dict[str, Any] = {
        "phase": progress.phase,
        "preset": preset_name,
        "runtime": preset.runtime,
        "placement": preset.placement,
        "snapshots": entries,
    }
    status |= _where(ws, observed, plane)
    if shown:
        status["suspendAt"] = shown
    conditions = (progress.provisioned, progress.suspended, _snapshots_condition(entries))
    return status, conditions, progress.phase == "Running"
