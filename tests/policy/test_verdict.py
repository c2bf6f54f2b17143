"""Each Cilium / NetworkPolicy semantic the evaluator implements, pinned by a flow it decides.

Every case would flip if its rule were implemented the obvious wrong way (CIDRs matching pods,
`world` excluding private ranges, deny losing to allow, selectors ignoring namespaces, ...).
"""

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from function.compose.names import WORKSPACE_LABEL, new_identity
from function.policy import (
    Environment,
    Flow,
    NotModelledError,
    Service,
    Verdict,
    cozystack_environment,
    evaluate,
    format_verdict,
)
from function.policy.verdict import Enforcement

ENV = cozystack_environment()
ALLOWED, DENIED = True, False
NS = "k8s:io.kubernetes.pod.namespace"
# The modelled sandboxes carry the identity labels render gives new sandboxes.
ALICE = {"matchLabels": {WORKSPACE_LABEL: new_identity("alice-api")}}
BOB = {"matchLabels": {WORKSPACE_LABEL: new_identity("bob-frontend")}}
KUBE_DNS = {"matchLabels": {NS: "kube-system", "k8s-app": "kube-dns"}}
GATEWAY = {"matchLabels": {NS: "cozy-sandbox-gateway", "app.kubernetes.io/name": "sandbox-gateway"}}


