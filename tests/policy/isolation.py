"""The ground every isolation test stands on: Alice's and Bob's sandboxes on the Cozystack
model, and the truth table of flows with the verdict docs/security.md demands of each (its
Invariants and Network isolation).
"""

from dataclasses import replace
from typing import Any

import pytest

from function.compose.guard import guard_policy
from function.model.platform import SandboxPlatform
from function.policy import (
    Flow,
    cozystack_baseline,
    cozystack_environment,
)
from function.render import render
from tests.strategies import KEYS
from tests.support import NOW, PLATFORM, workspace

ENV = cozystack_environment()
# Cilium's policy-default-local-cluster: on (Helm's default from 1.19) and off (before).
ENVS = {
    "local-cluster-default": ENV,
    "no-local-cluster-default": replace(ENV, policy_default_local_cluster=False),
}
NS = "tenant-acme"
ALICE = {
    "ports": [{"name": "preview", "port": 3000}],
    "ssh": {"authorizedKeys": [KEYS[0]]},
}
# A pod takes no SSH keys (render refuses them there), so nothing opens port 22 on a pod.
ALICE_POD = {k: v for k, v in ALICE.items() if k != "ssh"}
Policies = list[dict[str, Any]]


def rendered(spec: dict[str, Any], name: str, p: SandboxPlatform = PLATFORM) -> Policies:
    out = render(workspace(spec, name), p, {}, NOW).resources
    return [
        {**m, "metadata": {**m["metadata"], "namespace": NS}}
        for m in out.values()
        if m["kind"] in ("CiliumNetworkPolicy", "NetworkPolicy")
    ]


def world(
    spec: dict[str, Any] | None = None,
    *,
    baseline: bool,
    p: SandboxPlatform = PLATFORM,
    alice: dict[str, Any] = ALICE,
) -> Policies:
    """Alice's and Bob's sandboxes, the guard, and (on Cozystack) the tenant baseline."""
    policies = rendered(alice | (spec or {}), "alice-api", p) + rendered({}, "bob-frontend", p)
    policies.append(guard_policy(p))
    if baseline:
        policies += cozystack_baseline(NS) + cozystack_baseline("tenant-evil")
    return policies


def out(dest: str, port: int | None = 443, protocol: str = "TCP") -> Flow:
    return Flow("alice-api", dest, port, protocol)  # type: ignore[arg-type]


def into(
    source: str, port: int | None = 49983, protocol: str = "TCP", icmp_type: int | None = None
) -> Flow:
    return Flow(source, "alice-api", port, protocol, icmp_type=icmp_type)  # type: ignore[arg-type]


PUBLIC = [
    pytest.param(out("151.101.0.223"), True, id="public-v4"),
    pytest.param(out("2a04:4e42::223"), True, id="public-v6"),
    pytest.param(out("pypi.org"), True, id="public-name"),
    pytest.param(out("140.82.121.4", 22), True, id="github-ssh"),
    pytest.param(out("9.9.9.9", 53, "UDP"), True, id="platform-resolver"),
    pytest.param(out("1.1.1.1", 53, "UDP"), True, id="other-public-resolver"),
    pytest.param(out("2606:4700::6810:122"), True, id="public-v6-registry"),
    pytest.param(out("100.63.255.255"), True, id="just-below-cgnat"),
    pytest.param(out("100.128.0.0"), True, id="just-above-cgnat"),
    pytest.param(out("172.32.0.1"), True, id="just-above-172-16"),
    pytest.param(out("172.15.255.255"), True, id="just-below-172-16"),
    pytest.param(out("192.169.0.1"), True, id="just-above-192-168"),
    pytest.param(out("11.0.0.1"), True, id="just-above-10"),
    pytest.param(out("169.255.0.1"), True, id="just-above-link-local"),
    pytest.param(out("223.255.255.254"), True, id="just-below-multicast"),
    pytest.param(out("151.101.0.223", None, "ICMP"), True, id="public-ping"),
    pytest.param(out("151.101.0.223", 3478, "SCTP"), True, id="public-sctp"),
]

