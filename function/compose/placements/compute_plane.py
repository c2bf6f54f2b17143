"""The ComputePlane placements: the sandbox in a namespace of a Cozystack tenant cluster.

`in_plane` composes the plane (`plane.py`) and carries the parts into it as provider-kubernetes
Objects, in stages (`placement.staged`), each once the previous one is observed ready: the
sandbox's namespace (Pod Security "restricted"), the plane guard and the policy on the plane's
workers (`plane_guards`); then its quota, limits, ServiceAccount, network policies, Service and
workspace claim; then the workload and its snapshots. So the pod never runs before the policies
that isolate it exist. Once anything is placed, everything stays in the desired state whatever
the plane reports, so a plane that is briefly unready never makes Crossplane delete a workspace.
"""

from function.compose import kubernetes_object, snapshots, workloads, workspace_claim
from function.compose.disk_size import never_shrinks, resize_warnings
from function.compose.kubernetes_object import unwrap
from function.compose.names import labels, plane_namespace, provider_config_name
from function.compose.network_policy import CILIUM_KEY, KUBERNETES_KEY, network_policies
from function.compose.observed import dig
from function.compose.placements import plane
from function.compose.placements.never_moves import stays_in_plane
from function.compose.placements.placement import (
    OBJECT,
    POD_SECURITY,
    Placement,
    clears_stage,
    inside_platform,
    namespace_limits,
    namespace_quota,
    short_grace,
    staged,
)
from function.compose.placements.plane import NAMESPACE_KEY, PLANE_KEY, provider_config
from function.compose.placements.plane_guards import (
    GUARD_KEY,
    KEEP,
    WORKERS_KEY,
    plane_guard,
    usages,
)
from function.compose.pod import container_resources
from function.compose.readiness import is_ready
from function.compose.service import KEY as SERVICE_KEY
from function.compose.service import service
from function.compose.service_account import KEY as SERVICE_ACCOUNT_KEY
from function.compose.sizing import Size, size
from function.compose.status import Waiting
from function.compose.workload import Build, Workload
from function.model import Manifest, Observed
from function.model.platform import Image, Preset, SandboxPlatform
from function.model.spec import WorkspaceSandbox

QUOTA_KEY = "plane-quota"

LIMITS_KEY = "plane-limits"

# The dedicated plane dies with the sandbox and takes everything in it along; deleting each
# object first would only wait on a cluster that is going away.
DEDICATED_MANAGEMENT = KEEP

# What the plane holds outside the sandbox's namespace.
_CLUSTER_SCOPED = (NAMESPACE_KEY, GUARD_KEY)

_STAGES = (
    # The guard in the plane and the policy on its workers come first, so that no pod of the
    # sandbox runs before either exists.
    (NAMESPACE_KEY, GUARD_KEY, WORKERS_KEY),
    (
        QUOTA_KEY,
        LIMITS_KEY,
        SERVICE_ACCOUNT_KEY,
        CILIUM_KEY,
        KUBERNETES_KEY,
        SERVICE_KEY,
        workspace_claim.KEY,
    ),
)


def in_plane(
    ws: WorkspaceSandbox,
    *,
    preset_name: str,
    preset: Preset,
    platform: SandboxPlatform,
    image: Image,
    observed: Observed,
    required: dict[str, list[Manifest]],
) -> Placement:
    """The plane, then Objects carrying the sandbox's parts into it, stage by stage."""
    stays_in_plane(ws, preset_name, preset, plane.name_of(ws, preset), observed)
    target = plane.compute_plane(
        ws, preset_name, preset, platform=platform, observed=observed, required=required
    )
    inside = unwrap(observed)
    runs = workloads.of(preset, inside)
    sized = size(ws, preset_name, preset, image, by_instancetype=runs.sized_by_instancetype(preset))
    never_shrinks(ws, sized, runs, inside)
    warnings = resize_warnings(ws, sized, runs, inside, platform)
    resources = {**target.resources, **plane.host_guards(ws, preset, platform, target.name)}
    inner: dict[str, Manifest] = {}
    placing = None
    if target.waiting is None or _placed(observed):
        parts = _contents(
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
        resources |= _wrap(
            ws, preset=preset, into=target.name, inner=parts, observed=observed, ready=ready
        )
        inner = {k: parts[k] for k in parts if k in resources}
        placing = _placing(target.name, runs, resources, observed, ready)
    resources |= _ordering(ws, preset, runs, resources)
    waiting = None
    if target.waiting is not None:
        waiting = Waiting("Pending", "WaitingForComputePlane", target.waiting)
    elif placing is not None:
        waiting = Waiting("Provisioning", "PlacingInComputePlane", placing)
    return Placement(
        resources=resources,
        runs=runs,
        desired=inner,
        observed=inside,
        requirements=target.requirements,
        unfetched=target.unfetched() if target.requirements else "",
        warnings=warnings,
        waiting=waiting,
        plane=target.name,
        namespace=plane_namespace(ws),
    )


def _namespace(ws: WorkspaceSandbox) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": plane_namespace(ws), "labels": {**labels(ws), **POD_SECURITY}},
    }


