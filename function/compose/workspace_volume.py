"""The workspace disk: a standalone CDI DataVolume, so it outlives the VM."""

from decimal import Decimal

from function.compose import kubernetes_object, sandbox, workspace_claim
from function.compose.cloud_init import GUEST_USER
from function.compose.names import labels, workspace_volume_name
from function.compose.observed import dig, settled
from function.compose.sizing import Size
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.platform import Image, Preset, SandboxPlatform
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


GROW_KEY = "workspace-volume-size"


def _requested(obj: object, *path: str) -> Decimal | None:
    have = dig(obj, *path, "resources", "requests", "storage")
    try:
        return parse_bytes(have) if isinstance(have, str) else None
    except ValueError:
        return None


def _current_size(observed: Observed) -> Decimal | None:
    """The existing workspace disk's size, as last asked for by anything we compose."""
    claims = sandbox.observed_claims(observed)
    sizes = [
        _requested(observed.get(KEY), "spec", "storage"),
        _requested(observed.get(GROW_KEY), "spec", "forProvider", "manifest", "spec"),
        _requested(observed.get(workspace_claim.KEY), "spec"),
        _requested(claims[0] if claims else None, "spec"),
    ]
    known = [s for s in sizes if s is not None]
    return max(known) if known else None


def resize_warnings(
    ws: WorkspaceSandbox, size: Size, observed: Observed, platform: SandboxPlatform
) -> list[str]:
    """Refuse a smaller disk; say when a larger one can't be applied to the existing disk."""
    # Leaving the size out keeps whatever the disk has, even if the preset's default changed.
    if ws.spec.resources.disk is None:
        return []
    current = _current_size(observed)
    if current is None:
        return []
    if size.disk < current:
        raise FieldError(
            "spec.resources.disk",
            f"{format_bytes(size.disk)} is smaller than the workspace disk already is "
            f"({format_bytes(current)}); disks never shrink",
        )
    if size.disk == current or workspace_claim.KEY in observed:
        return []
    if KEY in observed and platform.disk_expansion is not None:
        return []
    stays = f"the workspace disk stays at {format_bytes(current)}"
    if KEY in observed:
        why = "the platform sets no diskExpansion, and a DataVolume can't change after creation"
    else:
        why = "this Sandbox's claim template can't change after creation"
    return [f"spec.resources.disk: {stays}; {why}"]


def growth(
    ws: WorkspaceSandbox, platform: SandboxPlatform, size: Size, observed: Observed
) -> dict[str, Manifest]:
    """A VM's workspace PVC, patched to the requested size when that is more than it was made.

    The Object only observes and updates (no create, no delete): it can't make a PVC, and
    deleting it leaves the PVC alone. Once composed it stays, so the size never falls back.
    """
    expansion = platform.disk_expansion
    # The common case, cheaply: no size asked for and nothing grown before.
    if expansion is None or (ws.spec.resources.disk is None and GROW_KEY not in observed):
        return {}
    made = _requested(observed.get(KEY), "spec", "storage")
    if made is None:
        return {}
    grown = _requested(observed.get(GROW_KEY), "spec", "forProvider", "manifest", "spec")
    want = size.disk if ws.spec.resources.disk is not None else (grown or made)
    if want <= made and grown is None:
        return {}
    patch: Manifest = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": workspace_volume_name(ws), "namespace": ws.metadata.namespace},
        "spec": {"resources": {"requests": {"storage": format_bytes(max(want, made))}}},
    }
    ref = {"kind": "ClusterProviderConfig", "name": expansion.cluster_provider_config}
    obj = kubernetes_object.wrap(
        ws,
        GROW_KEY,
        patch,
        ref,
        management=["Observe", "Update"],
        ready_when=kubernetes_object.GROWN,
    )
    return {GROW_KEY: obj}


def workspace_volume(  # noqa: PLR0917  # the disk's parts
    ws: WorkspaceSandbox,
    preset: Preset,
    image: Image,
    size: Size,
    observed: Observed,
    account: str,
) -> dict[str, Manifest]:
    """`account`: the guest account on the disk (`account.py`)."""
    manifest: Manifest = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {
            "name": workspace_volume_name(ws),
            "labels": labels(ws),
            "annotations": {
                # CDI may garbage-collect a finished DataVolume; Crossplane would then
                # re-create it.
                "cdi.kubevirt.io/storage.deleteAfterCompletion": "false",
                GUEST_USER: account,
            },
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