DENIED_EGRESS = [
    pytest.param(out("10.0.0.5"), False, id="rfc1918-10"),
    pytest.param(out("172.16.0.1"), False, id="rfc1918-172-low"),
    pytest.param(out("172.31.255.255"), False, id="rfc1918-172-high"),
    pytest.param(out("192.168.1.1"), False, id="rfc1918-192"),
    pytest.param(out("100.64.0.1"), False, id="cgnat-first"),
    pytest.param(out("100.127.255.255"), False, id="cgnat-last"),
    pytest.param(out("100.64.0.2", 22), False, id="node-join-network"),
    pytest.param(out("169.254.169.254", 80), False, id="metadata-v4"),
    pytest.param(out("fd00:ec2::254", 80), False, id="metadata-v6"),
    pytest.param(out("169.254.20.10", 53, "UDP"), False, id="nodelocal-dns"),
    pytest.param(out("192.168.100.11", 10250), False, id="own-node-kubelet"),
    pytest.param(out("192.168.100.12", 22), False, id="other-node-internal"),
    pytest.param(out("185.12.64.11", 22), False, id="own-node-public-ip"),
    pytest.param(out("185.12.64.12", 10250), False, id="other-node-public-ip"),
    pytest.param(out("2a01:4f8:0:1::12", 22), False, id="other-node-public-v6"),
    pytest.param(out("10.96.0.1", 443), False, id="apiserver-vip"),
    pytest.param(out("192.168.100.13", 6443), False, id="apiserver-endpoint"),
    pytest.param(out("kubernetes.default.svc.cluster.local", 443), False, id="apiserver-by-name"),
    pytest.param(out("10.96.0.10", 53, "UDP"), False, id="kube-dns-vip"),
    pytest.param(out("10.244.0.10", 53, "UDP"), False, id="kube-dns-pod"),
    pytest.param(out("10.244.1.22", 3000), False, id="same-tenant-sandbox-pod"),
    pytest.param(out("10.96.100.22", 3000), False, id="same-tenant-sandbox-service"),
    pytest.param(out("fd00:10:244:1::22", 3000), False, id="same-tenant-sandbox-pod-v6"),
    pytest.param(out("10.244.2.23", 5432), False, id="same-tenant-database"),
    pytest.param(out("10.244.1.31", 80), False, id="other-tenant-pod"),
    pytest.param(out("10.244.0.32", 49983), False, id="other-tenant-sandbox"),
    pytest.param(out("10.244.1.61", 5432), False, id="platform-database"),
    pytest.param(out("10.244.2.62", 8080), False, id="keycloak"),
    pytest.param(out("10.244.0.63", 80), False, id="dashboard"),
    pytest.param(out("10.244.2.65", 443), False, id="cdi-upload-proxy"),
    pytest.param(out("10.244.2.41", 80), False, id="tenant-root-ingress"),
    pytest.param(out("10.244.2.51", 8080), False, id="gateway-pod"),
    pytest.param(out("224.0.0.251", 5353, "UDP"), False, id="multicast"),
    pytest.param(out("240.0.0.1"), False, id="reserved"),
    pytest.param(out("255.255.255.255", 67, "UDP"), False, id="broadcast"),
    pytest.param(out("192.0.2.1"), False, id="documentation-1"),
    pytest.param(out("198.51.100.1"), False, id="documentation-2"),
    pytest.param(out("203.0.113.1"), False, id="documentation-3"),
    pytest.param(out("198.18.0.1"), False, id="benchmarking"),
    pytest.param(out("192.0.0.1"), False, id="ietf-assignments"),
    pytest.param(out("192.88.99.1"), False, id="6to4-relay"),
    pytest.param(out("127.0.0.1"), False, id="loopback"),
    pytest.param(out("0.0.0.0"), False, id="this-network"),  # noqa: S104  # a destination address, not a bind
    pytest.param(out("::1"), False, id="loopback-v6"),
    pytest.param(out("::a00:5"), False, id="ipv4-compatible"),
    pytest.param(out("::ffff:a00:5"), False, id="ipv4-mapped-private"),
    pytest.param(out("::ffff:a9fe:a9fe", 80), False, id="ipv4-mapped-metadata"),
    pytest.param(out("64:ff9b::a00:5"), False, id="nat64-private"),
    pytest.param(out("64:ff9b::a9fe:a9fe", 80), False, id="nat64-metadata"),
    pytest.param(out("64:ff9b:1::a00:5"), False, id="local-nat64-private"),
    pytest.param(out("2002:a00:5::1"), False, id="6to4-private"),
    pytest.param(out("2002:a9fe:a9fe::1", 80), False, id="6to4-metadata"),
    pytest.param(out("2001:0:a9fe:a9fe::1", 80), False, id="teredo-metadata"),
    pytest.param(out("2001:2::1"), False, id="benchmarking-v6"),
    pytest.param(out("100::1"), False, id="discard-only-v6"),
    pytest.param(out("2001:db8::1"), False, id="documentation-v6"),
    pytest.param(out("3fff::1"), False, id="documentation-v6-new"),
    pytest.param(out("5f00::1"), False, id="segment-routing-v6"),
    pytest.param(out("fc00::1"), False, id="unique-local-v6"),
    pytest.param(out("fe80::1"), False, id="link-local-v6"),
    pytest.param(out("fec0::1"), False, id="site-local-v6"),
    pytest.param(out("ff02::1"), False, id="multicast-v6"),
    pytest.param(out("rebind.example.net"), False, id="dns-rebinding-to-private"),
    pytest.param(out("10.0.0.5", None, "ICMP"), False, id="private-ping"),
    pytest.param(out("169.254.169.254", None, "ICMP"), False, id="metadata-ping"),
    pytest.param(out("192.168.100.11", None, "ICMP"), False, id="own-node-ping"),
    pytest.param(out("10.244.1.22", None, "ICMP"), False, id="same-tenant-sandbox-ping"),
    pytest.param(out("10.244.1.22", 3000, "SCTP"), False, id="same-tenant-sandbox-sctp"),
]

