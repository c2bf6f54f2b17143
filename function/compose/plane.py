"""ComputePlane placements: the sandbox runs inside a Cozystack ComputePlane cluster.

A ComputePlane is a tenant's own Kamaji cluster whose workers are KubeVirt VMs. A
`DedicatedComputePlane` preset composes one per sandbox; a `SharedComputePlane` preset places
sandboxes into the tenant's existing plane, which this function never composes or changes.

The plane's admin kubeconfig is withheld from the tenant. A namespaced provider-kubernetes
ProviderConfig points at its Secret, and every object placed in the plane is an `Object` using
it. The function itself only asks Crossplane whether that Secret exists (by name); it never
reads its data.

Work is placed in stages, each once the previous one is observed ready: the sandbox's namespace
(Pod Security "restricted"), the plane guard and the policy on the plane's workers
(`plane_guards`); then its quota, limits, ServiceAccount, network policies, Service and
workspace claim; then the workload and its snapshots. So the pod never runs before the
policies that isolate it exist. Once anything is placed, everything stays in the desired state
whatever the plane reports, so a plane that is briefly unready never makes Crossplane delete a
workspace.
"""

from dataclasses import dataclass, field
from typing import Any

from function.compose import kubernetes_object, snapshots, workspace_claim
from function.compose.names import (
    labels,
    plane_name,
    plane_namespace,
    provider_config_name,
)
from function.compose.network_policy import CILIUM_KEY, KUBERNETES_KEY, network_policies
from function.compose.observed import condition, dig
from function.compose.plane_guards import (
    GRACE_SECONDS,
    GUARD_KEY,
    KEEP,
    WORKERS_KEY,
    plane_guard,
    usages,
    workers_policy,
)
from function.compose.requirement import Requirements, require
from function.compose.sandbox import container_resources
from function.compose.service import KEY as SERVICE_KEY
from function.compose.service import service
from function.compose.service_account import KEY as SERVICE_ACCOUNT_KEY
from function.compose.sizing import Size
from function.compose.workload import Build, Workload
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.platform import ComputePlaneOptions, Image, Preset, SandboxPlatform
from function.model.quantity import format_bytes
from function.model.spec import WorkspaceSandbox

PLANE_KEY = "compute-plane"
PROVIDER_CONFIG_KEY = "plane-access"
NAMESPACE_KEY = "plane-namespace"
QUOTA_KEY = "plane-quota"
LIMITS_KEY = "plane-limits"

PLANE_REQUIREMENT = "compute-plane"
SECRET_REQUIREMENT = "plane-kubeconfig"  # noqa: S105  # a requirement's name

PLANE_API = "apps.cozystack.io/v1alpha1"
# On the ProviderConfig: the plane the sandbox was placed in, which it never leaves.
PLANE_ANNOTATION = "sandbox.cozystack.io/compute-plane"
PROVIDER_CONFIG_API = "kubernetes.m.crossplane.io/v1alpha1"

# The dedicated plane dies with the sandbox and takes everything in it along; deleting each
# object first would only wait on a cluster that is going away.
DEDICATED_MANAGEMENT = KEEP
POD_SECURITY = {
    f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")
}
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


@dataclass(frozen=True)
class Plane:
    name: str
    resources: dict[str, Manifest] = field(default_factory=dict)
    """The dedicated ComputePlane itself; nothing for a shared one."""
    requirements: Requirements = field(default_factory=dict)
    waiting: str | None = None
    """Why nothing can be placed into the plane yet."""

    def unfetched(self) -> str:
        """What to say when Crossplane can't fetch the requirements: what they are."""
        asked = [self.requirements[k] for k in sorted(self.requirements)]
        things = " and ".join(f"{a['kind']} {a['name']!r}" for a in asked)
        pronoun = "they" if len(asked) > 1 else "it"
        return (
            f"spec.preset: this Crossplane doesn't fetch required resources, so {things} "
            f"can't be looked up; the sandbox can't be placed into ComputePlane {self.name!r} "
            f"until {pronoun} can"
        )


def _options(preset: Preset) -> ComputePlaneOptions:
    options = preset.compute_plane
    assert options is not None  # noqa: S101  # Preset demands it for these placements.
    return options


def _compute_plane(ws: WorkspaceSandbox, options: ComputePlaneOptions) -> Manifest:
    groups: dict[str, Any] = {}
    for name, g in sorted(options.node_groups.items()):
        group: dict[str, Any] = {
            "minReplicas": g.min_replicas,
            "maxReplicas": g.max_replicas,
            "instanceType": g.instance_type,
            "diskSize": format_bytes(g.disk_size),
            "roles": list(g.roles),
        }
        if g.storage_class is not None:
            group["storageClass"] = g.storage_class
        groups[name] = group
    return {
        "apiVersion": PLANE_API,
        "kind": "ComputePlane",
        "metadata": {"name": plane_name(ws), "labels": labels(ws)},
        "spec": {"nodeGroups": groups},
    }


