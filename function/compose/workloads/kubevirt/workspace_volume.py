"""The workspace disk: a standalone CDI DataVolume, so it outlives the VM."""

from decimal import Decimal

from function.compose import kubernetes_object
from function.compose.names import labels, workspace_volume_name
from function.compose.observed import keep_observed_spec, requested_storage
from function.compose.sizing import Size
from function.compose.workload import GUEST_USER
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.platform import Image, Preset, SandboxPlatform
from function.model.quantity import format_bytes
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


def grown(observed: Observed) -> Decimal | None:
    """The size the workspace PVC was last grown to; None if it never was."""
    return requested_storage(observed.get(GROW_KEY), "spec", "forProvider", "manifest", "spec")


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
    made = requested_storage(observed.get(KEY), "spec", "storage")
    if made is None:
        return {}
    was = grown(observed)
    want = size.disk if ws.spec.resources.disk is not None else (was or made)
    if want <= made and was is None:
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
    return {KEY: keep_observed_spec(manifest, KEY, observed)}
