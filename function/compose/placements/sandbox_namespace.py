"""The SandboxNamespace placement: a host namespace of its own, which only the platform runs.

In the tenant's namespace a sandbox shares the tenant's baseline (all of the namespace, and the
internet, are allowed; allows add up, so no name-based allow-list can narrow it) and sits
beside whatever the tenant administers. Here it gets a namespace of its own on the host
cluster, named from the tenant's namespace and the XR (`names.sandbox_namespace`), with Pod
Security "restricted" and no baseline: allow rules restrict, so `toFQDNs` works.

A namespaced XR composes only into its own namespace, so every part is a provider-kubernetes
`Object` in the tenant's namespace, applied through the platform's ClusterProviderConfig
(`sandboxNamespaces.clusterProviderConfig`), in stages as in a ComputePlane: the namespace;
then its quota, limits, ServiceAccount, policies and Service; then the disk and the workload,
and its snapshots. So nothing runs there before the policies that isolate it. Deleting the
sandbox deletes the workload before its policies and its namespace (Usages).

The XR stays the whole tenant API: its status reads the workload as its Objects observe it.
"""

from function.compose import kubernetes_object, snapshots, workloads
from function.compose.disk_size import never_shrinks, resize_warnings
from function.compose.kubernetes_object import unwrap
from function.compose.names import SANDBOX_NAMESPACE_KEY, labels, sandbox_namespace
from function.compose.network_policy import CILIUM_KEY, KUBERNETES_KEY, network_policies
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
from function.compose.placements.plane_guards import usages
from function.compose.readiness import is_ready
from function.compose.service import KEY as SERVICE_KEY
from function.compose.service import service
from function.compose.service_account import KEY as SERVICE_ACCOUNT_KEY
from function.compose.sizing import Size, size
from function.compose.status import Waiting
from function.compose.workload import Build, Workload
from function.compose.workloads.kubevirt.workspace_volume import GROW_KEY
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.platform import Image, Preset, SandboxPlatform
from function.model.spec import WorkspaceSandbox

KEY = SANDBOX_NAMESPACE_KEY
# The label that marks a namespace as a sandbox's, with the tenant namespace it serves; the
# install's admission policies let only the platform set it, and confine the platform's
# identity to namespaces that carry it.
TENANT_LABEL = "sandbox.cozystack.io/tenant-namespace"
REASON = "PlacingInSandboxNamespace"
QUOTA_KEY = "namespace-quota"
LIMITS_KEY = "namespace-limits"

_STAGES = (
    (KEY,),
    (QUOTA_KEY, LIMITS_KEY, SERVICE_ACCOUNT_KEY, CILIUM_KEY, KUBERNETES_KEY, SERVICE_KEY),
)


def in_sandbox_namespace(
    ws: WorkspaceSandbox,
    *,
    preset_name: str,
    preset: Preset,
    platform: SandboxPlatform,
    image: Image,
    observed: Observed,
    required: dict[str, list[Manifest]],  # noqa: ARG001  # the placements' common signature
) -> Placement:
    """The namespace, then Objects carrying the sandbox's parts into it, stage by stage."""
    stays_put(ws, preset_name)
    inside = unwrap(observed)
    # The disk-growth Object is read for what it asks (as in the tenant's namespace), not as
    # the claim it patches.
    if GROW_KEY in observed:
        inside = {**inside, GROW_KEY: observed[GROW_KEY]}
    runs = workloads.of(preset, inside)
    sized = size(ws, preset_name, preset, image, by_instancetype=runs.sized_by_instancetype(preset))
    never_shrinks(ws, sized, runs, inside)
    warnings = resize_warnings(ws, sized, runs, inside, platform)
    namespace = sandbox_namespace(ws)
    parts = _contents(ws, preset_name, preset, platform, image, sized, inside, runs)
    ready = {k: is_ready(OBJECT, observed.get(k)) for k in parts}
    ref = {
        "kind": "ClusterProviderConfig",
        "name": platform.sandbox_namespaces.cluster_provider_config,
    }
    resources: dict[str, Manifest] = {}
    for key, manifest in staged(parts, observed, ready, _STAGES).items():
        if key == GROW_KEY:
            resources[key] = _retarget(manifest, namespace, ref)
            continue
        where = None if key == KEY else namespace
        resources[key] = kubernetes_object.wrap(ws, key, manifest, ref, namespace=where)
    inner = {k: parts[k] for k in parts if k in resources}
    used = (CILIUM_KEY, KUBERNETES_KEY, KEY)
    resources |= usages(ws, resources, [(k, runs.key) for k in used])
    waiting = None
    placing = f"placing the sandbox into its namespace {namespace!r}"
    if runs.key not in resources:
        held = sorted(k for k in resources if k in ready and not clears_stage(k, observed, ready))
        shown = ", ".join(held) or "the namespace"
        waiting = Waiting("Provisioning", REASON, f"{placing}: waiting for {shown}")
    elif runs.key not in observed:
        # Placed, not yet applied: still provisioning, not back to Pending.
        kind = parts[runs.key]["kind"]
        waiting = Waiting("Provisioning", REASON, f"{placing}: creating the {kind}")
    return Placement(
        resources=resources,
        runs=runs,
        desired=inner,
        observed=inside,
        warnings=warnings,
        waiting=waiting,
        namespace=namespace,
    )


