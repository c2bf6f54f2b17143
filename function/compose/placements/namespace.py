"""The Namespace placement: the workload in the tenant's namespace.

It is composed beside its Service, policies and snapshots, once a disk to restore (if any) is
ready; nothing is staged, since the tenant's namespace and its baseline exist already.
"""

from function.compose import workloads
from function.compose.disk_size import never_shrinks, resize_warnings
from function.compose.network_policy import network_policies
from function.compose.placements.placement import Placement
from function.compose.restore import UNFETCHED, restore
from function.compose.service import service
from function.compose.sizing import size
from function.compose.snapshots import volume_snapshots
from function.compose.status import Waiting
from function.compose.workload import Build
from function.model import Manifest, Observed
from function.model.platform import Image, Preset, SandboxPlatform
from function.model.spec import WorkspaceSandbox


def in_namespace(
    ws: WorkspaceSandbox,
    *,
    preset_name: str,
    preset: Preset,
    platform: SandboxPlatform,
    image: Image,
    observed: Observed,
    required: dict[str, list[Manifest]],
) -> Placement:
    """The workload in the tenant's namespace, its disk made once a restore's snapshot is ready."""
    runs = workloads.of(preset, observed)
    source = restore(ws, runs, observed, required)
    sized = size(
        ws,
        preset_name,
        preset,
        image,
        source.min_disk,
        by_instancetype=runs.sized_by_instancetype(preset),
    )
    never_shrinks(ws, sized, runs, observed)
    warnings = resize_warnings(ws, sized, runs, observed, platform)
    account = runs.guest_account(observed, source.account)
    resources: dict[str, Manifest] = {}
    if source.waiting is None:
        resources |= runs.compose(Build(ws, preset, platform, image, sized, observed, account))
    resources |= service(ws, platform, ssh=runs.serves_ssh)
    resources |= network_policies(ws, preset, platform, ssh=runs.serves_ssh)
    resources |= volume_snapshots(ws, preset_name, preset, runs, observed, account)
    waiting = None
    if source.waiting is not None:
        waiting = Waiting("Pending", "WaitingForRestoreSnapshot", source.waiting)
    return Placement(
        resources=resources,
        runs=runs,
        desired=resources,
        observed=observed,
        requirements=source.requirements,
        unfetched=UNFETCHED,
        warnings=warnings,
        waiting=waiting,
    )
