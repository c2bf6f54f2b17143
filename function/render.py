"""render(): one WorkspaceSandbox and the platform's input in, every object it becomes out.

Pure and synchronous: no gRPC, no clock, no I/O. The same input gives the same output, because
Crossplane assumes determinism and server-side apply churns otherwise.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from function.compose import sandbox as pod_sandbox
from function.compose import workspace_volume
from function.compose.lifetime import DEFAULT_TTL_SECONDS, lifetime
from function.compose.network_policy import network_policies
from function.compose.readiness import readiness
from function.compose.restore import restore
from function.compose.sandbox import sandbox, settle_claims
from function.compose.service import service
from function.compose.service_account import service_account
from function.compose.sizing import size
from function.compose.snapshots import volume_snapshots
from function.compose.status import Condition, workspace_status
from function.compose.virtual_machine import virtual_machine
from function.compose.workspace_volume import resize_warnings
from function.compose.workspace_volume import workspace_volume as workspace_disk
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.platform import Preset, SandboxPlatform
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


def _same_runtime(preset_name: str, preset: Preset, observed: Observed) -> None:
    """A preset may change sizes and classes, never the kind of disk the workspace lives on."""
    has_vm_disk, has_pod = workspace_volume.KEY in observed, pod_sandbox.KEY in observed
    if (preset.runtime == "kubevirt" and has_pod) or (preset.runtime != "kubevirt" and has_vm_disk):
        was = "kubevirt" if has_vm_disk else "a pod runtime"
        raise FieldError(
            "spec.preset",
            f"preset {preset_name!r} runs {preset.runtime}, but this sandbox's workspace lives on "
            f"{was}; switching would leave it behind. Snapshot it and restore the snapshot into "
            "a new sandbox instead",
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
    if preset.placement != "Namespace":
        raise FieldError(
            "spec.preset",
            f"preset {preset_name!r} needs placement {preset.placement!r}, which this "
            "function version does not render yet",
        )
    _same_runtime(preset_name, preset, observed)
    life = lifetime(ws, preset_name, preset, now)
    if life.expired:
        ws = ws.model_copy(update={"spec": ws.spec.model_copy(update={"power": "Suspended"})})
    source = restore(ws, observed, required or {})
    sized = size(ws, preset_name, preset, image, source.min_disk)
    warnings = resize_warnings(ws, sized, observed)

    resources: dict[str, Manifest] = {}
    if source.waiting is None and preset.runtime == "kubevirt":
        resources |= workspace_disk(ws, preset, image, sized, observed)
        resources |= virtual_machine(ws, preset, platform, sized)
    elif source.waiting is None:
        resources |= service_account(ws)
        resources |= settle_claims(sandbox(ws, preset, platform, image, sized), observed)
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