def stays_put(ws: WorkspaceSandbox, preset_name: str) -> None:
    """A restore reads a snapshot of the tenant's namespace, which this namespace can't reach."""
    if ws.spec.restore_from is not None:
        raise FieldError(
            "spec.restoreFrom",
            f"preset {preset_name!r} places each sandbox in a namespace of its own, and a disk "
            "can only be restored from a snapshot in its own namespace; restore into a "
            "sandbox of a Namespace preset",
        )


def _contents(  # noqa: PLR0917  # the parts of one placement
    ws: WorkspaceSandbox,
    preset_name: str,
    preset: Preset,
    platform: SandboxPlatform,
    image: Image,
    sized: Size,
    inside: Observed,
    runs: Workload,
) -> dict[str, Manifest]:
    """Everything placed in the namespace, unwrapped, keyed like the resources they become."""
    account = runs.guest_account(inside, None)
    workload = runs.compose(Build(ws, preset, platform, image, sized, inside, account))
    if not runs.keeps_its_grace:
        workload[runs.key] = short_grace(workload[runs.key])
    return {
        KEY: namespace(ws),
        QUOTA_KEY: quota(ws, preset, sized, runs),
        LIMITS_KEY: _limits(ws, preset, sized, runs),
        **network_policies(ws, preset, inside_platform(platform), ssh=runs.serves_ssh),
        **service(ws, platform, ssh=runs.serves_ssh),
        **workload,
        **snapshots.volume_snapshots(ws, preset_name, preset, runs, inside, account),
    }


def namespace(ws: WorkspaceSandbox) -> Manifest:
    marks = {**labels(ws), TENANT_LABEL: ws.metadata.namespace, **POD_SECURITY}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": sandbox_namespace(ws), "labels": marks},
    }


def quota(ws: WorkspaceSandbox, preset: Preset, sized: Size, runs: Workload) -> Manifest:
    """Room for this sandbox alone, at its size, plus the preset's headroom.

    What the workload itself needs is its own (`Workload.room`): a VM's pod asks KubeVirt's
    overhead beyond the guest, and a live migration runs a second one for a while; CDI fills
    the disk through a second claim. A pod's RuntimeClass overhead counts against the quota too.
    Nothing may be exposed beyond a ClusterIP Service.
    """
    room = runs.room(preset, sized)
    return namespace_quota(ws, room.compute, claims=room.claims, disk=room.disk, pods=room.pods)


def _limits(ws: WorkspaceSandbox, preset: Preset, sized: Size, runs: Workload) -> Manifest:
    """No claim bigger than the disk; a pod's containers at the sandbox's size.

    A VM's pod sizes itself (the guest plus KubeVirt's overhead), so its containers get no
    default or maximum here: either would cut the guest's memory short.
    """
    return namespace_limits(ws, runs.container_limits(preset, sized), sized.disk)


def _retarget(growth: Manifest, namespace: str, ref: dict[str, str]) -> Manifest:
    """The disk-growth Object, pointed at the claim in the sandbox's namespace."""
    spec = growth["spec"]
    manifest = spec["forProvider"]["manifest"]
    moved = {**manifest, "metadata": {**manifest["metadata"], "namespace": namespace}}
    return {
        **growth,
        "spec": {
            **spec,
            "forProvider": {**spec["forProvider"], "manifest": moved},
            "providerConfigRef": ref,
        },
    }