def cnp(name: str, spec: dict[str, Any], namespace: str = "tenant-acme") -> dict[str, Any]:
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def ccnp(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumClusterwideNetworkPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def netpol(name: str, spec: dict[str, Any], namespace: str = "tenant-acme") -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def alice(**spec: Any) -> dict[str, Any]:
    """A CNP selecting alice-api's virt-launcher pod."""
    return cnp("alice", {"endpointSelector": ALICE, **spec})


def ports(*entries: dict[str, Any], **rules: Any) -> list[dict[str, Any]]:
    return [{"ports": list(entries), **({"rules": rules} if rules else {})}]


WORLD = cnp("world", {"endpointSelector": {}, "egress": [{"toEntities": ["world"]}]})
INTERNAL = cnp(
    "internal",
    {
        "endpointSelector": {},
        "egress": [{"toEndpoints": [{}]}],
        "ingress": [{"fromEndpoints": [{}]}],
    },
)
ALL_PODS = ccnp("all-pods", {"endpointSelector": ALICE, "egress": [{"toEndpoints": [{}]}]})
MULTI = {
    "apiVersion": "cilium.io/v2",
    "kind": "CiliumNetworkPolicy",
    "metadata": {"name": "multi", "namespace": "tenant-acme"},
    "specs": [
        {"endpointSelector": BOB, "egress": [{}]},
        {"endpointSelector": ALICE, "egressDeny": [{"toEntities": ["world"]}]},
    ],
}
SEE_ALL_DNS = alice(
    egress=[
        {"toEndpoints": [KUBE_DNS], "toPorts": ports({"port": "53"}, dns=[{"matchPattern": "*"}])}
    ]
)


ALL_CLUSTERS = replace(ENV, policy_default_local_cluster=False)
NOT_GW = {"key": NS, "operator": "NotIn", "values": ["cozy-sandbox-gateway"]}
NOT_GATEWAY = [{"fromEndpoints": [{"matchExpressions": [NOT_GW]}]}]
IN_CLUSTER = [{"key": NS, "operator": "Exists"}]
NOT_SYSTEM = {"key": NS, "operator": "NotIn", "values": ["kube-system"]}
NO_NAMESPACE = {"key": NS, "operator": "DoesNotExist"}
NOT_SHELL = {"key": "app", "operator": "NotIn", "values": ["shell"]}


@dataclass(frozen=True)
class Case:
    flow: Flow
    policies: list[dict[str, Any]]
    allowed: bool
    reason: str = ""  # a fragment the reason must contain
    side: str | None = None
    enforcement: Enforcement = "cilium"
    env: Environment = field(default=ENV)


def flow(source: str, destination: str, port: int | None = 443, **kw: Any) -> Flow:
    return Flow(source, destination, port, **kw)


CASES = [
    # --- deny wins -------------------------------------------------------------------------
    pytest.param(
        Case(
            flow("alice-api", "10.0.0.5"),
            [WORLD, alice(egressDeny=[{"toCIDRSet": [{"cidr": "10.0.0.0/8"}]}])],
            DENIED,
            "CiliumNetworkPolicy tenant-acme/alice egressDeny[0] matches 10.0.0.5 (toCIDRSet 10.0.0.0/8)",
            "egress",
        ),
        id="deny-in-one-policy-beats-allow-in-another",
    ),
    pytest.param(
        Case(
            flow("alice-api", "10.0.0.5"),
            [
                ccnp(
                    "guard",
                    {"endpointSelector": ALICE, "egressDeny": [{"toCIDR": ["10.0.0.5/32"]}]},
                ),
                WORLD,
            ],
            DENIED,
            "CiliumClusterwideNetworkPolicy guard egressDeny[0]",
        ),
        id="clusterwide-deny-beats-namespaced-allow",
    ),
    pytest.param(
        Case(
            flow("alice-api", "bob-frontend", 22),
            [
                INTERNAL,
                alice(
                    egress=[{"toEndpoints": [{}]}],
                    egressDeny=[{"toEndpoints": [BOB], "toPorts": ports({"port": "22"})}],
                ),
            ],
            DENIED,
            "egressDeny[0] matches tenant-acme/bob-frontend",
        ),
        id="deny-with-ports-denies-that-port",
    ),
    pytest.param(
        Case(
            flow("alice-api", "bob-frontend", 80),
            [
                INTERNAL,
                alice(egressDeny=[{"toEndpoints": [BOB], "toPorts": ports({"port": "22"})}]),
            ],
            ALLOWED,
        ),
        id="deny-with-ports-leaves-other-ports",
    ),
    # --- CIDR rules match world only -------------------------------------------------------
    pytest.param(
        Case(
            flow("alice-api", "bob-frontend"),
            [
                INTERNAL,
                alice(
                    egressDeny=[
                        {"toCIDRSet": [{"cidr": "10.244.0.0/16"}, {"cidr": "fd00:10:244::/56"}]}
                    ]
                ),
            ],
            ALLOWED,
        ),
        id="cidr-deny-never-matches-a-pod-inside-it",
    ),
    pytest.param(
        Case(
            flow("alice-api", "bob-frontend"),
            [alice(egress=[{"toCIDR": ["0.0.0.0/0", "::/0"]}])],
            DENIED,
            "default deny at egress",
        ),
        id="cidr-allow-never-reaches-a-pod",
    ),
    pytest.param(
        Case(
            flow("alice-api", "192.168.100.12", 10250),
            [
                alice(
                    egress=[{"toEntities": ["remote-node"]}],
                    egressDeny=[{"toCIDRSet": [{"cidr": "192.168.0.0/16"}]}],
                )
            ],
            ALLOWED,
            "toEntities remote-node",
        ),
        id="cidr-deny-never-matches-a-node-inside-it",
    ),
    pytest.param(
        Case(
            flow("alice-api", "185.12.64.12", 22),
            [alice(egress=[{"toCIDR": ["0.0.0.0/0"]}])],
            DENIED,
        ),
        id="cidr-allow-never-reaches-a-node-public-ip",
    ),
    pytest.param(
        Case(
            flow("alice-api", "203.0.113.9"),
            [
                alice(
                    egress=[
                        {"toCIDRSet": [{"cidr": "203.0.113.0/24", "except": ["203.0.113.8/29"]}]}
                    ]
                )
            ],
            DENIED,
        ),
        id="cidrset-except-carves-out",
    ),
    # --- world -----------------------------------------------------------------------------
    pytest.param(
        Case(flow("alice-api", "10.0.0.5"), [WORLD], ALLOWED, "toEntities world"),
        id="world-includes-off-cluster-private-ranges",
    ),
    pytest.param(
        Case(flow("alice-api", "169.254.169.254", 80), [WORLD], ALLOWED),
        id="world-includes-the-metadata-service",
    ),
    pytest.param(
        Case(flow("alice-api", "100.64.0.3", 22), [WORLD], ALLOWED),
        id="world-includes-the-kube-ovn-join-network",
    ),
    pytest.param(
        Case(flow("alice-api", "10.244.9.9"), [WORLD], ALLOWED),
        id="world-includes-pod-cidr-addresses-without-a-pod",
    ),
    pytest.param(
        Case(flow("alice-api", "node-local-dns", 53, protocol="UDP"), [WORLD], ALLOWED),
        id="world-includes-link-local-nodelocal-dns",
    ),
    pytest.param(
        Case(flow("alice-api", "bob-frontend"), [WORLD], DENIED), id="world-excludes-pods"
    ),
    pytest.param(
        Case(flow("alice-api", "185.12.64.12"), [WORLD], DENIED),
        id="world-excludes-node-public-ips",
    ),
    pytest.param(
        Case(
            flow("alice-api", "2a04:4e42::223"),
            [alice(egress=[{"toEntities": ["world-ipv6"]}])],
            ALLOWED,
        ),
        id="world-ipv6-matches-ipv6",
    ),
    pytest.param(
        Case(
            flow("alice-api", "151.101.0.223"),
            [alice(egress=[{"toEntities": ["world-ipv6"]}])],
            DENIED,
        ),
        id="world-ipv6-skips-ipv4",
    ),
    # --- entities --------------------------------------------------------------------------
    pytest.param(
        Case(
            flow("alice-api", "192.168.100.11", 10250),
            [alice(egress=[{"toEntities": ["host"]}])],
            ALLOWED,
            "toEntities host",
        ),
        id="host-is-the-sources-own-node",
    ),
    pytest.param(
        Case(
            flow("alice-api", "2a01:4f8:0:1::11", 22),
            [alice(egress=[{"toEntities": ["host"]}])],
            ALLOWED,
        ),
        id="host-covers-every-address-of-the-node",
    ),
    pytest.param(
        Case(
            flow("alice-api", "192.168.100.12", 10250),
            [alice(egress=[{"toEntities": ["host"]}])],
            DENIED,
        ),
        id="host-is-not-another-node",
    ),
    pytest.param(
        Case(
            flow("alice-api", "192.168.100.11", 10250),
            [alice(egress=[{"toEntities": ["remote-node"]}])],
            DENIED,
        ),
        id="remote-node-is-not-the-own-node",
    ),
    pytest.param(
        Case(
            flow("alice-api", "10.96.0.1"),
            [alice(egress=[{"toEntities": ["kube-apiserver"]}])],
            ALLOWED,
            "10.96.0.1 -> 192.168.100.11:6443",
        ),
        id="kube-apiserver-entity-behind-the-kubernetes-vip",
    ),
    pytest.param(
        Case(
            flow("alice-api", "192.168.100.12", 6443),
            [
                alice(
                    egress=[{"toEntities": ["remote-node"]}],
                    egressDeny=[{"toEntities": ["kube-apiserver"]}],
                )
            ],
            DENIED,
            "(toEntities kube-apiserver)",
        ),
        id="an-apiserver-node-address-is-both-kube-apiserver-and-remote-node",
    ),
    pytest.param(
        Case(
            flow("alice-api", "192.168.100.12", 6443),
            [alice(egress=[{"toEntities": ["cluster"]}])],
            ALLOWED,
        ),
        id="cluster-includes-nodes",
    ),
    pytest.param(
        Case(
            flow("alice-api", "mallory-shell", 22),
            [alice(egress=[{"toEntities": ["cluster"]}])],
            ALLOWED,
        ),
        id="cluster-includes-pods-of-every-namespace",
    ),
    pytest.param(
        Case(flow("alice-api", "10.0.0.5"), [alice(egress=[{"toEntities": ["cluster"]}])], DENIED),
        id="cluster-excludes-world",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org"),
            [alice(egressDeny=[{"toEntities": ["all"]}], egress=[{}])],
            DENIED,
            "toEntities all",
        ),
        id="all-covers-world",
    ),
    # --- selector scoping ------------------------------------------------------------------
    pytest.param(
        Case(
            flow("alice-api", "mallory-shell", 22),
            [alice(egress=[{"toEndpoints": [{"matchLabels": {"app": "shell"}}]}])],
            DENIED,
        ),
        id="cnp-peer-selector-is-confined-to-the-policy-namespace",
    ),
    pytest.param(
        Case(
            flow("alice-api", "mallory-shell", 22),
            [
                alice(
                    egress=[{"toEndpoints": [{"matchLabels": {"app": "shell", NS: "tenant-evil"}}]}]
                )
            ],
            ALLOWED,
        ),
        id="cnp-peer-selector-naming-a-namespace-crosses-into-it",
    ),
    pytest.param(
        Case(
            flow("alice-api", "mallory-shell", 22),
            [
                alice(
                    egress=[
                        {"toEndpoints": [{"matchExpressions": [{"key": NS, "operator": "Exists"}]}]}
                    ]
                )
            ],
            ALLOWED,
        ),
        id="cnp-namespace-key-in-match-expressions-spans-namespaces",
    ),
    pytest.param(
        Case(
            flow("alice-api", "mallory-shell", 22),
            [
                ccnp(
                    "c",
                    {
                        "endpointSelector": ALICE,
                        "egress": [{"toEndpoints": [{"matchLabels": {"app": "shell"}}]}],
                    },
                )
            ],
            ALLOWED,
        ),
        id="ccnp-peer-selector-spans-namespaces",
    ),
    pytest.param(
        Case(flow("alice-api", "mallory-shell", 22), [INTERNAL], DENIED),
        id="cnp-empty-peer-is-its-own-namespace",
    ),
    pytest.param(
        Case(flow("alice-api", "mallory-shell", 22), [ALL_PODS], ALLOWED),
        id="ccnp-empty-peer-is-every-pod",
    ),
    pytest.param(
        Case(flow("alice-api", "10.0.0.5"), [ALL_PODS], DENIED), id="ccnp-empty-peer-is-not-world"
    ),
    pytest.param(
        Case(flow("alice-api", "192.168.100.11"), [ALL_PODS], DENIED),
        id="endpoint-peers-are-never-nodes",
    ),
    pytest.param(
        Case(
            flow("alice-api", "10.0.0.5"),
            [WORLD, cnp("evil", {"endpointSelector": {}, "egressDeny": [{}]}, "tenant-evil")],
            ALLOWED,
        ),
        id="cnp-selects-only-its-own-namespace",
    ),
    pytest.param(
        Case(
            flow("alice-api", "bob-frontend"),
            [
                ALL_PODS,
                ccnp(
                    "d",
                    {
                        "endpointSelector": ALICE,
                        "egressDeny": [
                            {
                                "toEndpoints": [
                                    {
                                        "matchExpressions": [
                                            {"key": "app", "operator": "NotIn", "values": ["shell"]}
                                        ]
                                    }
                                ]
                            }
                        ],
                    },
                ),
            ],
            DENIED,
            "app NotIn (shell)",
        ),
        id="notin-matches-a-pod-without-the-key",
    ),
    pytest.param(
        Case(
            flow("alice-api", "mallory-shell", 22),
            [
                ALL_PODS,
                ccnp(
                    "d",
                    {
                        "endpointSelector": ALICE,
                        "egressDeny": [
                            {
                                "toEndpoints": [
                                    {
                                        "matchExpressions": [
                                            {"key": "app", "operator": "NotIn", "values": ["shell"]}
                                        ]
                                    }
                                ]
                            }
                        ],
                    },
                ),
            ],
            ALLOWED,
        ),
        id="notin-spares-a-pod-with-a-listed-value",
    ),
    pytest.param(
        Case(
            flow("alice-api", "bob-frontend"),
            [
                ALL_PODS,
                ccnp(
                    "d",
                    {
                        "endpointSelector": ALICE,
                        "egressDeny": [
                            {
                                "toEndpoints": [
                                    {
                                        "matchExpressions": [
                                            {"key": "app", "operator": "DoesNotExist"}
                                        ]
                                    }
                                ]
                            }
                        ],
                    },
                ),
            ],
            DENIED,
        ),
        id="doesnotexist-matches-a-pod-without-the-key",
    ),
    pytest.param(
        Case(
            flow("alice-api", "platform-db", 5432),
            [
                ccnp(
                    "sys",
                    {
                        "endpointSelector": ALICE,
                        "egress": [
                            {
                                "toEndpoints": [
                                    {
                                        "matchLabels": {
                                            "k8s:io.cilium.k8s.namespace.labels.cozystack.io/system": "true"
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                )
            ],
            ALLOWED,
        ),
        id="namespace-label-selector-in-a-ccnp",
    ),
    pytest.param(
        Case(
            flow("alice-api", "mallory-shell", 5432),
            [
                ccnp(
                    "sys",
                    {
                        "endpointSelector": ALICE,
                        "egress": [
                            {
                                "toEndpoints": [
                                    {
                                        "matchLabels": {
                                            "k8s:io.cilium.k8s.namespace.labels.cozystack.io/system": "true"
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                )
            ],
            DENIED,
        ),
        id="namespace-label-selector-skips-unlabelled-namespaces",
    ),
    pytest.param(
        Case(
            flow("alice-api", "platform-db", 5432),
            [
                alice(
                    egress=[
                        {
                            "toEndpoints": [
                                {
                                    "matchLabels": {
                                        "io.cilium.k8s.namespace.labels.cozystack.io/system": "true"
                                    }
                                }
                            ]
                        }
                    ]
                )
            ],
            DENIED,
        ),
        id="namespace-label-selector-in-a-cnp-stays-in-its-namespace",
    ),
    # --- default deny ----------------------------------------------------------------------
    pytest.param(
        Case(
            flow("alice-api", "pypi.org"),
            [alice(egressDeny=[{"toCIDR": ["10.0.0.0/8"]}])],
            DENIED,
            "default deny at egress of tenant-acme/alice-api (selected by CiliumNetworkPolicy tenant-acme/alice)",
        ),
        id="a-deny-only-policy-switches-default-deny-on",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org"),
            [alice(egressDeny=[{"toCIDR": ["10.0.0.0/8"]}], enableDefaultDeny={"egress": False})],
            ALLOWED,
            "no policy puts tenant-acme/alice-api in default deny at egress",
        ),
        id="enable-default-deny-false-keeps-it-off",
    ),
    pytest.param(
        Case(
            flow("alice-api", "10.0.0.5"),
            [alice(egressDeny=[{"toCIDR": ["10.0.0.0/8"]}], enableDefaultDeny={"egress": False})],
            DENIED,
        ),
        id="enable-default-deny-false-still-denies",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org"),
            [
                alice(egress=[{"toEntities": ["world"]}], enableDefaultDeny={"egress": False}),
                INTERNAL,
            ],
            ALLOWED,
            "CiliumNetworkPolicy tenant-acme/alice egress[0] (toEntities world)",
        ),
        id="rules-of-a-non-default-deny-policy-still-allow",
    ),
    pytest.param(
        Case(
            flow("alice-api", "10.0.0.5"),
            [alice(ingress=[{"fromEndpoints": [GATEWAY]}])],
            ALLOWED,
            "no policy selects tenant-acme/alice-api at egress",
        ),
        id="ingress-rules-leave-egress-open",
    ),
    pytest.param(
        Case(
            flow("alice-api", "10.0.0.5"),
            [],
            ALLOWED,
            "no policy selects tenant-acme/alice-api at egress",
        ),
        id="no-policy-allows",
    ),
    # --- rule shapes -----------------------------------------------------------------------
    pytest.param(
        Case(flow("alice-api", "10.0.0.5"), [alice(egress=[{}])], ALLOWED, "(any peer)"),
        id="empty-rule-allows-everything",
    ),
    pytest.param(
        Case(flow("alice-api", "bob-frontend"), [alice(egress=[{"toEndpoints": []}])], DENIED),
        id="empty-peer-list-selects-nothing",
    ),
    pytest.param(
        Case(flow("alice-api", "10.0.0.5"), [alice(egress=[{"toEntities": []}])], DENIED),
        id="empty-entity-list-selects-nothing",
    ),
    pytest.param(
        Case(
            flow("alice-api", "platform-db", 6443),
            [alice(egress=[{"toPorts": ports({"port": "6443", "protocol": "TCP"})}])],
            ALLOWED,
        ),
        id="ports-only-rule-opens-the-port-to-every-peer",
    ),
    pytest.param(
        Case(
            flow("alice-api", "platform-db", 5432),
            [alice(egress=[{"toPorts": ports({"port": "6443", "protocol": "TCP"})}])],
            DENIED,
        ),
        id="ports-only-rule-opens-nothing-else",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", 1500),
            [
                alice(
                    egress=[
                        {
                            "toEntities": ["world"],
                            "toPorts": ports({"port": "1000", "endPort": 2000, "protocol": "TCP"}),
                        }
                    ]
                )
            ],
            ALLOWED,
        ),
        id="end-port-makes-a-range",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", 2001),
            [
                alice(
                    egress=[
                        {
                            "toEntities": ["world"],
                            "toPorts": ports({"port": "1000", "endPort": 2000, "protocol": "TCP"}),
                        }
                    ]
                )
            ],
            DENIED,
        ),
        id="end-port-is-the-last-port",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", 53, protocol="UDP"),
            [
                alice(
                    egress=[
                        {
                            "toEntities": ["world"],
                            "toPorts": ports({"port": "53", "protocol": "ANY"}),
                        }
                    ]
                )
            ],
            ALLOWED,
        ),
        id="protocol-any-matches-udp",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", 53, protocol="SCTP"),
            [alice(egress=[{"toEntities": ["world"], "toPorts": ports({"port": "53"})}])],
            ALLOWED,
        ),
        id="missing-protocol-is-any",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", 53, protocol="UDP"),
            [
                alice(
                    egress=[
                        {
                            "toEntities": ["world"],
                            "toPorts": ports({"port": "53", "protocol": "TCP"}),
                        }
                    ]
                )
            ],
            DENIED,
        ),
        id="tcp-rule-skips-udp",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", None, protocol="ICMP"),
            [
                alice(
                    egress=[
                        {
                            "toEntities": ["world"],
                            "toPorts": ports({"port": "0", "protocol": "ANY"}),
                        }
                    ]
                )
            ],
            DENIED,
        ),
        id="port-rules-never-match-icmp",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", None, protocol="ICMP"),
            [alice(egress=[{"toEntities": ["world"]}])],
            ALLOWED,
        ),
        id="a-rule-without-ports-matches-icmp",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", None, protocol="ICMP", icmp_type=8),
            [alice(egress=[{"toEntities": ["world"], "icmps": [{"fields": [{"type": 8}]}]}])],
            ALLOWED,
        ),
        id="icmps-rule-matches-its-icmp-type",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", None, protocol="ICMP", icmp_type=13),
            [alice(egress=[{"toEntities": ["world"], "icmps": [{"fields": [{"type": 8}]}]}])],
            DENIED,
        ),
        id="icmps-rule-skips-other-icmp-types",
    ),
    pytest.param(
        Case(
            flow("alice-api", "2a04:4e42::223", None, protocol="ICMP", icmp_type=8),
            [alice(egress=[{"toEntities": ["world"], "icmps": [{"fields": [{"type": 8}]}]}])],
            DENIED,
        ),
        id="icmps-family-defaults-to-ipv4",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", None, protocol="ICMP"),
            [alice(egress=[{"toEntities": ["world"], "icmps": [{"fields": [{"type": 8}]}]}])],
            DENIED,
        ),
        id="an-icmp-flow-without-type-is-one-no-rule-names",
    ),
    pytest.param(
        Case(
            flow("alice-api", "151.101.0.223", None, protocol="ICMP"),
            [
                WORLD,
                alice(
                    egressDeny=[
                        {
                            "toEntities": ["world"],
                            "icmps": [
                                {"fields": [{"type": t} for t in range(i, min(i + 40, 256))]}
                                for i in range(0, 256, 40)
                            ],
                        }
                    ]
                ),
            ],
            DENIED,
            "egressDeny[0]",
        ),
        id="a-deny-of-every-icmp-type-denies-any-type",
    ),
    pytest.param(
        Case(
            flow("alice-api", "151.101.0.223", None, protocol="ICMP"),
            [
                WORLD,
                alice(
                    egressDeny=[
                        {
                            "toEntities": ["world"],
                            "icmps": [
                                {"fields": [{"type": t, "family": "IPv6"} for t in range(40)]}
                                for _ in range(7)
                            ],
                        }
                    ]
                ),
            ],
            ALLOWED,
        ),
        id="an-icmp-deny-of-the-other-family-does-not-deny",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", 3478, protocol="SCTP"),
            [
                WORLD,
                alice(egressDeny=[{"toEntities": ["world"], "toPorts": ports({"port": "3478"})}]),
            ],
            DENIED,
        ),
        id="a-port-without-protocol-is-any-transport-sctp-too",
    ),
    pytest.param(
        Case(
            flow("alice-api", "10.0.0.5"),
            [MULTI, WORLD],
            DENIED,
            "CiliumNetworkPolicy tenant-acme/multi specs[1].egressDeny[0]",
        ),
        id="each-of-specs-selects-on-its-own",
    ),
    # --- Cilium's policy-default-local-cluster ------------------------------------------------
    pytest.param(
        Case(flow("192.168.100.11", "alice-api", 49983), [alice(ingressDeny=NOT_GATEWAY)], ALLOWED),
        id="notin-on-the-namespace-selects-pods-only-with-the-local-cluster-default",
    ),
    pytest.param(
        Case(
            flow("192.168.100.11", "alice-api", 49983),
            [alice(ingressDeny=NOT_GATEWAY)],
            DENIED,
            "ingressDeny[0] matches 192.168.100.11 (node node-1) (fromEndpoints "
            "{io.kubernetes.pod.namespace NotIn (cozy-sandbox-gateway)})",
            env=ALL_CLUSTERS,
        ),
        id="notin-on-the-namespace-selects-the-node-without-the-local-cluster-default",
    ),
    pytest.param(
        Case(
            flow("192.168.100.11", "alice-api", 49983),
            [alice(ingressDeny=[{"fromEndpoints": [{"matchExpressions": [*IN_CLUSTER, NOT_GW]}]}])],
            ALLOWED,
            env=ALL_CLUSTERS,
        ),
        id="exists-beside-notin-keeps-the-node-out-without-the-local-cluster-default",
    ),
    pytest.param(
        Case(
            flow("alice-api", "151.101.0.223"),
            [WORLD, alice(egressDeny=[{"toEndpoints": [{"matchExpressions": [NOT_SYSTEM]}]}])],
            DENIED,
            env=ALL_CLUSTERS,
        ),
        id="notin-on-the-namespace-selects-world-without-the-local-cluster-default",
    ),
    pytest.param(
        Case(
            flow("alice-api", "151.101.0.223"),
            [WORLD, alice(egressDeny=[{"toEndpoints": [{"matchExpressions": [NOT_SYSTEM]}]}])],
            ALLOWED,
        ),
        id="notin-on-the-namespace-leaves-world-alone-with-the-local-cluster-default",
    ),
    pytest.param(
        Case(
            flow("alice-api", "192.168.100.12", 22),
            [
                cnp("all", {"endpointSelector": {}, "egress": [{}]}),
                ccnp(
                    "guard",
                    {
                        "endpointSelector": ALICE,
                        "egressDeny": [{"toEndpoints": [{"matchExpressions": [NO_NAMESPACE]}]}],
                    },
                ),
            ],
            DENIED,
            env=ALL_CLUSTERS,
        ),
        id="doesnotexist-selects-a-remote-node-without-the-local-cluster-default",
    ),
    pytest.param(
        Case(
            flow("alice-api", "151.101.0.223"),
            [WORLD, alice(egressDeny=[{"toEndpoints": [{"matchExpressions": [NOT_SHELL]}]}])],
            ALLOWED,
            env=ALL_CLUSTERS,
        ),
        id="a-namespaced-selector-without-the-namespace-key-never-selects-world",
    ),
    pytest.param(
        Case(
            flow("alice-api", "151.101.0.223"),
            [
                WORLD,
                ccnp(
                    "guard",
                    {
                        "endpointSelector": ALICE,
                        "egressDeny": [{"toEndpoints": [{"matchExpressions": [NOT_SHELL]}]}],
                    },
                ),
            ],
            DENIED,
            env=ALL_CLUSTERS,
        ),
        id="a-clusterwide-notin-selects-world-without-the-local-cluster-default",
    ),
    # --- services and names ----------------------------------------------------------------
    pytest.param(
        Case(
            flow("alice-api", "10.96.100.22", 8080),
            [
                cnp(
                    "bob",
                    {
                        "endpointSelector": BOB,
                        "ingress": [{"fromEndpoints": [ALICE], "toPorts": ports({"port": "8080"})}],
                    },
                ),
                INTERNAL,
            ],
            ALLOWED,
            "[10.96.100.22 -> 10.244.1.22:8080]",
        ),
        id="a-vip-is-translated-to-its-backend-before-policy",
    ),
    pytest.param(
        Case(
            flow("alice-api", "10.96.0.1"),
            [alice(egress=[{"toEntities": ["world"], "toPorts": ports({"port": "443"})}])],
            DENIED,
            "192.168.100.11:6443",
        ),
        id="policy-sees-the-backend-port-not-the-service-port",
    ),
    pytest.param(
        Case(
            flow("alice-api", "10.96.100.99", 80),
            [],
            DENIED,
            "Service tenant-acme/orphan (10.96.100.99) has no backends",
            "service",
        ),
        id="a-vip-without-backends-drops",
    ),
    pytest.param(
        Case(
            flow("alice-api", "rebind.example.net"),
            [WORLD, alice(egressDeny=[{"toCIDR": ["169.254.0.0/16"]}])],
            ALLOWED,
            "[rebind.example.net resolves to 10.0.0.5]",
        ),
        id="a-name-is-allowed-if-any-address-is",
    ),
    pytest.param(
        Case(
            flow("alice-api", "rebind.example.net"),
            [WORLD, alice(egressDeny=[{"toCIDR": ["169.254.0.0/16", "10.0.0.0/8"]}])],
            DENIED,
        ),
        id="a-name-is-denied-if-every-address-is",
    ),
    # --- the ingress side ------------------------------------------------------------------
    pytest.param(
        Case(
            flow("alice-api", "bob-frontend", 22),
            [
                INTERNAL,
                cnp("bob", {"endpointSelector": BOB, "ingressDeny": [{"fromEndpoints": [ALICE]}]}),
            ],
            DENIED,
            "CiliumNetworkPolicy tenant-acme/bob ingressDeny[0] matches tenant-acme/alice-api",
            "ingress",
        ),
        id="the-destinations-ingress-deny-decides",
    ),
    pytest.param(
        Case(
            flow("alice-api", "bob-frontend", 22),
            [
                WORLD,
                alice(egress=[{"toEndpoints": [BOB]}]),
                cnp("bob", {"endpointSelector": BOB, "ingress": [{"fromEndpoints": [GATEWAY]}]}),
            ],
            DENIED,
            "default deny at ingress of tenant-acme/bob-frontend",
            "ingress",
        ),
        id="the-destinations-default-deny-decides",
    ),
    pytest.param(
        Case(
            flow("sandbox-gateway", "bob-frontend", 22),
            [cnp("bob", {"endpointSelector": BOB, "ingress": [{"fromEndpoints": [GATEWAY]}]})],
            ALLOWED,
            "ingress[0] (fromEndpoints",
        ),
        id="an-allowed-source-passes-ingress",
    ),
    pytest.param(
        Case(
            flow("gateway-debug", "bob-frontend", 22),
            [cnp("bob", {"endpointSelector": BOB, "ingress": [{"fromEndpoints": [GATEWAY]}]})],
            DENIED,
        ),
        id="a-pod-lacking-the-label-does-not",
    ),
    pytest.param(
        Case(
            flow("192.168.100.12", "bob-frontend", 8080),
            [cnp("bob", {"endpointSelector": BOB, "ingress": [{"fromEndpoints": [GATEWAY]}]})],
            ALLOWED,
            "from its own node is always allowed",
        ),
        id="ingress-from-the-own-node-is-always-allowed",
    ),
    pytest.param(
        Case(
            flow("192.168.100.11", "bob-frontend", 8080),
            [cnp("bob", {"endpointSelector": BOB, "ingress": [{"fromEndpoints": [GATEWAY]}]})],
            DENIED,
        ),
        id="ingress-from-another-node-is-not",
    ),
    pytest.param(
        Case(
            flow("192.168.100.12", "bob-frontend", 8080),
            [cnp("bob", {"endpointSelector": BOB, "ingressDeny": [{"fromEntities": ["host"]}]})],
            DENIED,
        ),
        id="a-deny-still-beats-the-own-node",
    ),
    pytest.param(
        Case(
            flow("world", "alice-api", 22),
            [alice(ingress=[{"fromEntities": ["world"]}])],
            ALLOWED,
            "fromEntities world",
            "ingress",
        ),
        id="a-world-source-has-no-egress-side",
    ),
    pytest.param(
        Case(
            flow("8.8.8.8", "alice-api", 22),
            [alice(ingress=[{"fromCIDR": ["8.8.8.0/24"]}])],
            ALLOWED,
            "fromCIDR 8.8.8.0/24",
        ),
        id="from-cidr-matches-a-world-source",
    ),
    pytest.param(
        Case(
            flow("bob-frontend", "alice-api", 22),
            [alice(ingress=[{"fromCIDR": ["10.244.0.0/16"]}])],
            DENIED,
        ),
        id="from-cidr-never-matches-a-pod-source",
    ),
    pytest.param(
        Case(
            flow("node-local-dns", "bob-frontend", 22),
            [cnp("bob", {"endpointSelector": BOB, "ingress": [{"fromEntities": ["remote-node"]}]})],
            ALLOWED,
        ),
        id="a-host-network-pod-sends-as-its-node",
    ),
    # --- FQDN and DNS ----------------------------------------------------------------------
    pytest.param(
        Case(
            flow("alice-api", "pypi.org"),
            [alice(egress=[{"toFQDNs": [{"matchName": "pypi.org"}]}])],
            DENIED,
        ),
        id="to-fqdns-needs-a-lookup-the-proxy-sees",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org"),
            [
                alice(
                    egress=[
                        {"toFQDNs": [{"matchName": "pypi.org"}]},
                        {
                            "toEndpoints": [KUBE_DNS],
                            "toPorts": ports(
                                {"port": "53", "protocol": "UDP"}, dns=[{"matchName": "pypi.org"}]
                            ),
                        },
                    ]
                )
            ],
            ALLOWED,
            "toFQDNs matchName pypi.org; pypi.org resolves to it and its lookup is seen by CiliumNetworkPolicy tenant-acme/alice egress[1]",
        ),
        id="to-fqdns-with-a-seen-lookup",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org"),
            [
                alice(
                    egress=[
                        {"toFQDNs": [{"matchName": "pypi.org"}]},
                        {"toEndpoints": [KUBE_DNS], "toPorts": ports({"port": "53"})},
                    ]
                )
            ],
            DENIED,
        ),
        id="to-fqdns-needs-dns-rules-not-just-a-dns-allow",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org"),
            [SEE_ALL_DNS, alice(egress=[{"toFQDNs": [{"matchPattern": "*.pypi.org"}]}])],
            DENIED,
        ),
        id="star-dot-does-not-match-the-bare-domain",
    ),
    pytest.param(
        Case(
            flow("alice-api", "upload.pypi.org"),
            [SEE_ALL_DNS, alice(egress=[{"toFQDNs": [{"matchPattern": "*.pypi.org"}]}])],
            ALLOWED,
        ),
        id="star-dot-matches-one-label",
    ),
    pytest.param(
        Case(
            flow("alice-api", "a.upload.pypi.org"),
            [SEE_ALL_DNS, alice(egress=[{"toFQDNs": [{"matchPattern": "*.pypi.org"}]}])],
            DENIED,
            env=replace(ENV, dns={**ENV.dns, "a.upload.pypi.org": ("151.101.200.1",)}),
        ),
        id="star-dot-does-not-match-two-labels",
    ),
    pytest.param(
        Case(
            flow("alice-api", "a.upload.pypi.org"),
            [SEE_ALL_DNS, alice(egress=[{"toFQDNs": [{"matchPattern": "**.pypi.org"}]}])],
            ALLOWED,
            env=replace(ENV, dns={**ENV.dns, "a.upload.pypi.org": ("151.101.200.1",)}),
        ),
        id="double-star-matches-many-labels",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org"),
            [SEE_ALL_DNS, alice(egress=[{"toFQDNs": [{"matchPattern": "**.pypi.org"}]}])],
            DENIED,
        ),
        id="double-star-does-not-match-the-bare-domain",
    ),
    pytest.param(
        Case(
            flow("alice-api", "files.pythonhosted.org"),
            [SEE_ALL_DNS, alice(egress=[{"toFQDNs": [{"matchPattern": "files.*.org"}]}])],
            ALLOWED,
        ),
        id="star-inside-a-label",
    ),
    pytest.param(
        Case(
            flow("alice-api", "sneaky.example"),
            [SEE_ALL_DNS, alice(egress=[{"toFQDNs": [{"matchPattern": "*"}]}])],
            DENIED,
            env=replace(ENV, dns={**ENV.dns, "sneaky.example": ("10.244.1.22",)}),
        ),
        id="to-fqdns-never-matches-a-pod-address",
    ),
    pytest.param(
        Case(
            flow("alice-api", "rebind.example.net", 80),
            [SEE_ALL_DNS, alice(egress=[{"toFQDNs": [{"matchPattern": "*.example.net"}]}])],
            ALLOWED,
        ),
        id="to-fqdns-follows-a-name-into-private-space",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", dns_resolver="10.96.0.10"),
            [
                SEE_ALL_DNS,
                alice(
                    egress=[{"toFQDNs": [{"matchName": "pypi.org"}]}],
                    egressDeny=[{"toEndpoints": [KUBE_DNS]}],
                ),
            ],
            DENIED,
        ),
        id="to-fqdns-needs-the-lookup-to-the-resolver-allowed",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", dns_resolver="10.96.0.10"),
            [SEE_ALL_DNS, alice(egress=[{"toFQDNs": [{"matchName": "pypi.org"}]}])],
            ALLOWED,
            "its lookup to 10.96.0.10 is seen by",
        ),
        id="to-fqdns-with-the-lookup-to-the-resolver-allowed",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org", dns_resolver="1.1.1.1"),
            [SEE_ALL_DNS, alice(egress=[{"toFQDNs": [{"matchName": "pypi.org"}]}])],
            DENIED,
        ),
        id="to-fqdns-needs-the-dns-rule-towards-that-resolver",
    ),
    pytest.param(
        Case(
            flow(
                "alice-api",
                "kube-dns.kube-system.svc.cluster.local",
                53,
                protocol="UDP",
                dns_name="pypi.org",
            ),
            [
                alice(
                    egress=[
                        {
                            "toEndpoints": [KUBE_DNS],
                            "toPorts": ports(
                                {"port": "53", "protocol": "UDP"}, dns=[{"matchName": "pypi.org"}]
                            ),
                        }
                    ]
                )
            ],
            ALLOWED,
        ),
        id="dns-rules-let-listed-names-through",
    ),
    pytest.param(
        Case(
            flow("alice-api", "10.96.0.10", 53, protocol="UDP", dns_name="exfil.attacker.example"),
            [
                alice(
                    egress=[
                        {
                            "toEndpoints": [KUBE_DNS],
                            "toPorts": ports(
                                {"port": "53", "protocol": "UDP"}, dns=[{"matchName": "pypi.org"}]
                            ),
                        }
                    ]
                )
            ],
            DENIED,
            "the DNS proxy refuses exfil.attacker.example (CiliumNetworkPolicy tenant-acme/alice egress[0])",
        ),
        id="dns-rules-refuse-other-names",
    ),
    # --- Kubernetes NetworkPolicy ----------------------------------------------------------
    pytest.param(
        Case(
            flow("alice-api", "10.0.0.5"),
            [
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [
                            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]}
                        ],
                    },
                )
            ],
            DENIED,
        ),
        id="ip-block-except-carves-out",
    ),
    pytest.param(
        Case(
            flow("alice-api", "151.101.0.223"),
            [
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [
                            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]}
                        ],
                    },
                )
            ],
            ALLOWED,
            "to[0] ipBlock 0.0.0.0/0",
        ),
        id="ip-block-allows-the-rest",
    ),
    pytest.param(
        Case(
            flow("alice-api", "192.168.100.12", 10250),
            [
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}],
                    },
                )
            ],
            DENIED,
        ),
        id="ip-block-never-matches-a-node-under-cilium",
    ),
    pytest.param(
        Case(
            flow("alice-api", "192.168.100.12", 10250),
            [
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}],
                    },
                )
            ],
            ALLOWED,
            enforcement="kubernetes",
        ),
        id="ip-block-matches-a-node-on-a-plain-cni",
    ),
    pytest.param(
        Case(
            flow("alice-api", "bob-frontend"),
            [
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}],
                    },
                )
            ],
            DENIED,
            enforcement="kubernetes",
        ),
        id="ip-block-never-matches-a-pod",
    ),
    pytest.param(
        Case(
            flow("alice-api", "mallory-shell", 22),
            [
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [{"to": [{"podSelector": {}}]}],
                    },
                )
            ],
            DENIED,
        ),
        id="pod-selector-alone-is-the-policy-namespace",
    ),
    pytest.param(
        Case(
            flow("alice-api", "mallory-shell", 22),
            [
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [{"to": [{"namespaceSelector": {}}]}],
                    },
                )
            ],
            ALLOWED,
        ),
        id="empty-namespace-selector-is-every-namespace",
    ),
    pytest.param(
        Case(
            flow("alice-api", "coredns-1", 53, protocol="UDP"),
            [
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [
                            {
                                "to": [
                                    {
                                        "namespaceSelector": {
                                            "matchLabels": {
                                                "kubernetes.io/metadata.name": "kube-system"
                                            }
                                        },
                                        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                                    }
                                ],
                                "ports": [{"port": 53, "protocol": "UDP"}],
                            }
                        ],
                    },
                )
            ],
            ALLOWED,
        ),
        id="namespace-and-pod-selector-together",
    ),
    pytest.param(
        Case(
            flow("alice-api", "coredns-1", 53),
            [
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [
                            {
                                "to": [{"namespaceSelector": {}}],
                                "ports": [{"port": 53, "protocol": "UDP"}],
                            }
                        ],
                    },
                )
            ],
            DENIED,
        ),
        id="network-policy-ports-name-the-protocol",
    ),
    pytest.param(
        Case(
            flow("alice-api", "coredns-1", 53),
            [
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [{"to": [{"namespaceSelector": {}}], "ports": [{"port": 53}]}],
                    },
                )
            ],
            ALLOWED,
        ),
        id="network-policy-protocol-defaults-to-tcp",
    ),
    pytest.param(
        Case(
            flow("alice-api", "coredns-1", 53, protocol="UDP"),
            [
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [{"to": [{"namespaceSelector": {}}], "ports": [{"port": 53}]}],
                    },
                )
            ],
            DENIED,
        ),
        id="network-policy-protocol-default-is-not-udp",
    ),
    pytest.param(
        Case(
            flow("alice-api", "coredns-1", None, protocol="ICMP"),
            [
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [
                            {"to": [{"namespaceSelector": {}}], "ports": [{"protocol": "TCP"}]}
                        ],
                    },
                )
            ],
            DENIED,
        ),
        id="network-policy-ports-never-match-icmp",
    ),
    pytest.param(
        Case(
            flow("alice-api", "coredns-1", 12000),
            [
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [{"ports": [{"port": 10000, "endPort": 20000}]}],
                    },
                )
            ],
            ALLOWED,
            "every destination",
        ),
        id="network-policy-end-port-and-empty-to",
    ),
    pytest.param(
        Case(
            flow("mallory-shell", "bob-frontend", 22),
            [
                netpol(
                    "np",
                    {
                        "podSelector": BOB,
                        "ingress": [
                            {
                                "from": [
                                    {
                                        "namespaceSelector": {
                                            "matchLabels": {"tenant.cozystack.io/tenant-acme": ""}
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                )
            ],
            DENIED,
            "default deny at ingress of tenant-acme/bob-frontend",
        ),
        id="network-policy-namespace-labels-decide",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org"),
            [netpol("np", {"podSelector": ALICE, "policyTypes": ["Ingress"]})],
            ALLOWED,
        ),
        id="policy-types-ingress-leaves-egress-open",
    ),
    pytest.param(
        Case(
            flow("alice-api", "pypi.org"),
            [netpol("np", {"podSelector": ALICE, "egress": [{"to": [{"podSelector": {}}]}]})],
            DENIED,
        ),
        id="egress-rules-imply-policy-type-egress",
    ),
    pytest.param(
        Case(
            flow("bob-frontend", "alice-api", 22),
            [netpol("np", {"podSelector": ALICE})],
            DENIED,
            "default deny at ingress",
        ),
        id="a-bare-network-policy-denies-ingress",
    ),
    pytest.param(
        Case(
            flow("alice-api", "10.0.0.5"),
            [
                WORLD,
                alice(egressDeny=[{"toEntities": ["all"]}]),
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}],
                    },
                ),
            ],
            ALLOWED,
            "NetworkPolicy tenant-acme/np egress[0]",
            enforcement="kubernetes",
        ),
        id="a-plain-cni-ignores-cilium-policies",
    ),
    pytest.param(
        Case(
            flow("alice-api", "10.0.0.5"),
            [
                alice(egressDeny=[{"toCIDR": ["10.0.0.0/8"]}]),
                netpol(
                    "np",
                    {
                        "podSelector": ALICE,
                        "policyTypes": ["Egress"],
                        "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}],
                    },
                ),
            ],
            DENIED,
        ),
        id="cilium-denies-beat-network-policy-allows",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_verdict(case: Case) -> None:
    verdict = evaluate(case.flow, case.policies, case.env, enforcement=case.enforcement)
    assert verdict.allowed is case.allowed, verdict.reason
    assert verdict.reason.startswith("allowed: " if case.allowed else "denied: ")
    assert case.reason in verdict.reason
    if case.side is not None:
        assert verdict.side == case.side


def test_a_verdict_names_the_deciding_rule() -> None:
    policies = [
        WORLD,
        alice(egressDeny=[{"toEntities": ["host"]}, {"toCIDRSet": [{"cidr": "10.0.0.0/8"}]}]),
    ]
    verdict = evaluate(flow("alice-api", "10.1.2.3"), policies, ENV)
    assert verdict == Verdict(
        allowed=False,
        reason="denied: CiliumNetworkPolicy tenant-acme/alice egressDeny[1] matches 10.1.2.3 (toCIDRSet 10.0.0.0/8)",
        policy="CiliumNetworkPolicy tenant-acme/alice",
        rule="egressDeny[1]",
        side="egress",
    )


def test_format_verdict_is_one_line() -> None:
    f = flow("alice-api", "10.96.0.10", 53, protocol="UDP", dns_name="pypi.org")
    line = format_verdict(f, evaluate(f, [], ENV))
    assert line == (
        "alice-api -> 10.96.0.10:53/UDP (DNS query for pypi.org): allowed: no policy selects "
        "tenant-acme/alice-api at egress; no policy selects kube-system/coredns-1 at ingress "
        "[10.96.0.10 -> 10.244.0.10:53]"
    )


def test_a_policy_without_namespace_takes_the_given_one() -> None:
    policy = alice(egressDeny=[{"toEntities": ["world"]}])
    del policy["metadata"]["namespace"]
    assert not evaluate(
        flow("alice-api", "pypi.org"), [policy], ENV, namespace="tenant-acme"
    ).allowed
    with pytest.raises(ValueError, match=r"has no metadata\.namespace"):
        evaluate(flow("alice-api", "pypi.org"), [policy], ENV)


def test_non_policy_manifests_are_ignored() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}}
    assert evaluate(flow("alice-api", "pypi.org"), [service], ENV).allowed


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        pytest.param(
            {"toServices": [{"k8sService": {"serviceName": "x"}}]}, "toServices", id="to-services"
        ),
        pytest.param(
            {"toEntities": ["world"], "toPorts": ports({"port": "https"})},
            "named port 'https'",
            id="named-port",
        ),
        pytest.param({"toCIDRSet": [{"cidrGroupRef": "office"}]}, "CIDR groups", id="cidr-groups"),
        pytest.param({"toEntities": ["everywhere"]}, "entity 'everywhere'", id="unknown-entity"),
    ],
)
def test_unmodelled_features_are_refused_not_guessed(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(NotModelledError, match=message):
        evaluate(flow("alice-api", "pypi.org"), [alice(egress=[rule])], ENV)


def test_unknown_names_are_errors_not_verdicts() -> None:
    with pytest.raises(LookupError):
        evaluate(flow("alice-api", "no-such-pod"), [], ENV)
    with pytest.raises(LookupError):
        evaluate(flow("alice-api", "pypi.invalid"), [], ENV)


def test_a_service_without_selector_uses_its_endpoints() -> None:
    external = Service("db", "tenant-acme", ("10.96.7.7",), None, ("203.0.113.50",), {5432: 15432})
    env = replace(ENV, services=(*ENV.services, external))
    policies = [
        alice(egress=[{"toCIDR": ["203.0.113.50/32"], "toPorts": ports({"port": "15432"})}])
    ]
    verdict = evaluate(flow("alice-api", "10.96.7.7", 5432), policies, env)
    assert verdict.allowed
    assert verdict.reason.endswith("[10.96.7.7 -> 203.0.113.50:15432]")


def test_icmp_type_names_are_refused_not_guessed() -> None:
    rule = {"toEntities": ["world"], "icmps": [{"fields": [{"type": "EchoRequest"}]}]}
    icmp = flow("alice-api", "151.101.0.223", None, protocol="ICMP", icmp_type=8)
    with pytest.raises(NotModelledError, match="ICMP type name 'EchoRequest'"):
        evaluate(icmp, [alice(egress=[rule])], ENV)
