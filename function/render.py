"""render(): one WorkspaceSandbox and the platform's input in, every object it becomes out.

Pure and synchronous: no gRPC, no clock, no I/O. The same input gives the same output, because
Crossplane assumes determinism and server-side apply churns otherwise.
"""

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from function.compose import agent, ownership, plane, workspace_claim, workspace_volume
from function.compose import sandbox as pod_sandbox
from function.compose.account import guest_account
from function.compose.kubernetes_object import API_VERSION as OBJECT_API
from function.compose.kubernetes_object import unwrap
from function.compose.lifetime import DEFAULT_TTL_SECONDS, Lifetime, lifetime
from function.compose.names import resolve
from function.compose.network_policy import network_policies
from function.compose.observed import dig
from function.compose.plane_guards import WORKERS_KEY
from function.compose.readiness import is_ready, readiness
from function.compose.restore import UNFETCHED, restore
from function.compose.sandbox import sandbox, settle_claims
from function.compose.service import service
from function.compose.service_account import service_account
from function.compose.sizing import size
from function.compose.snapshots import volume_snapshots
from function.compose.status import Condition, workspace_status
from function.compose.virtual_machine import virtual_machine
from function.compose.workspace_volume import growth, resize_warnings
from function.compose.workspace_volume import workspace_volume as workspace_disk
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.platform import Image, Preset, SandboxPlatform
from function.model.spec import WorkspaceSandbox

OBJECT: Manifest = {"apiVersion": OBJECT_API, "kind": "Object"}
AGENT_NOT_CONFIGURED = "AgentNotConfigured"


@dataclass(frozen=True)
class Rendered:
    resources: dict[str, Manifest]
    """Composition-resource name -> whole manifest; every call emits all of them."""
    ready: dict[str, bool]
    status: dict[str, Any]
    """The part of the XR's status this function owns, emitted whole."""
    conditions: tuple[Condition, ...]
    composite_ready: bool
    """Whether the sandbox is usable now; Crossplane's XR Ready follows it."""
    warnings: list[str] = field(default_factory=list)
    requirements: dict[str, dict[str, str]] = field(default_factory=dict)
    """Resources Crossplane should fetch for the next call: name -> apiVersion, kind, name, ns."""
    ttl_seconds: int = DEFAULT_TTL_SECONDS
    """How long Crossplane may wait before calling again; shorter before a suspend deadline."""
    unfetched: str = ""
    """The warning for a Crossplane that can't fetch `requirements`: what they are for."""
    notices: dict[str, str] = field(default_factory=dict)
    """Warnings with a reason of their own, for the platform engineer: reason -> message."""


def _lives_on(observed: Observed) -> str | None:
    """Where an existing sandbox's workspace is: a VM disk, a pod claim, or a ComputePlane."""
    if workspace_volume.KEY in observed:
        return "kubevirt"
    claim = observed.get(workspace_claim.KEY)
    if dig(claim, "kind") == "Object":
        return "plane"
    if claim is not None or pod_sandbox.KEY in observed:
        return "pod"
    return None


def _same_runtime(preset_name: str, preset: Preset, observed: Observed) -> None:
    """A preset may change sizes and classes, never where the workspace lives."""
    was = _lives_on(observed)
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


def _ssh_needs_a_vm(
    ws: WorkspaceSandbox,
    preset_name: str,
    preset: Preset,
    platform: SandboxPlatform,
    observed: Observed,
) -> list[str]:
    """SSH keys reach only a VM (cloud-init installs them); a pod would silently ignore them.

    A new sandbox is refused. One that exists (made before keys were refused for pods) keeps
    being reconciled, so that its power and deadline still apply, and is warned instead.
    """
    if not ws.spec.ssh.authorized_keys or preset.runtime == "kubevirt":
        return []
    what = (
        f"preset {preset_name!r} runs the sandbox in a pod (runtime {preset.runtime}), which "
        "never receives SSH keys and serves no SSH"
    )
    if _lives_on(observed) is not None:
        return [f"spec.ssh.authorizedKeys: {what}; the keys are ignored, remove them"]
    vms = sorted(n for n, p in platform.presets.items() if p.runtime == "kubevirt")
    instead = f", or create the sandbox with a preset that runs a VM: {', '.join(vms)}"
    raise FieldError(
        "spec.ssh.authorizedKeys",
        f"{what}; remove spec.ssh.authorizedKeys{instead if vms else ''}",
    )


