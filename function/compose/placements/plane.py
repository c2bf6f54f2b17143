"""The ComputePlane a sandbox runs in: a Cozystack tenant cluster, composed or shared.

A ComputePlane is a tenant's own Kamaji cluster whose workers are KubeVirt VMs. A
`DedicatedComputePlane` preset composes one per sandbox, as a provider-kubernetes Object (the
plane itself, on Cozystack's API server, can't carry the controller reference that deletes it
with the sandbox); a `SharedComputePlane` preset places sandboxes into the tenant's existing
plane, which this function never composes or changes.

The plane's admin kubeconfig is withheld from the tenant. A namespaced provider-kubernetes
ProviderConfig points at its Secret, and every object placed in the plane is an `Object` using
it (`compute_plane.py`). The function itself only asks Crossplane whether that Secret exists (by
name); it never reads its data.
"""

from dataclasses import dataclass, field
from typing import Any

from function.compose import kubernetes_object
from function.compose.kubernetes_object import condition_query, unwrap
from function.compose.names import labels, plane_name, provider_config_name
from function.compose.observed import condition
from function.compose.ownership import REQUIREMENT_PREFIX
from function.compose.placements.plane_guards import workers_policy
from function.compose.requirement import Requirements, require
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.platform import ComputePlaneOptions, Preset, SandboxPlatform
from function.model.quantity import format_bytes
from function.model.spec import WorkspaceSandbox

PLANE_KEY = "compute-plane"
PROVIDER_CONFIG_KEY = "plane-access"
# The sandbox's own namespace inside the plane, placed first (`compute_plane.py`).
NAMESPACE_KEY = "plane-namespace"

PLANE_REQUIREMENT = "compute-plane"
SECRET_REQUIREMENT = "plane-kubeconfig"  # noqa: S105  # a requirement's name

PLANE_API = "apps.cozystack.io/v1alpha1"
# On the ProviderConfig: the plane the sandbox was placed in, which it never leaves.
PLANE_ANNOTATION = "sandbox.cozystack.io/compute-plane"
PROVIDER_CONFIG_API = "kubernetes.m.crossplane.io/v1alpha1"
# The plane's Object is Ready once the plane is: Cozystack reports its HelmRelease's Ready.
PLANE_READY = condition_query("Ready")


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


def options(preset: Preset) -> ComputePlaneOptions:
    found = preset.compute_plane
    assert found is not None  # noqa: S101  # Preset demands it for these placements.
    return found


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


def plane_object(
    ws: WorkspaceSandbox, options: ComputePlaneOptions, platform: SandboxPlatform
) -> Manifest:
    """The ComputePlane, created by provider-kubernetes.

    Cozystack's API server keeps no owner reference on an application, so a plane composed
    directly could never be deleted with its sandbox; the Object carrying it is, and deletes it.
    """
    ref = {"kind": "ClusterProviderConfig", "name": platform.compute_planes.cluster_provider_config}
    manifest = _compute_plane(ws, options)
    return kubernetes_object.wrap(
        ws, PLANE_KEY, manifest, ref, namespace=ws.metadata.namespace, ready_when=PLANE_READY
    )


def _taken(ws: WorkspaceSandbox, name: str) -> str:
    return (
        f"the ComputePlane {name!r} this sandbox would create (compute-plane) already exists; "
        "a sandbox never takes over an object it did not create, and deleting the sandbox "
        f"would delete that plane. Delete it (kubectl delete computeplane {name} -n "
        f"{ws.metadata.namespace}) or give the sandbox another name"
    )


def _not_ready(kind: str, name: str, obj: Any) -> str | None:
    ready = condition(obj, "Ready") or {}
    if ready.get("status") == "True":
        return None
    why = ready.get("message") or ready.get("reason") or "not reported yet"
    return f"waiting for {kind} {name!r} to be ready: {why}"


def name_of(ws: WorkspaceSandbox, preset: Preset) -> str:
    """The plane the preset places this sandbox in: its own, or the shared one it names."""
    named = options(preset).name
    return plane_name(ws) if named is None else named


def compute_plane(
    ws: WorkspaceSandbox,
    preset_name: str,
    preset: Preset,
    *,
    platform: SandboxPlatform,
    observed: Observed,
    required: dict[str, list[Manifest]],
) -> Plane:
    """The plane this sandbox runs in, and whether work can be placed into it now."""
    opts, namespace, name = options(preset), ws.metadata.namespace, name_of(ws, preset)
    secret = name + opts.kubeconfig_secret_suffix
    asks = {SECRET_REQUIREMENT: require("v1", "Secret", secret, namespace)}
    if preset.placement == "DedicatedComputePlane":
        resources = {PLANE_KEY: plane_object(ws, opts, platform)}
        seen: Any = unwrap(observed).get(PLANE_KEY)
        if PLANE_KEY not in observed:
            # The provider would take over a ComputePlane of the name, and delete it with the
            # sandbox: refuse one that exists before the Object is created.
            asks[PLANE_REQUIREMENT] = require(PLANE_API, "ComputePlane", name, namespace)
            # An Object of this sandbox that exists though not observed (its reference lost)
            # made the plane: ownership.vacancies holds that Object to this XR.
            ours = required.get(REQUIREMENT_PREFIX + PLANE_KEY)
            if required.get(PLANE_REQUIREMENT) and not ours:
                raise FieldError("metadata.name", _taken(ws, name))
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
    opts = options(preset)
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
                        "name": plane + opts.kubeconfig_secret_suffix,
                        "key": opts.kubeconfig_key,
                    },
                }
            },
        }
    }


def host_guards(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform, plane: str
) -> dict[str, Manifest]:
    """The policy on the plane's workers, composed beside the plane from the start."""
    if not platform.network.cilium:
        return {}
    cluster = options(preset).cluster(plane)
    return workers_policy(ws, platform, namespace=ws.metadata.namespace, cluster=cluster)
