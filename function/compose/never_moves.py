"""A workspace never moves: a preset may change sizes and classes, never where the disk lives.

Its disk stays on the runtime it was made on (a VM's DataVolume, a pod's claim, a ComputePlane),
and a placed sandbox stays in the plane it was placed in.
"""

from function.compose import plane, sandbox, workspace_claim, workspace_volume
from function.compose.names import plane_name
from function.compose.observed import dig
from function.errors import FieldError
from function.model import Observed
from function.model.platform import Preset
from function.model.spec import WorkspaceSandbox


def lives_on(observed: Observed) -> str | None:
    """Where an existing sandbox's workspace is: a VM disk, a pod claim, or a ComputePlane."""
    if workspace_volume.KEY in observed:
        return "kubevirt"
    claim = observed.get(workspace_claim.KEY)
    if dig(claim, "kind") == "Object":
        return "plane"
    if claim is not None or sandbox.KEY in observed:
        return "pod"
    return None


def same_runtime(preset_name: str, preset: Preset, observed: Observed) -> None:
    """A preset may change sizes and classes, never where the workspace lives."""
    was = lives_on(observed)
    if preset.placement != "Namespace":
        want = "plane"
    else:
        want = "kubevirt" if preset.runtime == "kubevirt" else "pod"
    if was is None or was == want:
        return
    where = {"kubevirt": "kubevirt", "pod": "a pod runtime", "plane": "a ComputePlane"}
    runs = preset.placement if want == "plane" else preset.runtime
    # A plane's snapshots are inside it, out of reach of a restore in the tenant's namespace.
    instead = (
        "Keep the preset, or create a new sandbox"
        if "plane" in (was, want)
        else "Snapshot it and restore the snapshot into a new sandbox instead"
    )
    raise FieldError(
        "spec.preset",
        f"preset {preset_name!r} runs {runs}, but this sandbox's workspace lives on "
        f"{where[was]}; switching would leave it behind. {instead}",
    )


def stays_in_plane(
    ws: WorkspaceSandbox, preset_name: str, preset: Preset, name: str, observed: Observed
) -> None:
    """A placed sandbox's workspace is in one plane: a preset may not move it to another."""
    if ws.spec.restore_from is not None:
        raise FieldError(
            "spec.restoreFrom",
            f"preset {preset_name!r} places each sandbox in its own namespace of a "
            "ComputePlane, and a claim can only be restored from a snapshot in its own "
            "namespace; restore into a sandbox of a Namespace preset",
        )
    access = observed.get(plane.PROVIDER_CONFIG_KEY)
    was = dig(access, "metadata", "annotations", plane.PLANE_ANNOTATION)
    if was is None:
        # A ProviderConfig without the annotation still names its plane's Secret.
        secret = dig(access, "spec", "credentials", "secretRef", "name")
        suffix = plane.options(preset).kubeconfig_secret_suffix
        if isinstance(secret, str) and secret.endswith(suffix):
            was = secret.removesuffix(suffix)
    if was is None and plane.PLANE_KEY in observed:
        was = plane_name(ws)
    if isinstance(was, str) and was != name:
        raise FieldError(
            "spec.preset",
            f"preset {preset_name!r} places sandboxes in ComputePlane {name!r}, but this "
            f"sandbox's workspace is in ComputePlane {was!r}; moving would leave it behind. "
            "Keep the preset, or create a new sandbox",
        )