INGRESS = [
    pytest.param(into("sandbox-gateway"), True, id="from-gateway-agent-port"),
    pytest.param(into("sandbox-gateway", 3000), True, id="from-gateway-declared-port"),
    pytest.param(into("sandbox-gateway", 22), True, id="from-gateway-ssh-with-keys"),
    pytest.param(into("sandbox-gateway", 8080), False, id="from-gateway-undeclared-port"),
    # The agent and declared ports are open to the gateway over TCP only.
    pytest.param(into("sandbox-gateway", 49983, "UDP"), False, id="from-gateway-agent-port-udp"),
    pytest.param(into("sandbox-gateway", 49983, "SCTP"), False, id="from-gateway-agent-port-sctp"),
    pytest.param(into("sandbox-gateway", 3000, "UDP"), False, id="from-gateway-declared-port-udp"),
    pytest.param(into("sandbox-gateway", 22, "SCTP"), False, id="from-gateway-ssh-port-sctp"),
    pytest.param(into("sandbox-gateway", 8080, "UDP"), False, id="from-gateway-other-port-udp"),
    pytest.param(into("sandbox-gateway", None, "ICMP", 8), False, id="from-gateway-ping"),
    pytest.param(into("sandbox-gateway", None, "ICMP", 13), False, id="from-gateway-timestamp"),
    pytest.param(into("sandbox-gateway", None, "ICMP"), False, id="from-gateway-any-icmp-type"),
    pytest.param(
        Flow("sandbox-gateway", "fd00:10:244::21", None, "ICMP", icmp_type=128),
        False,
        id="from-gateway-ping-v6",
    ),
    pytest.param(
        Flow("sandbox-gateway", "fd00:10:244::21", None, "ICMP"),
        False,
        id="from-gateway-any-icmpv6-type",
    ),
    pytest.param(into("mallory-shell", None, "ICMP", 8), False, id="from-other-tenant-ping"),
    pytest.param(into("198.51.100.7", None, "ICMP", 8), False, id="from-world-ping"),
    pytest.param(into("gateway-debug"), False, id="from-gateway-namespace-without-label"),
    pytest.param(into("bob-frontend"), False, id="from-same-tenant-sandbox"),
    pytest.param(into("postgres-acme"), False, id="from-same-tenant-pod"),
    pytest.param(into("mallory-shell"), False, id="from-other-tenant-pod"),
    pytest.param(into("mallory-sandbox"), False, id="from-other-tenant-sandbox"),
    pytest.param(into("root-ingress"), False, id="from-parent-tenant-ingress"),
    pytest.param(into("platform-db"), False, id="from-platform-namespace"),
    pytest.param(into("coredns-1"), False, id="from-kube-system"),
    pytest.param(into("198.51.100.7"), False, id="from-world"),
    pytest.param(into("151.101.0.223", 3000), False, id="from-world-on-declared-port"),
    pytest.param(into("192.168.100.12", 49983), False, id="from-remote-node-and-apiserver"),
    pytest.param(into("185.12.64.13", 22), False, id="from-remote-node-public-ip"),
]

TABLE = PUBLIC + DENIED_EGRESS + INGRESS
# The same flows for a sandbox running as a pod, given ALICE_POD: port 22 stays closed.
POD_TABLE = [
    pytest.param(into("sandbox-gateway", 22), False, id="from-gateway-port-22-on-a-pod")
    if row.id == "from-gateway-ssh-with-keys"
    else row
    for row in TABLE
]