def _not_ready(kind: str, name: str, obj: Any) -> str | None:
    ready = condition(obj, "Ready") or {}
    if ready.get("status") == "True":
        return None
    why = ready.get("message") or ready.get("reason") or "not reported yet"
    return f"waiting for {kind} {name!r} to be ready: {why}"


def _stays(
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
    access = observed.get(PROVIDER_CONFIG_KEY)
    was = dig(access, "metadata", "annotations", PLANE_ANNOTATION)
    if was is None:
        # A ProviderConfig without the annotation still names its plane's Secret.
        secret = dig(access, "spec", "credentials", "secretRef", "name")
        suffix = _options(preset).kubeconfig_secret_suffix
        if isinstance(secret, str) and secret.endswith(suffix):
            was = secret.removesuffix(suffix)
    if was is None and PLANE_KEY in observed:
        was = plane_name(ws)
    if isinstance(was, str) and was != name:
        raise FieldError(
            "spec.preset",
            f"preset {preset_name!r} places sandboxes in ComputePlane {name!r}, but this "
            f"sandbox's workspace is in ComputePlane {was!r}; moving would leave it behind. "
            "Keep the preset, or create a new sandbox",
        )


def compute_plane(
    ws: WorkspaceSandbox,
    preset_name: str,
    preset: Preset,
    observed: Observed,
    required: dict[str, list[Manifest]],
) -> Plane:
    """The plane this sandbox runs in, and whether work can be placed into it now."""
    options, namespace = _options(preset), ws.metadata.namespace
    name = plane_name(ws) if options.name is None else options.name
    _stays(ws, preset_name, preset, name, observed)
    secret = name + options.kubeconfig_secret_suffix
    asks = {SECRET_REQUIREMENT: require("v1", "Secret", secret, namespace)}
    if preset.placement == "DedicatedComputePlane":
        resources = {PLANE_KEY: _compute_plane(ws, options)}
        seen: Any = observed.get(PLANE_KEY)
        if seen is None:
            return Plane(name, resources, asks, f"waiting for ComputePlane {name!r} to be created")
    else:
        resources = {}
        asks[PLANE_REQUIREMENT] = require(PLANE_API, "ComputePlane", name, namespace)
        found = required.get(PLANE_REQUIREMENT) or []
        if not found:
            missing = (
                f"ComputePlane {name!r} does not exist in namespace {namespace!r}; preset "
                f"{preset_name!r} places sandboxes into it, so create it first"
            )
            return Plane(name, resources, asks, missing)
        seen = found[0]
    if (why := _not_ready("ComputePlane", name, seen)) is not None:
        return Plane(name, resources, asks, why)
    # Existence only: the Secret's data is never looked at.
    if not required.get(SECRET_REQUIREMENT):
        absent = f"waiting for ComputePlane {name!r}'s kubeconfig Secret {secret!r}"
        return Plane(name, resources, asks, absent)
    return Plane(name, resources, asks)


def provider_config(ws: WorkspaceSandbox, preset: Preset, plane: str) -> dict[str, Manifest]:
    options = _options(preset)
    return {
        PROVIDER_CONFIG_KEY: {
            "apiVersion": PROVIDER_CONFIG_API,
            "kind": "ProviderConfig",
            "metadata": {
                "name": provider_config_name(ws),
                "labels": labels(ws),
                "annotations": {PLANE_ANNOTATION: plane},
            },
            "spec": {
                "credentials": {
                    "source": "Secret",
                    "secretRef": {
                        "namespace": ws.metadata.namespace,
                        "name": plane + options.kubeconfig_secret_suffix,
                        "key": options.kubeconfig_key,
                    },
                }
            },
        }
    }


def _namespace(ws: WorkspaceSandbox) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": plane_namespace(ws), "labels": {**labels(ws), **POD_SECURITY}},
    }


def _quota(ws: WorkspaceSandbox, preset: Preset, size: Size) -> Manifest:
    """Room for exactly this sandbox: one pod of its size, one claim, one ClusterIP Service."""
    limits = container_resources(preset, size)["limits"]
    hard = {
        **{f"requests.{k}": v for k, v in limits.items()},
        **{f"limits.{k}": v for k, v in limits.items()},
        "requests.storage": format_bytes(size.disk),
        "persistentvolumeclaims": "1",
        "pods": "1",
        "services": "1",
        "services.loadbalancers": "0",
        "services.nodeports": "0",
    }
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "sandbox", "labels": labels(ws)},
        "spec": {"hard": dict(sorted(hard.items()))},
    }


