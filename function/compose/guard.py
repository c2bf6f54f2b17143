"""The platform guard: one CiliumClusterwideNetworkPolicy over every sandbox pod.

A sandbox's own policy is composed with it, so for a moment after its pod starts (or if a tenant
deletes the policy) nothing sandbox-specific applies. The guard closes that window: it selects
every pod carrying the workspace label in any namespace and applies the same denies, and it
denies the gateway UDP, SCTP and every ICMP type (a sandbox's own policy leaves ICMP to it). Its
default deny is off in both directions, so it only subtracts and never breaks what per-sandbox
policies allow.

It also follows the egress mode the function writes on each sandbox's pod: a pod labelled
`egress: None` is denied all egress, as its own policy denies it. An `Allowlist` sandbox gets
the Internet-mode denies only: its list is not known here, and a deny of anything it may list
would win over its own policy's allows for good.
"""

from function.compose.cilium_policy import ccnp
from function.compose.names import EGRESS_LABEL, MANAGED_BY, WORKSPACE_LABEL
from function.compose.network_policy import egress_denies, gateway_guard_denies, ingress_denies
from function.model import Manifest
from function.model.platform import SandboxPlatform

NAME = "workspace-sandbox-guard"


def guard_policy(platform: SandboxPlatform) -> Manifest:
    # kube-dns stays open on port 53 when any preset resolves through it; every preset's own
    # policy still denies it where that preset doesn't.
    cluster_dns = any(p.cluster_dns for p in platform.presets.values())
    return ccnp(
        NAME,
        {
            "description": "Denies every sandbox pod the node, the control plane, in-cluster "
            "endpoints and private ranges, and every caller but the gateway, even before its "
            "own policy exists.",
            "endpointSelector": {
                "matchExpressions": [{"key": WORKSPACE_LABEL, "operator": "Exists"}]
            },
            "enableDefaultDeny": {"egress": False, "ingress": False},
            "egressDeny": egress_denies(platform.network.denied_cidrs, cluster_dns=cluster_dns),
            "ingressDeny": [*ingress_denies(platform), *gateway_guard_denies(platform)],
        },
        {
            "description": "Denies every sandbox pod whose egress is None all egress, even "
            "before its own policy exists.",
            "endpointSelector": {
                "matchLabels": {EGRESS_LABEL: "None"},
                "matchExpressions": [{"key": WORKSPACE_LABEL, "operator": "Exists"}],
            },
            "enableDefaultDeny": {"egress": False, "ingress": False},
            "egressDeny": [{"toEntities": ["all"]}],
        },
        labels=MANAGED_BY,
    )
