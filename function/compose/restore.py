"""Fork and restore: the workspace disk made from a VolumeSnapshot, once it can be.

`spec.restoreFrom` is read at creation only. The function asks Crossplane for the snapshot as a
required resource and composes no disk (and no VM) until it exists and is ready to use, so a
restore never starts from a half-taken snapshot, and only from one a WorkspaceSandbox took (a
VolumeSnapshot of any other origin in the namespace is refused). Once the disk exists, the
snapshot no longer matters (it may even be deleted), and the disk's source can't be changed.
"""

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from function.compose import ownership
from function.compose.observed import dig
from function.compose.requirement import Requirements, require
from function.compose.workload import ACCOUNTS, GUEST_USER, LEGACY_USER, Workload
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.quantity import parse_bytes
from function.model.spec import WorkspaceSandbox

REQUIREMENT = "restore-snapshot"
UNFETCHED = (
    "spec.restoreFrom: this Crossplane doesn't fetch required resources, so the snapshot to "
    "restore can't be looked up; the disk waits"
)


@dataclass(frozen=True)
class Restore:
    requirements: Requirements = field(default_factory=dict)
    """Required resources to ask Crossplane for: name -> apiVersion, kind, name, namespace."""
    waiting: str | None = None
    """Why the disk can't be composed yet."""
    min_disk: Decimal | None = None
    """The snapshot's restore size: the disk made from it can't be smaller."""
    account: str | None = None
    """The guest account on the disk the snapshot was taken of, for a VM made from it."""


def _account(snapshot: Manifest, name: str) -> str:
    """What the snapshot records; one taken before snapshots recorded it has `sandbox`."""
    recorded = dig(snapshot, "metadata", "annotations", GUEST_USER)
    if recorded is None:
        return LEGACY_USER
    if recorded not in ACCOUNTS:
        raise FieldError(
            "spec.restoreFrom.snapshot",
            f"VolumeSnapshot {name!r} records the guest account {recorded!r} "
            f"({GUEST_USER}), which no sandbox has "
            f"({' or '.join(ACCOUNTS)})",
        )
    return str(recorded)


def _fixed_at_creation(ws: WorkspaceSandbox, was: str | None) -> None:
    want = ws.spec.restore_from.snapshot if ws.spec.restore_from else None
    if want == was:
        return
    if want is None:
        message = f"can't be removed: the workspace disk was restored from {was!r}"
        raise FieldError("spec.restoreFrom", message)
    made = f"restored from {was!r}" if was else "made from the image"
    raise FieldError(
        "spec.restoreFrom.snapshot",
        f"is fixed when the sandbox is created; the workspace disk was {made}",
    )


def restore(
    ws: WorkspaceSandbox,
    workload: Workload,
    observed: Observed,
    required: dict[str, list[Manifest]],
) -> Restore:
    origin = workload.restored_from(observed)
    if origin is not None:
        if origin.readable:
            _fixed_at_creation(ws, origin.snapshot)
        return Restore()
    if ws.spec.restore_from is None:
        return Restore()
    name, namespace = ws.spec.restore_from.snapshot, ws.metadata.namespace
    ask = {REQUIREMENT: require("snapshot.storage.k8s.io/v1", "VolumeSnapshot", name, namespace)}
    found: list[Any] = required.get(REQUIREMENT) or []
    if not found:
        return Restore(ask, f"waiting for VolumeSnapshot {name!r} in {namespace!r} to exist")
    snapshot = found[0]
    ownership.check_snapshot(snapshot, name)
    if dig(snapshot, "status", "readyToUse") is not True:
        return Restore(ask, f"waiting for VolumeSnapshot {name!r} to be ready to use")
    size = dig(snapshot, "status", "restoreSize")
    try:
        min_disk = parse_bytes(size) if isinstance(size, str) else None
    except ValueError:
        min_disk = None
    return Restore(ask, None, min_disk, _account(snapshot, name))