def _limits(ws: WorkspaceSandbox, preset: Preset, size: Size) -> Manifest:
    limits = container_resources(preset, size)["limits"]
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "sandbox", "labels": labels(ws)},
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": limits,
                    "defaultRequest": dict(limits),
                    "max": dict(limits),
                },
                {"type": "PersistentVolumeClaim", "max": {"storage": format_bytes(size.disk)}},
            ]
        },
    }


def _inside_platform(platform: SandboxPlatform) -> SandboxPlatform:
    """Inside the plane no tenant baseline allows anything, so allow rules restrict."""
    network = platform.network.model_copy(update={"namespaces_allow_internet": False})
    return platform.model_copy(update={"network": network})


def workload(
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
    in_plane = _inside_platform(platform)
    guard = {GUARD_KEY: plane_guard(in_plane)} if platform.network.cilium else {}
    pod = runs.compose(Build(ws, preset, platform, image, size, inside))
    return {
        NAMESPACE_KEY: _namespace(ws),
        **guard,
        QUOTA_KEY: _quota(ws, preset, size),
        LIMITS_KEY: _limits(ws, preset, size),
        **network_policies(ws, preset, in_plane),
        **service(ws, preset, platform),
        **pod,
        runs.key: _short_grace(pod[runs.key]),
        **snapshots.volume_snapshots(ws, preset_name, preset, runs, inside),
    }


def _short_grace(manifest: Manifest) -> Manifest:
    """The workload with an explicit, short termination grace for its pod."""
    spec = manifest["spec"]
    field = "template" if "template" in spec else "podTemplate"
    template = spec[field]
    graced = {**template["spec"], "terminationGracePeriodSeconds": GRACE_SECONDS}
    return {**manifest, "spec": {**spec, field: {**template, "spec": graced}}}


def _clears_stage(key: str, observed: Observed, ready: dict[str, bool]) -> bool:
    """Whether `key` lets the next stage be placed: ready, or a claim that exists."""
    # A claim of a WaitForFirstConsumer class binds only once its pod exists: waiting for it to
    # be bound before placing the pod would wait forever.
    return ready.get(key, False) or (key == workspace_claim.KEY and key in observed)


def _staged(
    placed: dict[str, Manifest], observed: Observed, ready: dict[str, bool]
) -> dict[str, Manifest]:
    """What may be placed now: each stage once the one before is ready, and all placed so far.

    A stage also waits for what `ready` judges beside the Objects (the workers' policy).
    """
    out: dict[str, Manifest] = {}
    for stage in (*_STAGES, tuple(placed)):
        out |= {k: placed[k] for k in stage if k in placed}
        if not all(_clears_stage(k, observed, ready) for k in stage if k in placed or k in ready):
            break
    return out | {k: m for k, m in placed.items() if k in observed}


def place(
    ws: WorkspaceSandbox,
    *,
    preset: Preset,
    plane: str,
    inner: dict[str, Manifest],
    observed: Observed,
    ready: dict[str, bool],
) -> dict[str, Manifest]:
    """The ProviderConfig and an Object per placed resource, in the plane's sandbox namespace."""
    ref = {"kind": "ProviderConfig", "name": provider_config_name(ws)}
    namespace = plane_namespace(ws)
    dedicated = preset.placement == "DedicatedComputePlane"
    out = provider_config(ws, preset, plane)
    for key, manifest in _staged(inner, observed, ready).items():
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


def placed(observed: Observed) -> bool:
    """Whether anything is already in the plane: then nothing may leave the desired state."""
    return any(
        dig(obj, "kind") == "Object" and dig(obj, "apiVersion") == kubernetes_object.API_VERSION
        for obj in observed.values()
    )


def placing(
    plane: str,
    runs: Workload,
    placed: dict[str, Manifest],
    observed: Observed,
    ready: dict[str, bool],
) -> str | None:
    """What placing the workload still waits for, while it isn't placed."""
    if runs.key in placed:
        return None
    waiting = [k for k in placed if k in ready and not _clears_stage(k, observed, ready)]
    shown = ", ".join(sorted(waiting)) or "the plane"
    return f"placing the sandbox into ComputePlane {plane!r}: waiting for {shown}"


def host_guards(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform, plane: str
) -> dict[str, Manifest]:
    """The policy on the plane's workers, composed beside the plane from the start."""
    if not platform.network.cilium:
        return {}
    cluster = _options(preset).cluster(plane)
    return workers_policy(ws, platform, namespace=ws.metadata.namespace, cluster=cluster)


def ordering(
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
