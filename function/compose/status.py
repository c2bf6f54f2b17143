"""The XR's status and conditions, from observed state, never from what we asked for.

A sandbox is Running only when its disk is ready and its workload reports ready; Suspended only
when the workload is observed stopped. Until then the phase says what is still under way, and
the `Provisioned` and `Suspended` conditions say why. The workload judges its own progress
(`workloads/`); this module puts the rest on top: a restore or a plane still awaited, a passed
deadline, the snapshots, and where the sandbox is reached.
"""

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from function.compose import snapshots
from function.compose.conditions import Condition, Progress, done, pending
from function.compose.names import SERVICE_KEY, sandbox_name, snapshot_name
from function.compose.observed import dig
from function.compose.workload import Workload
from function.model import Manifest, Observed
from function.model.platform import Preset
from function.model.spec import WorkspaceSandbox

__all__ = ["Condition", "Judged", "Waiting", "workspace_status"]


@dataclass(frozen=True)
class Waiting:
    """What provisioning waits for before the workload's own progress counts."""

    phase: str
    reason: str
    message: str


@dataclass(frozen=True)
class Judged:
    """The XR's whole status, its conditions, and whether the sandbox is usable now."""

    status: dict[str, Any]
    conditions: tuple[Condition, ...]
    usable: bool


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
        return pending("Snapshots", "SnapshotFailed", f"failed: {', '.join(failed)}")
    if waiting := by_state.get("Waiting"):
        why = next(e["message"] for e in entries if e["state"] == "Waiting")
        return pending("Snapshots", "WaitingToSnapshot", f"{', '.join(waiting)}: {why}")
    if creating := by_state.get("Creating"):
        return pending("Snapshots", "Creating", f"being taken: {', '.join(creating)}")
    return done("Snapshots", "Ready", f"{len(entries)} ready" if entries else "none requested")


def _lifetime_expired(progress: Progress, deadline: str) -> Progress:
    why = f"spec.lifetime.suspendAt ({deadline}) has passed; move it forward to resume"
    held = progress.suspended
    return replace(progress, suspended=Condition("Suspended", held.status, "LifetimeExpired", why))


def _where(
    ws: WorkspaceSandbox,
    workload: Workload,
    observed: Observed,
    plane: str | None,
    namespace: str | None,
) -> dict[str, str]:
    """Where the gateway reaches the sandbox, and which claim holds its workspace."""
    out = {} if plane is None else {"computePlane": plane}
    if plane is None and namespace is not None:
        out["sandboxNamespace"] = namespace
    namespace = namespace or ws.metadata.namespace
    if "service" in observed:
        out["endpoint"] = f"{sandbox_name(ws, SERVICE_KEY)}.{namespace}.svc"
    if workload.has_claim(observed):
        out["workspaceVolume"] = workload.claim_name(ws)
    return out


def workspace_status(
    ws: WorkspaceSandbox,
    preset_name: str,
    preset: Preset,
    workload: Workload,
    observed: Observed,
    *,
    desired: dict[str, Manifest],
    expired: bool,
    waiting: Waiting | None = None,
    plane: str | None = None,
    namespace: str | None = None,
    now: datetime,
) -> Judged:
    """The XR's whole status, its conditions, and whether the sandbox is usable now.

    `observed` is what is observed where the workload runs (inside a ComputePlane: what its
    Objects observe), `waiting` what provisioning still waits for before the workload's own
    progress counts, `plane` the ComputePlane's name, and `namespace` where the workload runs
    when that isn't the tenant's namespace.
    """
    progress = workload.progress(ws, observed, now)
    if waiting is not None:
        held = pending("Provisioned", waiting.reason, waiting.message)
        progress = replace(progress, phase=waiting.phase, provisioned=held)
    deadline = ws.spec.lifetime.suspend_at
    shown = deadline.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if deadline else None
    if expired and shown:
        progress = _lifetime_expired(progress, shown)
    why = snapshots.waiting(ws, preset_name, preset, workload, observed) or ""
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
    status |= _where(ws, workload, observed, plane, namespace)
    if shown:
        status["suspendAt"] = shown
    conditions = (progress.provisioned, progress.suspended, _snapshots_condition(entries))
    return Judged(status, conditions, progress.phase == "Running")
