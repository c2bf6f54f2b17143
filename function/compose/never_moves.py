"""A workspace never moves: a preset may change sizes and classes, never where the disk lives."""

from function.compose import sandbox, workspace_claim, workspace_volume
from function.compose.observed import dig
from function.errors import FieldError
from function.model import Observed
from function.model.platform import Preset


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
