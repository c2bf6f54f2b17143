"""render(): one WorkspaceSandbox and the platform's input in, every object it becomes out.

Pure and synchronous: no gRPC, no clock, no I/O. The same input gives the same output, because
Crossplane assumes determinism and server-side apply churns otherwise.
"""

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from function.compose import agent, ownership, plane, workloads
from function.compose.disk_size import never_shrinks, resize_warnings
from function.compose.kubernetes_object import API_VERSION as OBJECT_API
from function.compose.kubernetes_object import unwrap
from function.compose.lifetime import DEFAULT_TTL_SECONDS, Lifetime, lifetime
from function.compose.names import resolve
from function.compose.network_policy import network_policies
from function.compose.never_moves import lives_on, same_runtime
from function.compose.plane_guards import WORKERS_KEY
from function.compose.readiness import is_ready, readiness
from function.compose.requirement import Requirements
from function.compose.restore import UNFETCHED, restore
from function.compose.service import service
from function.compose.sizing import size
from function.compose.snapshots import volume_snapshots
from function.compose.status import Condition, Judged, workspace_status
from function.compose.workload import Build
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
    requirements: Requirements = field(default_factory=dict)
    """Resources Crossplane should fetch for the next call: name -> apiVersion, kind, name, ns."""
    ttl_seconds: int = DEFAULT_TTL_SECONDS
    """How long Crossplane may wait before calling again; shorter before a suspend deadline."""
    unfetched: str = ""
    """The warning for a Crossplane that can't fetch `requirements`: what they are for."""
    notices: dict[str, str] = field(default_factory=dict)
    """Warnings with a reason of their own, for the platform engineer: reason -> message."""


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
    if lives_on(observed) is not None:
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
    same_runtime(preset_name, preset, observed)
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
    runs = workloads.of(preset, observed)
    source = restore(ws, runs, observed, required or {})
    sized = size(ws, preset_name, preset, image, source.min_disk)
    never_shrinks(ws, sized, runs, observed)
    warnings = [*ignored, *resize_warnings(ws, sized, runs, observed, platform)]

    resources: dict[str, Manifest] = {}
    account = runs.guest_account(observed, source.account)
    if source.waiting is None:
        resources |= runs.compose(Build(ws, preset, platform, image, sized, observed, account))
    resources |= service(ws, preset, platform)
    resources |= network_policies(ws, preset, platform)
    resources |= volume_snapshots(ws, preset_name, preset, runs, observed, account)

    asks = source.requirements | ownership.vacancies(ws, resources, observed, required)
    judged = workspace_status(
        ws,
        preset_name,
        preset,
        runs,
        observed,
        desired=resources,
        expired=life.expired,
        restoring=source.waiting,
    )
    unfetched = UNFETCHED if source.requirements else ownership.UNFETCHED
    out = _rendered(resources, observed, judged, warnings, asks, life, unfetched=unfetched)
    if preset.runtime == "kubevirt" and platform.agent is None:
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
    runs = workloads.of(preset, inside)
    sized = size(ws, preset_name, preset, image)
    never_shrinks(ws, sized, runs, inside)
    warnings = resize_warnings(ws, sized, runs, inside, platform)
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
            runs=runs,
        )
        ready = {k: is_ready(OBJECT, observed.get(k)) for k in parts}
        # The workers' policy is composed directly; placing waits until it exists.
        if WORKERS_KEY in resources:
            ready[WORKERS_KEY] = WORKERS_KEY in observed
        resources |= plane.place(
            ws, preset=preset, plane=target.name, inner=parts, observed=observed, ready=ready
        )
        inner = {k: parts[k] for k in parts if k in resources}
        placing = plane.placing(target.name, runs, resources, observed, ready)
    resources |= plane.ordering(ws, preset, runs, resources)
    judged = workspace_status(
        ws,
        preset_name,
        preset,
        runs,
        inside,
        desired=inner,
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
    judged: Judged,
    warnings: list[str],
    requirements: Requirements,
    life: Lifetime,
    *,
    unfetched: str,
) -> Rendered:
    return Rendered(
        resources=resources,
        ready=readiness(resources, observed),
        status=judged.status,
        conditions=judged.conditions,
        composite_ready=judged.usable,
        warnings=warnings,
        requirements=requirements,
        ttl_seconds=life.ttl_seconds,
        unfetched=unfetched,
    )
