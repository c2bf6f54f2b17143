"""The workspace disk's size over its life: it never shrinks, and says when it can't grow.

Leaving `spec.resources.disk` out keeps whatever the disk has, even if the preset's default
changed. How a larger size reaches the disk is the workload's (`workloads/`): a composed claim's
request grows, a VM's PVC is patched where the platform allows it, a claim template never
changes.
"""

from function.compose.sizing import Size
from function.compose.workload import Workload
from function.errors import FieldError
from function.model import Observed
from function.model.platform import SandboxPlatform
from function.model.quantity import format_bytes
from function.model.spec import WorkspaceSandbox


def never_shrinks(ws: WorkspaceSandbox, size: Size, workload: Workload, observed: Observed) -> None:
    """Refuse a disk smaller than the existing one."""
    current = workload.current_size(observed)
    if ws.spec.resources.disk is None or current is None or size.disk >= current:
        return
    raise FieldError(
        "spec.resources.disk",
        f"{format_bytes(size.disk)} is smaller than the workspace disk already is "
        f"({format_bytes(current)}); disks never shrink",
    )


def resize_warnings(
    ws: WorkspaceSandbox,
    size: Size,
    workload: Workload,
    observed: Observed,
    platform: SandboxPlatform,
) -> list[str]:
    """Say when a larger disk can't be applied to the existing disk."""
    current = workload.current_size(observed)
    if ws.spec.resources.disk is None or current is None or size.disk <= current:
        return []
    why = workload.fixed_size(platform)
    if why is None:
        return []
    return [f"spec.resources.disk: the workspace disk stays at {format_bytes(current)}; {why}"]
