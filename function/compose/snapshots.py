"""A CSI VolumeSnapshot of the workspace disk for each `spec.snapshots` entry.

KubeVirt's Snapshot feature gate is off on Cozystack, so these are plain CSI snapshots of the
workspace PVC (a DataVolume's PVC has the DataVolume's name).
"""

from function.compose.names import labels, snapshot_name, workspace_volume_name
from function.compose.observed import settled
from function.model import Manifest, Observed
from function.model.platform import Preset
from function.model.spec import WorkspaceSandbox

PREFIX = "snapshot-"


def key(name: str) -> str:
    return PREFIX + name


def volume_snapshots(
    ws: WorkspaceSandbox, preset: Preset, observed: Observed
) -> dict[str, Manifest]:
    out: dict[str, Manifest] = {}
    for s in sorted(ws.spec.snapshots, key=lambda s: s.name):
        manifest: Manifest = {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": snapshot_name(ws, s.name), "labels": labels(ws)},
            "spec": {
                "volumeSnapshotClassName": preset.volume_snapshot_class,
                "source": {"persistentVolumeClaimName": workspace_volume_name(ws)},
            },
        }
        out[key(s.name)] = settled(manifest, key(s.name), observed)
    return out
