"""A CSI VolumeSnapshot of the workspace disk for each `spec.snapshots` entry.

KubeVirt's Snapshot feature gate is off on Cozystack, so these are plain CSI snapshots of the
workspace PVC (a DataVolume's PVC has the DataVolume's name, and a pod sandbox's claim is
composed with the same name; an older Sandbox's templated claim is `workspace-<sandbox>`). A
snapshot is only taken of a disk that is done being created, and, where the preset asks for
clean snapshots only, of a sandbox observed suspended. Whether the sandbox was running when a
snapshot was taken is recorded on the snapshot itself, since nothing observed later can tell,
and so is a VM disk's guest account, which a VM restored from it keeps.
"""

from function.compose.names import labels, snapshot_name
from function.compose.observed import dig, keep_observed_spec
from function.compose.workload import GUEST_USER, Workload
from function.model import Manifest, Observed
from function.model.platform import Preset
from function.model.spec import WorkspaceSandbox

PREFIX = "snapshot-"
CONSISTENCY = "sandbox.cozystack.io/consistency"


def key(name: str) -> str:
    return PREFIX + name


def stopped(ws: WorkspaceSandbox, workload: Workload, observed: Observed) -> bool:
    """Suspended, and observed stopped: nothing writes to the disk."""
    return ws.spec.power == "Suspended" and workload.stopped(observed)


def waiting(
    ws: WorkspaceSandbox, preset_name: str, preset: Preset, workload: Workload, observed: Observed
) -> str | None:
    """Why a new snapshot can't be taken now, or None."""
    if not workload.disk_ready(observed):
        return "waiting for the workspace disk to be created"
    if preset.clean_snapshots_only and not stopped(ws, workload, observed):
        return f"preset {preset_name!r} takes clean snapshots only: suspend the sandbox to take it"
    return None


def volume_snapshots(  # noqa: PLR0917  # the parts of one snapshot
    ws: WorkspaceSandbox,
    preset_name: str,
    preset: Preset,
    workload: Workload,
    observed: Observed,
    account: str | None = None,
) -> dict[str, Manifest]:
    """`account`: the guest account on a VM's disk; None for a pod's claim, which has none."""
    out: dict[str, Manifest] = {}
    blocked = waiting(ws, preset_name, preset, workload, observed)
    claim = workload.claim_name(ws)
    for s in sorted(ws.spec.snapshots, key=lambda s: s.name):
        seen = observed.get(key(s.name))
        if seen is None and blocked is not None:
            continue
        recorded = dig(seen, "metadata", "annotations", CONSISTENCY)
        if recorded not in ("Clean", "Crash"):
            recorded = "Clean" if seen is None and stopped(ws, workload, observed) else "Crash"
        annotations = {CONSISTENCY: recorded}
        if account is not None:
            annotations[GUEST_USER] = account
        manifest: Manifest = {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshot",
            "metadata": {
                "name": snapshot_name(ws, s.name),
                "labels": labels(ws),
                "annotations": annotations,
            },
            "spec": {
                "volumeSnapshotClassName": preset.volume_snapshot_class,
                "source": {"persistentVolumeClaimName": claim},
            },
        }
        out[key(s.name)] = keep_observed_spec(manifest, key(s.name), observed)
    return out