def _quota(ws: WorkspaceSandbox, preset: Preset, size: Size) -> Manifest:
    """Room for exactly this sandbox: one pod of its size, one claim, one ClusterIP Service."""
    limits = container_resources(preset, size)["limits"]
    compute = {f"{kind}.{k}": v for kind in ("requests", "limits") for k, v in limits.items()}
    return namespace_quota(ws, compute, claims=1, disk=size.disk, pods=1)


def _limits(ws: WorkspaceSandbox, preset: Preset, size: Size) -> Manifest:
    return namespace_limits(ws, container_resources(preset, size)["limits"], size.disk)


def _contents(
    ws: WorkspaceSandbox,
    *,
    preset_name: str,
    preset: Preset,
    platform: SandboxPlatform,
    image: Image,
    size: Size,
    inside: Observed,
    runs: Workload,
) -> dict[str, Manifest]:
    """Everything placed inside the plane, unwrapped, keyed like the resources they become."""
    unbased = inside_platform(platform)
    guard = {GUARD_KEY: plane_guard(unbased)} if platform.network.cilium else {}
    pod = runs.compose(Build(ws, preset, platform, image, size, inside))
    return {
        NAMESPACE_KEY: _namespace(ws),
        **guard,
        QUOTA_KEY: _quota(ws, preset, size),
        LIMITS_KEY: _limits(ws, preset, size),
        **network_policies(ws, preset, unbased, ssh=runs.serves_ssh),
        **service(ws, platform, ssh=runs.serves_ssh),
        **pod,
        runs.key: short_grace(pod[runs.key]),
        **snapshots.volume_snapshots(ws, preset_name, preset, runs, inside),
    }


def _wrap(
    ws: WorkspaceSandbox,
    *,
    preset: Preset,
    into: str,
    inner: dict[str, Manifest],
    observed: Observed,
    ready: dict[str, bool],
) -> dict[str, Manifest]:
    """The ProviderConfig and an Object per placed resource, in the plane's sandbox namespace."""
    ref = {"kind": "ProviderConfig", "name": provider_config_name(ws)}
    namespace = plane_namespace(ws)
    dedicated = preset.placement == "DedicatedComputePlane"
    out = provider_config(ws, preset, into)
    for key, manifest in staged(inner, observed, ready, _STAGES).items():
        keep_deletes = key != GUARD_KEY and (not dedicated or key.startswith(snapshots.PREFIX))
        out[key] = kubernetes_object.wrap(
            ws,
            key,
            manifest,
            ref,
            namespace=None if key in _CLUSTER_SCOPED else namespace,
            management=None if keep_deletes else DEDICATED_MANAGEMENT,
        )
    return out


def _placed(observed: Observed) -> bool:
    """Whether anything is already in the plane: then nothing may leave the desired state."""
    return any(
        dig(obj, "kind") == "Object" and dig(obj, "apiVersion") == kubernetes_object.API_VERSION
        for key, obj in observed.items()
        if key != PLANE_KEY
    )


def _placing(
    into: str,
    runs: Workload,
    placed: dict[str, Manifest],
    observed: Observed,
    ready: dict[str, bool],
) -> str | None:
    """What placing the workload still waits for, while it isn't placed."""
    if runs.key in placed:
        return None
    waiting = [k for k in placed if k in ready and not clears_stage(k, observed, ready)]
    shown = ", ".join(sorted(waiting)) or "the plane"
    return f"placing the sandbox into ComputePlane {into!r}: waiting for {shown}"


def _ordering(
    ws: WorkspaceSandbox, preset: Preset, runs: Workload, resources: dict[str, Manifest]
) -> dict[str, Manifest]:
    """The Usages that order the placement's deletion, for what is composed so far.

    In a shared plane, the policies and the namespace stay while the workload's Object does,
    and the workers' policy while the namespace's Object does (which waits for the namespace,
    and so for every pod in it, to be gone). A dedicated plane's Objects delete nothing, and
    its workers' policy stays while the plane does.
    """
    if preset.placement == "DedicatedComputePlane":
        return usages(ws, resources, [(WORKERS_KEY, PLANE_KEY)])
    used = (CILIUM_KEY, KUBERNETES_KEY, NAMESPACE_KEY)
    return usages(ws, resources, [*((k, runs.key) for k in used), (WORKERS_KEY, NAMESPACE_KEY)])
