"""The workspace PVC of a pod sandbox, composed by us so that it can grow.

A Sandbox's claim templates are immutable and the PVC made from them belongs to the
agent-sandbox controller, so a size change could never reach it. A PVC composed beside the
Sandbox is ours: raising `resources.disk` raises its request, and the storage class expands the
volume (LINSTOR's classes allow expansion). Everything else in a PVC's spec is fixed once it
exists, so those fields are kept as observed. A Sandbox created with a claim template keeps it
(`workloads/claim_template.py`).
"""

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from function.compose.names import labels, workspace_volume_name
from function.compose.observed import dig, requested_storage
from function.compose.sizing import Size
from function.compose.workload import Origin
from function.model import Manifest, Observed
from function.model.platform import Preset
from function.model.quantity import format_bytes
from function.model.spec import WorkspaceSandbox

KEY = "workspace-claim"

# What the API server lets change in a bound claim's spec: only the requested size (and
# volume attributes, which we don't set).
_FIXED = ("accessModes", "storageClassName", "dataSource", "dataSourceRef", "volumeMode")


def snapshot_source(ws: WorkspaceSandbox) -> dict[str, str] | None:
    if ws.spec.restore_from is None:
        return None
    return {
        "apiGroup": "snapshot.storage.k8s.io",
        "kind": "VolumeSnapshot",
        "name": ws.spec.restore_from.snapshot,
    }


def claim(ws: WorkspaceSandbox, preset: Preset, size: Size, observed: Observed) -> Manifest:
    """The claim, with the fields fixed at creation kept as the existing claim has them."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": preset.storage_class,
        "resources": {"requests": {"storage": format_bytes(size.disk)}},
    }
    if (source := snapshot_source(ws)) is not None:
        spec["dataSource"] = source
    seen = dig(observed.get(KEY), "spec")
    if isinstance(seen, Mapping) and seen:
        spec = {k: v for k, v in spec.items() if k not in _FIXED}
        spec |= {k: seen[k] for k in _FIXED if k in seen}
        if ws.spec.resources.disk is None:
            # Leaving the size out keeps whatever the disk has, even if the preset changed.
            have = dig(seen, "resources", "requests", "storage")
            if isinstance(have, str):
                spec["resources"] = {"requests": {"storage": have}}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": workspace_volume_name(ws), "labels": labels(ws)},
        "spec": spec,
    }


def composed(observed: Observed) -> bool:
    return KEY in observed


def current_size(observed: Observed) -> Decimal | None:
    return requested_storage(observed.get(KEY), "spec")


def restored_from(observed: Observed) -> Origin | None:
    """The claim's snapshot, when the claim is observed with a spec; None otherwise."""
    spec = dig(observed.get(KEY), "spec")
    if spec is None:
        return None
    return Origin(isinstance(spec, Mapping), dig(spec, "dataSource", "name"))