def render(
    ws: WorkspaceSandbox,
    platform: SandboxPlatform,
    observed: Observed,
    now: datetime,
    required: dict[str, list[Manifest]] | None = None,
) -> Rendered:
    preset_name, preset = platform.preset(ws.spec.preset)
    image = platform.image(ws.spec.image)
    ws = resolve(ws, observed)
    _same_runtime(preset_name, preset, observed)
    ignored = _ssh_needs_a_vm(ws, preset_name, preset, platform, observed)
    life = lifetime(ws, preset_name, preset, now)
    if life.expired:
        ws = ws.model_copy(update={"spec": ws.spec.model_copy(update={"power": "Suspended"})})
    if preset.placement != "Namespace":
        placed = _render_in_plane(
            ws,
            preset_name=preset_name,
            preset=preset,
            platform=platform,
            image=image,
            observed=observed,
            required=required,
            life=life,
        )
        return replace(placed, warnings=[*ignored, *placed.warnings])
    source = restore(ws, observed, required or {})
    sized = size(ws, preset_name, preset, image, source.min_disk)
    warnings = [*ignored, *resize_warnings(ws, sized, observed, platform)]

    resources: dict[str, Manifest] = {}
    vm = preset.runtime == "kubevirt"
    account = guest_account(observed, source.account) if vm else None
    if source.waiting is None and account is not None:
        resources |= workspace_disk(ws, preset, image, sized, observed, account)
        resources |= growth(ws, platform, sized, observed)
        resources |= virtual_machine(ws, preset, platform, sized, account)
    elif source.waiting is None:
        resources |= service_account(ws)
        resources |= workspace_claim.workspace_claim(ws, preset, sized, observed)
        resources |= settle_claims(sandbox(ws, preset, platform, image, sized), observed)
    resources |= service(ws, preset, platform)
    resources |= network_policies(ws, preset, platform)
    resources |= volume_snapshots(ws, preset_name, preset, observed, account)

    asks = source.requirements | ownership.vacancies(ws, resources, observed, required)
    judged = workspace_status(
        ws, preset_name, preset, resources, observed, expired=life.expired, restoring=source.waiting
    )
    unfetched = UNFETCHED if source.requirements else ownership.UNFETCHED
    out = _rendered(resources, observed, judged, warnings, asks, life, unfetched=unfetched)
    if vm and platform.agent is None:
        return replace(
            out, notices={AGENT_NOT_CONFIGURED: agent.not_configured(preset_name, platform)}
        )
    return out


def _render_in_plane(
    ws: WorkspaceSandbox,
    *,
    preset_name: str,
    preset: Preset,
    platform: SandboxPlatform,
    image: Image,
    observed: Observed,
    required: dict[str, list[Manifest]] | None,
    life: Lifetime,
) -> Rendered:
    """A sandbox in a ComputePlane: the plane, then Objects carrying its parts into it."""
    target = plane.compute_plane(ws, preset_name, preset, observed, required or {})
    inside = unwrap(observed)
    sized = size(ws, preset_name, preset, image)
    warnings = resize_warnings(ws, sized, inside, platform)
    resources = {**target.resources, **plane.host_guards(ws, preset, platform, target.name)}
    inner: dict[str, Manifest] = {}
    placing = None
    if target.waiting is None or plane.placed(observed):
        parts = plane.workload(
            ws,
            preset_name=preset_name,
            preset=preset,
            platform=platform,
            image=image,
            size=sized,
            inside=inside,
        )
        ready = {k: is_ready(OBJECT, observed.get(k)) for k in parts}
        # The workers' policy is composed directly; placing waits until it exists.
        if WORKERS_KEY in resources:
            ready[WORKERS_KEY] = WORKERS_KEY in observed
        resources |= plane.place(
            ws, preset=preset, plane=target.name, inner=parts, observed=observed, ready=ready
        )
        inner = {k: parts[k] for k in parts if k in resources}
        placing = plane.placing(target.name, resources, observed, ready)
    resources |= plane.ordering(ws, preset, resources)
    judged = workspace_status(
        ws,
        preset_name,
        preset,
        inner,
        inside,
        expired=life.expired,
        restoring=None,
        plane=target.name,
        plane_waiting=target.waiting,
        placing=placing,
    )
    asks = target.requirements | ownership.vacancies(ws, resources, observed, required)
    unfetched = target.unfetched() if target.requirements else ownership.UNFETCHED
    return _rendered(resources, observed, judged, warnings, asks, life, unfetched=unfetched)


def _rendered(  # noqa: PLR0917  # the parts of one answer
    resources: dict[str, Manifest],
    observed: Observed,
    judged: tuple[dict[str, Any], tuple[Condition, ...], bool],
    warnings: list[str],
    requirements: dict[str, dict[str, str]],
    life: Lifetime,
    *,
    unfetched: str,
) -> Rendered:
    status, conditions, usable = judged
    ready = readiness(resources, observed)
    return Rendered(
        resources,
        ready,
        status,
        conditions,
        usable,
        warnings,
        requirements,
        life.ttl_seconds,
        unfetched,
    )
