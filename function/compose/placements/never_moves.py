"""A workspace never moves: a preset may change sizes and classes, never where the disk lives.

Its disk stays on the runtime it was made on (a VM's DataVolume, a pod's claim, a ComputePlane),
and a placed sandbox stays in the plane it was placed in.
"""

from function.compose.names import (
    SANDBOX_KEY,
    WORKSPACE_CLAIM_KEY,
    WORKSPACE_VOLUME_KEY,
    plane_name,
)
from function.compose.observed import dig
from function.compose.placements import plane
from function.compose.workload import Workload
from function.errors import FieldError
from function.model import Observed
from function.model.platform import Preset
from function.model.spec import WorkspaceSandbox


def lives_on(observed: Observed) -> str | None:
    """Where an existing sandbox's workspace is.

    A VM disk or a pod claim in the tenant's namespace, the same in a namespace of its own
    (`own:` and the runtime), or a ComputePlane.
    """
    for key in (WORKSPACE_VOLUME_KEY, WORKSPACE_CLAIM_KEY, SANDBOX_KEY):
        obj = observed.get(key)
        if dig(obj, "kind") != "Object":
            continue
        if dig(obj, "spec", "providerConfigRef", "kind") != "ClusterProviderConfig":
            return "plane"
        return "own:kubevirt" if key == WORKSPACE_VOLUME_KEY else "own:pod"
    if WORKSPACE_VOLUME_KEY in observed:
        return "kubevirt"
    if WORKSPACE_CLAIM_KEY in observed or SANDBOX_KEY in observed:
        return "pod"
    return None


_WHERE = {
    "kubevirt": "kubevirt",
    "pod": "a pod runtime",
    "plane": "a ComputePlane",
    "own:kubevirt": "kubevirt in a namespace of its own",
    "own:pod": "a pod runtime in a namespace of its own",
}


def _wants(preset: Preset, kind: type[Workload]) -> str:
    if preset.placement not in {"Namespace", "SandboxNamespace"}:
        return "plane"
    home = kind.disk_lives_on
    return f"own:{home}" if preset.placement == "SandboxNamespace" else home


def same_runtime(
    preset_name: str, preset: Preset, kind: type[Workload], observed: Observed
) -> None:
    """A preset may change sizes and classes, never where the workspace lives.

    `kind`: the kind of workload the preset runs (`workloads.kind_of`).
    """
    was, want = lives_on(observed), _wants(preset, kind)
    if was is None or was == want:
        return
    runs: str = preset.placement if want == "plane" else preset.runtime
    if want.startswith("own:"):
        runs += " in a namespace of its own"
    # Snapshots stay where their disk is, out of reach of a restore in the tenant's namespace.
    instead = (
        "Snapshot it and restore the snapshot into a new sandbox instead"
        if was in {"kubevirt", "pod"} and want in {"kubevirt", "pod"}
        else "Keep the preset, or create a new sandbox"
    )
    raise FieldError(
        "spec.preset",
        f"preset {preset_name!r} runs {runs}, but this sandbox's workspace lives on "
        f"{_WHERE[was]}; switching would leave it behind. {instead}",
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
