"""render(): one WorkspaceSandbox and the platform's input in, every object it becomes out.

Pure and synchronous: no gRPC, no clock, no I/O. The same input gives the same output, because
Crossplane assumes determinism and server-side apply churns otherwise.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from function.compose import agent, ownership, workloads
from function.compose.lifetime import DEFAULT_TTL_SECONDS, lifetime
from function.compose.names import resolve
from function.compose.placements import compute_plane, namespace, sandbox_namespace
from function.compose.placements.never_moves import lives_on, same_runtime
from function.compose.readiness import readiness
from function.compose.requirement import Requirements
from function.compose.status import Condition, workspace_status
from function.compose.workload import Workload
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.platform import Preset, SandboxPlatform
from function.model.spec import WorkspaceSandbox

AGENT_NOT_CONFIGURED = "AgentNotConfigured"
_PLACE = {
    "Namespace": namespace.in_namespace,
    "SandboxNamespace": sandbox_namespace.in_sandbox_namespace,
}


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
    kind = workloads.kind_of(preset)
    same_runtime(preset_name, preset, kind, observed)
    ignored = _ssh_needs_a_vm(ws, preset_name, preset, platform, observed, kind=kind)
    life = lifetime(ws, preset_name, preset, now)
    if life.expired:
        ws = ws.model_copy(update={"spec": ws.spec.model_copy(update={"power": "Suspended"})})
    place = _PLACE.get(preset.placement, compute_plane.in_plane)
    placed = place(
        ws,
        preset_name=preset_name,
        preset=preset,
        platform=platform,
        image=image,
        observed=observed,
        required=required or {},
    )
    judged = workspace_status(
        ws,
        preset_name,
        preset,
        placed.runs,
        placed.observed,
        desired=placed.desired,
        expired=life.expired,
        waiting=placed.waiting,
        plane=placed.plane,
        namespace=placed.namespace,
        now=now,
    )
    asks = placed.requirements | ownership.vacancies(ws, placed.resources, observed, required)
    notices = {}
    if kind.agent_from_input and platform.agent is None:
        notices[AGENT_NOT_CONFIGURED] = agent.not_configured(preset_name, platform)
    return Rendered(
        resources=placed.resources,
        ready=readiness(placed.resources, observed),
        status=judged.status,
        conditions=judged.conditions,
        composite_ready=judged.usable,
        warnings=[*ignored, *placed.warnings],
        requirements=asks,
        ttl_seconds=life.ttl_seconds,
        unfetched=placed.unfetched if placed.requirements else ownership.UNFETCHED,
        notices=notices,
    )


def _ssh_needs_a_vm(
    ws: WorkspaceSandbox,
    preset_name: str,
    preset: Preset,
    platform: SandboxPlatform,
    observed: Observed,
    *,
    kind: type[Workload],
) -> list[str]:
    """SSH keys reach only a VM (cloud-init installs them); a pod would silently ignore them.

    A new sandbox is refused. One that exists (made before keys were refused for pods) keeps
    being reconciled, so that its power and deadline still apply, and is warned instead.
    """
    if not ws.spec.ssh.authorized_keys or kind.serves_ssh:
        return []
    what = (
        f"preset {preset_name!r} runs the sandbox in a pod (runtime {preset.runtime}), which "
        "never receives SSH keys and serves no SSH"
    )
    if lives_on(observed) is not None:
        return [f"spec.ssh.authorizedKeys: {what}; the keys are ignored, remove them"]
    vms = sorted(n for n, p in platform.presets.items() if workloads.kind_of(p).serves_ssh)
    instead = f", or create the sandbox with a preset that runs a VM: {', '.join(vms)}"
    raise FieldError(
        "spec.ssh.authorizedKeys",
        f"{what}; remove spec.ssh.authorizedKeys{instead if vms else ''}",
    )
