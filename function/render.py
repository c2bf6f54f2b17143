"""render(): one WorkspaceSandbox and the platform's input in, every object it becomes out.

Pure and synchronous: no gRPC, no clock, no I/O. The same input gives the same output, because
Crossplane assumes determinism and server-side apply churns otherwise.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from function.compose.lifetime import DEFAULT_TTL_SECONDS, lifetime
from function.compose.network_policy import network_policies
from function.compose.readiness import readiness
from function.compose.restore import restore
from function.compose.service import service
from function.compose.sizing import size
from function.compose.snapshots import volume_snapshots
from function.compose.status import Condition, workspace_status
from function.compose.virtual_machine import virtual_machine
from function.compose.workspace_volume import resize_warnings, workspace_volume
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.platform import SandboxPlatform
from function.model.spec import WorkspaceSandbox


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


def render(
    ws: WorkspaceSandbox,
    platform: SandboxPlatform,
    observed: Observed,
    now: datetime,
    required: dict[str, list[Manifest]] | None = None,
) -> Rendered:
    preset_name, preset = platform.preset(ws.spec.preset)
    image = platform.image(ws.spec.image)
    if preset.runtime != "kubevirt" or preset.placement != "Namespace":
        raise FieldError(
            "spec.preset",
            f"preset {preset_name!r} needs runtime {preset.runtime!r} with placement "
            f"{preset.placement!r}, which this function version does not render yet",
        )
    life = lifetime(ws, preset_name, preset, now)
    if life.expired:
        ws = ws.model_copy(update={"spec": ws.spec.model_copy(update={"power": "Suspended"})})
    source = restore(ws, observed, required or {})
    sized = size(ws, preset_name, preset, image, source.min_disk)
    warnings = resize_warnings(ws, sized, observed)

    resources: dict[str, Manifest] = {}
    if source.waiting is None:
        resources |= workspace_volume(ws, preset, image, sized, observed)
        resources |= virtual_machine(ws, preset, platform, sized)
    resources |= service(ws, platform)
    resources |= network_policies(ws, preset, platform)
    resources |= volume_snapshots(ws, preset_name, preset, observed)

    status, conditions, usable = workspace_status(
        ws, preset_name, preset, resources, observed, expired=life.expired, restoring=source.waiting
    )
    return Rendered(
        resources,
        readiness(resources, observed),
        status,
        conditions,
        usable,
        warnings,
        source.requirements,
        life.ttl_seconds,
    )
