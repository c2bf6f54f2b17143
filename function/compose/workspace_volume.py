"""The workspace disk: a standalone CDI DataVolume, so it outlives the VM."""

from function.compose import sandbox
from function.compose.names import labels, workspace_volume_name
from function.compose.observed import dig, settled
from function.compose.sizing import Size
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.platform import Image, Preset
from function.model.quantity import format_bytes, parse_bytes
from function.model.spec import WorkspaceSandbox

KEY = "workspace-volume"


def _source(ws: WorkspaceSandbox, image: Image) -> dict[str, object]:
    if ws.spec.restore_from is not None:
        ref = {"namespace": ws.metadata.namespace, "name": ws.spec.restore_from.snapshot}
        return {"source": {"snapshot": ref}}
    if image.kubevirt is None:
        raise FieldError("spec.image", f"{ws.spec.image!r} has no disk image for virtual machines")
    src = image.kubevirt
    if src.data_source is not None:
        ref = src.data_source.model_dump()
        return {"sourceRef": {"kind": "DataSource", **ref}}
    if src.snapshot is not None:
        return {"source": {"snapshot": src.snapshot.model_dump()}}
    assert src.pvc is not None  # noqa: S101  # KubeVirtImage demands exactly one source.
    return {"source": {"pvc": src.pvc.model_dump()}}


def _current_size(observed: Observed) -> object:
    """The existing workspace disk's size: a DataVolume's, or a Sandbox's claim template's."""
    have = dig(observed.get(KEY), "spec", "storage", "resources", "requests", "storage")
    if have is not None:
        return have
    claims = sandbox.observed_claims(observed)
    if claims:
        return dig(claims[0], "spec", "resources", "requests", "storage")
    return None


def resize_warnings(ws: WorkspaceSandbox, size: Size, observed: Observed) -> list[str]:
    """Refuse a smaller disk; explain that a larger one isn't applied to an existing disk."""
    have = _current_size(observed)
    # Leaving the size out keeps whatever the disk has, even if the preset's default changed.
    if ws.spec.resources.disk is None or not isinstance(have, str):
        return []
    try:
        current = parse_bytes(have)
    except ValueError:
        return []
    if size.disk < current:
        raise FieldError(
            "spec.resources.disk",
            f"{format_bytes(size.disk)} is smaller than the workspace disk already is "
            f"({format_bytes(current)}); disks never shrink",
        )
    if size.disk > current:
        stays = f"the workspace disk stays at {format_bytes(current)}"
        why = "its DataVolume or claim template can't be changed after creation"
        return [f"spec.resources.disk: {stays}; {why}"]
    return []


def workspace_volume(
    ws: WorkspaceSandbox, preset: Preset, image: Image, size: Size, observed: Observed
) -> dict[str, Manifest]:
    manifest: Manifest = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {
            "name": workspace_volume_name(ws),
            "labels": labels(ws),
            # CDI may garbage-collect a finished DataVolume; Crossplane would then re-create it.
            "annotations": {"cdi.kubevirt.io/storage.deleteAfterCompletion": "false"},
        },
        "spec": {
            **_source(ws, image),
            "storage": {
                "storageClassName": preset.storage_class,
                "resources": {"requests": {"storage": format_bytes(size.disk)}},
            },
        },
    }
    return {KEY: settled(manifest, KEY, observed)}
