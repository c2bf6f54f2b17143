"""Whether an object is this sandbox's: those it observes, names it takes, snapshots it restores.

Crossplane applies each composed resource with server-side apply. An object that already has
the name and no controller is taken over: the fields it sets change, the others stay, and the
object is deleted with the XR. One with another controller fails to apply, but the rest of the
desired state is applied all the same, so a VM could be created that mounts someone else's disk
of the name it expects. And Crossplane observes, for the function, every object the XR's
`spec.crossplane.resourceRefs` name that no other controller holds; a tenant can edit those. So:

- every observed object must be controlled by this XR (`check`);
- every name not observed yet is first looked up as a required resource, and one that exists
  and isn't this XR's is refused (`vacancies`); Crossplane applies a response only once the
  function has seen the answers to what it requires, so nothing is created before that;
- a restore reads only a VolumeSnapshot that a WorkspaceSandbox composed (`check_snapshot`).

Each refusal is a FATAL result naming the object: Crossplane then applies and deletes nothing.
"""

from collections.abc import Mapping
from typing import Any

from function.compose.observed import dig
from function.compose.requirement import Requirements, require
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.spec import WorkspaceSandbox

OWNER_GROUP = "sandbox.cozystack.io"
OWNER_KIND = "WorkspaceSandbox"
REQUIREMENT_PREFIX = "existing-"
_NEVER = "a sandbox never takes over an object it did not create"


UNFETCHED = (
    "metadata.name: this Crossplane doesn't fetch required resources, so the names this "
    "sandbox takes can't be checked for objects of another owner before it takes them"
)


def _controller(meta: Any) -> Mapping[str, Any] | None:
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def _by_a_sandbox(ref: Mapping[str, Any] | None) -> bool:
    if ref is None or ref.get("kind") != OWNER_KIND:
        return False
    api = ref.get("apiVersion")
    return isinstance(api, str) and api.partition("/")[0] == OWNER_GROUP


def controls(ws: WorkspaceSandbox, meta: Any) -> bool:
    """Whether this XR is the controller of the object with metadata `meta`."""
    ref = _controller(meta)
    if ref is None:
        return False
    if ws.metadata.uid:
        # Crossplane's own test: the controller reference carries the XR's uid.
        return bool(ref.get("uid") == ws.metadata.uid)
    # Without its uid (a file given to `render`), the XR is known by kind and name.
    return _by_a_sandbox(ref) and ref.get("name") == ws.metadata.name


def _held(meta: Any) -> str:
    ref = _controller(meta)
    if ref is None:
        return "it has no controller"
    return f"its controller is {ref.get('kind')} {ref.get('name')!r}"


def check(ws: WorkspaceSandbox, key: str, obj: Mapping[str, Any], meta: Any) -> None:
    """Refuse an observed object (`meta` its metadata) that this XR does not control."""
    if controls(ws, meta):
        return
    what = f"{dig(obj, 'kind')} {dig(meta, 'name')!r}"
    if _an_application(obj) and _controller(meta) is None:
        raise FieldError("spec.preset", _uncontrollable(ws, what, dig(meta, "name")))
    raise FieldError(
        "spec.crossplane.resourceRefs",
        f"{key} is {what}, which this sandbox does not control ({_held(meta)}); {_NEVER}. "
        "Remove the reference, or, if this sandbox made the object, give it back its "
        "controller reference",
    )


APPLICATIONS = "apps.cozystack.io"
"""Cozystack's tenant kinds (a ComputePlane among them), served by its own API server."""


def _an_application(obj: Mapping[str, Any]) -> bool:
    api = dig(obj, "apiVersion")
    return isinstance(api, str) and api.partition("/")[0] == APPLICATIONS


def _uncontrollable(ws: WorkspaceSandbox, what: str, name: Any) -> str:
    """Why a Cozystack application observed as composed has no controller.

    Cozystack's API server stores an application as a Flux HelmRelease and keeps no owner
    reference on it, so Crossplane's controller reference to the XR is dropped as it is written
    (docs/platform-guide.md, "DedicatedComputePlane on Cozystack's API"). A sandbox composes its
    plane through a provider-kubernetes Object; one composed directly (by a version before that)
    can never be deleted with the sandbox.
    """
    return (
        f"{what} has no controller reference: Cozystack's API server keeps no owner references "
        "on its applications, so a plane composed directly would outlive the sandbox. This "
        "sandbox now creates its plane through a provider-kubernetes Object, which deletes it "
        f"with the sandbox: delete the plane made before (kubectl delete computeplane {name} "
        f"-n {ws.metadata.namespace}) and the sandbox creates it again"
    )


def _asks(ws: WorkspaceSandbox, key: str, manifest: Manifest) -> Requirements:
    name, namespace = manifest["metadata"]["name"], ws.metadata.namespace
    asks = {
        REQUIREMENT_PREFIX + key: require(manifest["apiVersion"], manifest["kind"], name, namespace)
    }
    if manifest["kind"] == "DataVolume":
        # CDI can adopt a claim of the DataVolume's name, and the VM mounts that claim.
        claim = require("v1", "PersistentVolumeClaim", name, namespace)
        asks[f"{REQUIREMENT_PREFIX}{key}-claim"] = claim
    return asks


def _claim_of(meta: Any, data_volume: str) -> bool:
    """A DataVolume's own claim: controlled by the DataVolume of its name."""
    ref = _controller(meta)
    return ref is not None and (ref.get("kind"), ref.get("name")) == ("DataVolume", data_volume)


def _refuse_taken(
    ws: WorkspaceSandbox,
    key: str,
    asks: Requirements,
    required: Mapping[str, list[Manifest]],
) -> None:
    own = REQUIREMENT_PREFIX + key
    # A DataVolume's claim may exist only beside the DataVolume, which must then be ours.
    disk = bool(required.get(own))
    for ask_key, ask in asks.items():
        for found in required.get(ask_key) or ():
            meta = dig(found, "metadata")
            ok = controls(ws, meta) if ask_key == own else disk and _claim_of(meta, ask["name"])
            if not ok:
                raise FieldError(
                    "metadata.name",
                    f"the {ask['kind']} {ask['name']!r} this sandbox would create ({key}) "
                    f"already exists and is not this sandbox's ({_held(meta)}); {_NEVER}. "
                    f"Delete or rename that {ask['kind']}, or give the sandbox another name",
                )


def vacancies(
    ws: WorkspaceSandbox,
    resources: Mapping[str, Manifest],
    observed: Observed,
    required: Mapping[str, list[Manifest]] | None,
) -> Requirements:
    """Look up every name not observed yet; refuse one that exists and isn't this XR's.

    Returns the requirements to ask Crossplane for. Until it answers them, nothing is checked:
    Crossplane calls again with the answers before it applies anything.
    """
    out: Requirements = {}
    for key, manifest in resources.items():
        if key in observed:
            continue
        asks = _asks(ws, key, manifest)
        out |= asks
        if required is not None:
            _refuse_taken(ws, key, asks, required)
    return out


def check_snapshot(snapshot: Any, name: str) -> None:
    """Refuse to restore a VolumeSnapshot that no WorkspaceSandbox composed."""
    meta = dig(snapshot, "metadata")
    if _by_a_sandbox(_controller(meta)):
        return
    raise FieldError(
        "spec.restoreFrom.snapshot",
        f"VolumeSnapshot {name!r} was not taken by a WorkspaceSandbox ({_held(meta)}); only a "
        "sandbox's own snapshots can be restored, by the name its status.snapshots[]"
        ".volumeSnapshot reports",
    )
