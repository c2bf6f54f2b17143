"""What keeps a ComputePlane placement isolated beyond the sandbox's own policies.

A sandbox's policies inside the plane are objects like any other there, and deleting a
WorkspaceSandbox deletes what it composed in no particular order. Three things cover the gaps:

* The plane guard: the platform guard's CiliumClusterwideNetworkPolicy, placed into the plane
  before anything else and never deleted there (its Object may observe, create and update,
  not delete). A pod still terminating after its policies went, or a namespace being emptied
  in any order, stays behind the same denies.
* Usages (`protection.crossplane.io`): Crossplane refuses to delete a policy's Object, or the
  sandbox's namespace, while the workload's Object exists; and a composed Usage stays until
  the resource using it is gone, so the order holds through the XR's own deletion.
* The workers' policy: a plane's workers are KubeVirt VMs in the tenant's namespace, under
  nothing but the tenant baseline. One escape from a sandbox's runtime lands on a worker, so
  the workers get a sandbox's egress denies on the host, minus what a worker needs: its own
  namespace (the control plane and the other workers), kube-dns on port 53, the ingress
  controllers its control plane's endpoint is behind, and the cluster's load balancers. It
  stays until the sandbox's namespace in the plane is gone (and with it every pod there), or,
  for a dedicated plane, until the plane itself is gone.
"""

from typing import Any

from function.compose.cilium_policy import cnp
from function.compose.guard import guard_policy
from function.compose.names import child_name, labels
from function.compose.network_policy import DENIED_ENTITIES, KUBE_DNS, MAX_PORT, NAMESPACE
from function.model import Manifest
from function.model.address import Network, ip_text
from function.model.blocklist import DENY_V4, DENY_V6
from function.model.platform import SandboxPlatform
from function.model.spec import WorkspaceSandbox

GUARD_KEY = "plane-guard"
WORKERS_KEY = "plane-workers"
USAGE_PREFIX = "usage-"

# An Object that creates and updates what it carries but never deletes it.
KEEP = ["Observe", "Create", "Update"]
# Termination grace for the workload's pod in a plane: the agent needs little to stop, and a
# pod that outlives its own policies does so behind the guard alone for at most this long.
GRACE_SECONDS = 5

USAGE_API = "protection.crossplane.io/v1beta1"
# Labels the Cluster API KubeVirt provider puts on every machine's VMI, so on its pod.
CLUSTER_LABEL = "cluster.x-k8s.io/cluster-name"
VIRT_LAUNCHER = {"kubevirt.io": "virt-launcher"}
# Cozystack's ingress controllers: a plane's control-plane endpoint is behind one of them.
INGRESS_LABEL = "cozystack.io/service"


def plane_guard(platform: SandboxPlatform) -> Manifest:
    return guard_policy(platform)


def _cidr_denies(platform: SandboxPlatform) -> list[dict[str, Any]]:
    """A sandbox's CIDR denies, with the cluster's load balancers taken out of them."""
    balancers: tuple[Network, ...] = platform.network.site_addresses.load_balancer_cidrs or ()
    denied: tuple[Network, ...] = (
        *(n for n, _ in DENY_V4),
        *(n for n, _ in DENY_V6),
        *platform.network.worker_denied_cidrs,
    )
    out: list[dict[str, Any]] = []
    for network in denied:
        if any(
            network.version == lb.version and network.subnet_of(lb)  # type: ignore[arg-type]
            for lb in balancers
        ):
            continue
        inside = [
            ip_text(lb)
            for lb in balancers
            if lb.version == network.version and lb.subnet_of(network)  # type: ignore[arg-type]
        ]
        out.append({"cidr": ip_text(network), **({"except": inside} if inside else {})})
    return out


def workers_policy(
    ws: WorkspaceSandbox, platform: SandboxPlatform, *, namespace: str, cluster: str
) -> dict[str, Manifest]:
    """The host-side denies on the plane's worker VMs (their virt-launcher pods)."""
    elsewhere = {
        "matchExpressions": [
            # Exists first: without it, NotIn would also match Cilium's reserved identities
            # (the internet among them) where the local-cluster term is not added.
            {"key": NAMESPACE, "operator": "Exists"},
            {"key": NAMESPACE, "operator": "NotIn", "values": sorted({namespace, "kube-system"})},
            {"key": INGRESS_LABEL, "operator": "NotIn", "values": ["ingress"]},
        ]
    }
    system = {
        "matchExpressions": [
            {"key": NAMESPACE, "operator": "In", "values": ["kube-system"]},
            {"key": "k8s-app", "operator": "NotIn", "values": ["kube-dns"]},
        ]
    }
    dns_elsewhere = [
        {"port": "1", "endPort": 52, "protocol": "ANY"},
        {"port": "54", "endPort": MAX_PORT, "protocol": "ANY"},
    ]
    policy = cnp(
        child_name(ws, WORKERS_KEY),
        {
            "description": f"A sandbox's egress denies on the worker VMs of {cluster}, but "
            "for their own namespace, kube-dns and the ingress to their control plane.",
            "endpointSelector": {"matchLabels": {CLUSTER_LABEL: cluster, **VIRT_LAUNCHER}},
            "egressDeny": [
                {"toEntities": DENIED_ENTITIES},
                {"toEndpoints": [elsewhere, system]},
                {"toEndpoints": [{"matchLabels": KUBE_DNS}], "toPorts": [{"ports": dns_elsewhere}]},
                {"toCIDRSet": _cidr_denies(platform)},
            ],
        },
        labels=labels(ws),
    )
    return {WORKERS_KEY: policy}


def _reference(manifest: Manifest) -> dict[str, Any]:
    return {
        "apiVersion": manifest["apiVersion"],
        "kind": manifest["kind"],
        "resourceRef": {"name": manifest["metadata"]["name"]},
    }


def usages(
    ws: WorkspaceSandbox, resources: dict[str, Manifest], pairs: list[tuple[str, str]]
) -> dict[str, Manifest]:
    """A Usage per (used, user) pair of composed resources, once both are composed."""
    out: dict[str, Manifest] = {}
    for used, user in pairs:
        if used not in resources or user not in resources:
            continue
        key = f"{USAGE_PREFIX}{used}"
        out[key] = {
            "apiVersion": USAGE_API,
            "kind": "Usage",
            "metadata": {"name": child_name(ws, key), "labels": labels(ws)},
            "spec": {
                "of": _reference(resources[used]),
                "by": _reference(resources[user]),
                # The garbage collector backs off after a refused delete; this retries it as
                # soon as the user is gone.
                "replayDeletion": True,
            },
        }
    return out
