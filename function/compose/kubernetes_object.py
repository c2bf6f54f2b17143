"""provider-kubernetes `Object`s: a manifest applied by the provider, with its credentials.

An Object is how a namespaced XR reaches what Crossplane itself can't compose: objects inside a
ComputePlane cluster, and a patch to a PVC that another controller owns. The provider reports
the wrapped object's observed state in `status.atProvider.manifest`, so the rest of this
function reads that exactly as it reads a resource composed directly (`unwrap`).

The provider marks an Object Ready by a CEL query over the wrapped object, so Ready means the
wrapped object's own state (a bound claim, a ready replica, a usable snapshot), not only that
the apply succeeded.
"""

from collections.abc import Mapping
from typing import Any

from function.compose.names import labels, object_name
from function.compose.observed import dig
from function.compose.readiness import DISK_READY_PHASES
from function.model import Manifest, Observed
from function.model.spec import WorkspaceSandbox

API_VERSION = "kubernetes.m.crossplane.io/v1alpha1"

# Object readiness queries, by wrapped kind. `object` is the wrapped object as observed.
_CONDITION = "has(object.status) && has(object.status.conditions) && "
CEL_READY = {
    "Namespace": "has(object.status) && object.status.phase == 'Active'",
    "PersistentVolumeClaim": "has(object.status) && object.status.phase == 'Bound'",
    "VolumeSnapshot": (
        "has(object.status) && has(object.status.readyToUse) && object.status.readyToUse"
    ),
}
# A claim asked to grow: bound, and neither the volume nor its filesystem still resizing.
GROWN = (
    "has(object.status) && object.status.phase == 'Bound' && !(has(object.status.conditions) "
    "&& object.status.conditions.exists(c, c.type in ['Resizing', 'FileSystemResizePending'] "
    "&& c.status == 'True'))"
)
STATEFULSET_RUNNING = (
    "has(object.status) && has(object.status.readyReplicas) && object.status.readyReplicas == 1"
)
STATEFULSET_STOPPED = (
    "!has(object.status) || !has(object.status.replicas) || object.status.replicas == 0"
)


def condition_query(kind: str) -> str:
    return (
        f"{_CONDITION}object.status.conditions.exists(c, c.type == '{kind}' && c.status == 'True')"
    )


# A VM and its disk in a sandbox's own namespace. Until an Object is Ready the provider reads
# its object every 30 s (10 minutes once Ready), and the sandbox's status is read from there:
# judging these by their state, not their creation, keeps a boot or a stop in view.
VM_STOPPED = (
    "has(object.status) && has(object.status.printableStatus) && "
    "object.status.printableStatus == 'Stopped'"
)
VM_RUNNING = "has(object.status) && has(object.status.ready) && object.status.ready"
DISK_READY = "has(object.status) && has(object.status.phase) && object.status.phase in " + str(
    sorted(DISK_READY_PHASES)
).replace('"', "'")


def ready_query(manifest: Manifest) -> str | None:
    """How the provider should judge the wrapped object ready; None: once it exists."""
    kind = manifest.get("kind", "")
    if kind == "VirtualMachine":
        return VM_STOPPED if manifest["spec"]["runStrategy"] == "Halted" else VM_RUNNING
    if kind == "DataVolume":
        return DISK_READY
    if kind == "StatefulSet":
        return STATEFULSET_STOPPED if manifest["spec"]["replicas"] == 0 else STATEFULSET_RUNNING
    if kind == "Sandbox":
        suspended = manifest["spec"]["operatingMode"] == "Suspended"
        return condition_query("Suspended" if suspended else "Ready")
    return CEL_READY.get(kind)


def wrap(
    ws: WorkspaceSandbox,
    key: str,
    manifest: Manifest,
    provider_config: Mapping[str, str],
    *,
    namespace: str | None = None,
    management: list[str] | None = None,
    ready_when: str | None = None,
) -> Manifest:
    """An Object named after the sandbox and the composed resource it carries."""
    inner = manifest
    if namespace is not None:
        inner = {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}}
    query = ready_when or ready_query(manifest)
    readiness: dict[str, str] = (
        {"policy": "SuccessfulCreate"}
        if query is None
        else {"policy": "DeriveFromCelQuery", "celQuery": query}
    )
    spec: dict[str, Any] = {
        "forProvider": {"manifest": inner},
        "providerConfigRef": dict(provider_config),
        "readiness": readiness,
    }
    if management is not None:
        spec["managementPolicies"] = management
    return {
        "apiVersion": API_VERSION,
        "kind": "Object",
        "metadata": {"name": object_name(ws, key), "labels": labels(ws)},
        "spec": spec,
    }


def unwrap(observed: Observed) -> Observed:
    """What each observed Object carries, as observed inside; other resources as they are."""
    out: dict[str, Any] = {}
    for key, obj in observed.items():
        if dig(obj, "apiVersion") != API_VERSION or dig(obj, "kind") != "Object":
            out[key] = obj
            continue
        seen = dig(obj, "status", "atProvider", "manifest")
        if isinstance(seen, Mapping):
            out[key] = seen
    return out
