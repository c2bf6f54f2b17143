"""Network isolation: a CiliumNetworkPolicy built from denies, and a NetworkPolicy twin.

Cozystack tenant namespaces already allow all-to-all, egress to `world` and ingress from the
cluster, and allow rules add up; an allow-only policy restricts nothing there. Only Cilium's
`egressDeny`/`ingressDeny` subtract, and a deny wins over every allow of every policy. So the
sandbox's isolation is written as denies: the node and the control plane (entities), every
in-cluster endpoint, and every private, reserved and site range (CIDRs). The allow rules only
matter where nothing else allows: on clusters without Cozystack's baseline.

CIDR rules never match pods or nodes in Cilium (those have their own identities), which is why
entities and endpoints are denied separately from addresses.
"""

from ipaddress import IPv4Network, IPv6Network
from typing import Any, NamedTuple

from function.compose.cilium_policy import cnp
from function.compose.names import (
    CILIUM_POLICY_KEY,
    NETWORK_POLICY_KEY,
    identity_labels,
    labels,
    sandbox_name,
)
from function.compose.service import reserved_ports
from function.errors import FieldError
from function.model import Manifest
from function.model.address import Network, ip_text
from function.model.blocklist import DENY_V4, DENY_V6, first_overlap, refusal
from function.model.platform import Preset, SandboxPlatform
from function.model.spec import Destination, WorkspaceSandbox

CILIUM_KEY = CILIUM_POLICY_KEY
KUBERNETES_KEY = NETWORK_POLICY_KEY

NAMESPACE = "io.kubernetes.pod.namespace"
# Cilium's reserved identities a sandbox may neither reach nor be reached from.
_NEVER_ENTITIES = ["remote-node", "kube-apiserver", "health", "init", "ingress", "unmanaged"]
DENIED_ENTITIES = ["host", *_NEVER_ENTITIES]
# Sources that may never open a connection to a sandbox, whatever the baseline allows.
# The local host stays allowed: kubelet probes come from it.
DENIED_SOURCE_ENTITIES = ["world", *_NEVER_ENTITIES]
KUBE_DNS = {NAMESPACE: "kube-system", "k8s-app": "kube-dns"}
MAX_PORT = 65535
DNS_PORTS = [{"port": "53", "protocol": "UDP"}, {"port": "53", "protocol": "TCP"}]


_PINNED_V4 = [ip_text(n) for n, _ in DENY_V4]
_PINNED_V6 = [ip_text(n) for n, _ in DENY_V6]
_V4_MAPPED = IPv6Network("::ffff:0:0/96")


def _in_network_policy(network: IPv6Network) -> bool:
    """Whether a NetworkPolicy may name an IPv6 range.

    The API server refuses IPv4-mapped ones in an ipBlock (Kubernetes 1.36 validates CIDRs
    strictly: "must not have an IPv4-mapped IPv6 address"); a connection to such an address
    leaves the pod as IPv4, which the IPv4 ranges deny, so the Cilium policy alone names the
    mapped range.
    """
    return not network.subnet_of(_V4_MAPPED)


_NETWORK_POLICY_V6 = [ip_text(n) for n, _ in DENY_V6 if _in_network_policy(n)]


def _deny_cidrs(site: tuple[Network, ...]) -> list[str]:
    return [*_PINNED_V4, *_PINNED_V6, *(ip_text(n) for n in site)]


# Without Cilium's implicit local-cluster term (`policy-default-local-cluster`, off before 1.19
# and configurable), a selector that only says what a peer lacks also selects the node, world
# and the apiserver, which have no namespace label: a NotIn on the namespace is always paired
# with Exists, so that every selector means pods, and the same pods, under either setting.
def _in_a_namespace() -> dict[str, Any]:
    return {"key": NAMESPACE, "operator": "Exists"}


def _not_in_namespace(namespace: str) -> dict[str, Any]:
    """Pods in every namespace but `namespace`, and nothing that is not a pod."""
    not_in = {"key": NAMESPACE, "operator": "NotIn", "values": [namespace]}
    return {"matchExpressions": [_in_a_namespace(), not_in]}


def _in_cluster_endpoints(cluster_dns: bool) -> list[dict[str, Any]]:  # noqa: FBT001  # a preset flag
    """Every endpoint in every namespace; with cluster DNS, all but kube-dns."""
    if not cluster_dns:
        return [{"matchExpressions": [_in_a_namespace()]}]
    return [
        _not_in_namespace("kube-system"),
        {
            "matchExpressions": [
                {"key": NAMESPACE, "operator": "In", "values": ["kube-system"]},
                {"key": "k8s-app", "operator": "NotIn", "values": ["kube-dns"]},
            ]
        },
    ]


def egress_denies(site: tuple[Network, ...], *, cluster_dns: bool) -> list[dict[str, Any]]:
    """The egress deny rules every sandbox gets; the platform guard uses the same."""
    rules: list[dict[str, Any]] = [
        {"toEntities": DENIED_ENTITIES},
        {"toEndpoints": _in_cluster_endpoints(cluster_dns)},
        {"toCIDRSet": [{"cidr": c} for c in _deny_cidrs(site)]},
    ]
    if cluster_dns:
        # kube-dns answers on 53 only; its metrics and health ports stay closed.
        others = [
            {"port": "1", "endPort": 52, "protocol": "ANY"},
            {"port": "54", "endPort": MAX_PORT, "protocol": "ANY"},
        ]
        rules.append({"toEndpoints": [{"matchLabels": KUBE_DNS}], "toPorts": [{"ports": others}]})
    return rules


def _gateway_peer(platform: SandboxPlatform) -> dict[str, Any]:
    gateway = platform.gateway
    return {
        "matchLabels": {NAMESPACE: gateway.namespace, **dict(sorted(gateway.pod_labels.items()))}
    }


def ingress_denies(platform: SandboxPlatform) -> list[dict[str, Any]]:
    """Deny every endpoint but the gateway's pods, and every source outside the cluster."""
    gateway = platform.gateway
    not_gateway = [_not_in_namespace(gateway.namespace)]
    # In the gateway's namespace, a pod lacking any one gateway label is not the gateway
    # (NotIn also matches pods without the key).
    not_gateway += [
        {
            "matchExpressions": [
                {"key": NAMESPACE, "operator": "In", "values": [gateway.namespace]},
                {"key": key, "operator": "NotIn", "values": [value]},
            ]
        }
        for key, value in sorted(gateway.pod_labels.items())
    ]
    return [{"fromEntities": DENIED_SOURCE_ENTITIES}, {"fromEndpoints": not_gateway}]


def _ports(ws: WorkspaceSandbox, platform: SandboxPlatform, *, ssh: bool) -> list[int]:
    reserved = reserved_ports(ws, platform, ssh=ssh).values()
    return sorted({*reserved, *(p.port for p in ws.spec.ports)})


def _rule_ports(rule: Destination) -> list[dict[str, Any]]:
    if not rule.ports:
        return []
    return [{"ports": [{"port": str(p), "protocol": "ANY"} for p in sorted(set(rule.ports))]}]


def _fqdn_selector(fqdn: str) -> dict[str, str]:
    return {"matchPattern": fqdn} if "*" in fqdn else {"matchName": fqdn}


def _resolvers(platform: SandboxPlatform) -> list[dict[str, str]]:
    return [{"cidr": f"{ip_text(r)}/{r.max_prefixlen}"} for r in platform.network.resolvers]


def _allowlist(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform
) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    allowed = _sorted_allow(ws, platform)
    fqdns = sorted({a.fqdn for a in allowed if a.fqdn})
    if fqdns:
        # toFQDNs only works for names the DNS proxy saw resolved; it is told to answer the
        # listed names and refuse the rest, which also keeps DNS from becoming a tunnel.
        dns = {"dns": [_fqdn_selector(f) for f in fqdns]}
        to_dns: dict[str, Any] = (
            {"toEndpoints": [{"matchLabels": KUBE_DNS}]}
            if preset.cluster_dns
            else {"toCIDRSet": _resolvers(platform)}
        )
        rules.append({**to_dns, "toPorts": [{"ports": DNS_PORTS, "rules": dns}]})
    for rule in allowed:
        rules.append({**_peer(rule), **({"toPorts": p} if (p := _rule_ports(rule)) else {})})
    return rules


def _peer(rule: Destination) -> dict[str, Any]:
    if rule.fqdn is not None:
        return {"toFQDNs": [_fqdn_selector(rule.fqdn)]}
    if rule.cidr is not None:
        return {"toCIDRSet": [{"cidr": ip_text(rule.cidr)}]}
    raise ValueError("a destination without fqdn or cidr")  # Destination refuses these


class _Allowed(NamedTuple):
    """A destination the allow-list opens, and the tenant's field it came from."""

    path: str  # spec.network.allow[i].fqdn, .cidr or .bundle
    entry: int  # its position in spec.network.allow
    destination: Destination


def _allowed(ws: WorkspaceSandbox, platform: SandboxPlatform) -> list[_Allowed]:
    """The allow-list with each bundle expanded: as if the tenant had listed its entries."""
    out = []
    for i, rule in enumerate(ws.spec.network.allow):
        if rule.bundle is not None:
            path = f"spec.network.allow[{i}].bundle"
            out += [_Allowed(path, i, d) for d in platform.network.bundle(rule.bundle, path)]
            continue
        field = "fqdn" if rule.fqdn is not None else "cidr"
        # Already validated as an AllowRule, with the same field types.
        own = Destination.model_construct(fqdn=rule.fqdn, cidr=rule.cidr, ports=rule.ports)
        out.append(_Allowed(f"spec.network.allow[{i}].{field}", i, own))
    return out


def _sorted_allow(ws: WorkspaceSandbox, platform: SandboxPlatform) -> list[Destination]:
    # Sorted so that reordering spec.network.allow doesn't rewrite the live policy.
    return sorted((a.destination for a in _allowed(ws, platform)), key=_allow_order)


def _allow_order(rule: Destination) -> tuple[str, str, tuple[int, ...]]:
    return rule.fqdn or "", ip_text(rule.cidr) if rule.cidr is not None else "", rule.ports


def _egress(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform
) -> list[dict[str, Any]]:
    mode = ws.spec.network.egress
    if mode == "None":
        return []
    if mode == "Allowlist":
        return _allowlist(ws, preset, platform)
    rules: list[dict[str, Any]] = [{"toCIDRSet": [{"cidr": "0.0.0.0/0"}, {"cidr": "::/0"}]}]
    if preset.cluster_dns:
        rules.append(
            {"toEndpoints": [{"matchLabels": KUBE_DNS}], "toPorts": [{"ports": DNS_PORTS}]}
        )
    return rules


def check_allow(ws: WorkspaceSandbox, platform: SandboxPlatform) -> None:
    """Refuse what the allow-list can't enforce, and CIDRs that touch a blocked range."""
    site = platform.network.denied_cidrs
    nat64 = platform.network.site_addresses.nat64_prefixes or ()
    cidrs: list[tuple[_Allowed, Network]] = []
    for allowed in _allowed(ws, platform):
        entry = allowed.destination
        if entry.fqdn is not None and platform.network.namespaces_allow_internet:
            raise FieldError(allowed.path, _names_refused(ws, platform, allowed, entry.fqdn))
        if entry.cidr is None:
            continue
        why = refusal(entry.cidr, site, nat64)
        if why is not None:
            raise FieldError(allowed.path, why)
        cidrs.append((allowed, entry.cidr))
    overlap = first_overlap([cidr for _, cidr in cidrs])
    if overlap is not None:
        (earlier, first), (later, second) = cidrs[overlap[0]], cidrs[overlap[1]]
        overlaps = f"overlaps allow[{earlier.entry}] ({ip_text(first)}); merge them"
        raise FieldError(later.path, f"{ip_text(second)} {overlaps}")


def _names_refused(
    ws: WorkspaceSandbox, platform: SandboxPlatform, allowed: _Allowed, fqdn: str
) -> str:
    why = (
        "names can't be enforced on this platform: its namespaces already allow all internet "
        "egress, and Cilium can only take that away by address"
    )
    elsewhere = sorted(n for n, p in platform.presets.items() if p.placement != "Namespace")
    where = f"a preset that gives each sandbox a namespace of its own ({', '.join(elsewhere)})"
    bundle = ws.spec.network.allow[allowed.entry].bundle
    if bundle is not None:
        # The tenant can't edit a bundle: name what in it is refused, and where it works.
        instead = where if elsewhere else "a preset that gives each sandbox its own namespace"
        return f"bundle {bundle!r} holds names ({fqdn}), and {why}; use {instead}"
    instead = f"use {where}, or " if elsewhere else ""
    return f"{why}; {instead}list the destination's addresses as cidr entries"


def _other_ports(ports: tuple[int, ...]) -> list[dict[str, Any]]:
    """Every port range but `ports`, for a deny that leaves only those open."""
    ranges, start = [], 1
    for port in sorted(set(ports)):
        if port > start:
            ranges.append({"port": str(start), "endPort": port - 1, "protocol": "ANY"})
        start = port + 1
    if start <= MAX_PORT:
        ranges.append({"port": str(start), "endPort": MAX_PORT, "protocol": "ANY"})
    return ranges


def _gateway_tcp_only(platform: SandboxPlatform) -> dict[str, Any]:
    # The gateway speaks HTTP: no port of a sandbox is open to it over UDP or SCTP.
    every_port = [
        {"port": "1", "endPort": MAX_PORT, "protocol": protocol} for protocol in ("UDP", "SCTP")
    ]
    return {"fromEndpoints": [_gateway_peer(platform)], "toPorts": [{"ports": every_port}]}


# Cilium takes at most 40 fields per ICMP rule, and names one type per field.
_ICMP_FIELDS_PER_RULE = 40
_ICMP_TYPES = 256


def _every_icmp_type() -> list[dict[str, Any]]:
    """ICMP rules naming every type of both families: a deny of all of ICMP."""
    return [
        {
            "fields": [
                {"family": family, "type": t}
                for t in range(start, min(start + _ICMP_FIELDS_PER_RULE, _ICMP_TYPES))
            ]
        }
        for family in ("IPv4", "IPv6")
        for start in range(0, _ICMP_TYPES, _ICMP_FIELDS_PER_RULE)
    ]


def gateway_guard_denies(platform: SandboxPlatform) -> list[dict[str, Any]]:
    """What the guard denies the gateway: UDP, SCTP, and ICMP of every type.

    Every ICMP type is 512 fields: they live in the one guard, not in every sandbox's policy
    (which stays small and cheap to render); every sandbox pod is selected by the guard.
    """
    icmp = {"fromEndpoints": [_gateway_peer(platform)], "icmps": _every_icmp_type()}
    return [_gateway_tcp_only(platform), icmp]


def _allowlist_denies(ws: WorkspaceSandbox, platform: SandboxPlatform) -> list[dict[str, Any]]:
    """The allow-list written as denies, for namespaces that already allow the internet."""
    cidrs = [(r, r.cidr) for r in _sorted_allow(ws, platform) if r.cidr is not None]
    rest = []
    for everything, version in (("0.0.0.0/0", 4), ("::/0", 6)):
        listed = [ip_text(cidr) for _, cidr in cidrs if cidr.version == version]
        rest.append({"cidr": everything, **({"except": listed} if listed else {})})
    denies: list[dict[str, Any]] = [{"toCIDRSet": rest}]
    for rule, cidr in cidrs:
        if rule.ports:
            denies.append(
                {
                    "toCIDRSet": [{"cidr": ip_text(cidr)}],
                    "toPorts": [{"ports": _other_ports(rule.ports)}],
                }
            )
    return denies


def _cilium_policy(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform, open_ports: list[int]
) -> Manifest:
    identity = identity_labels(ws)
    deny_egress = egress_denies(platform.network.denied_cidrs, cluster_dns=preset.cluster_dns)
    if ws.spec.network.egress == "None":
        deny_egress = [{"toEntities": ["all"]}]
    elif ws.spec.network.egress == "Allowlist" and platform.network.namespaces_allow_internet:
        deny_egress += _allowlist_denies(ws, platform)
    ports = [{"port": str(p), "protocol": "TCP"} for p in open_ports]
    # The baseline lets the cluster in on every port and protocol; the gateway gets only our
    # ports, over TCP (ICMP from it is the guard's to deny).
    gateway_elsewhere = {
        "fromEndpoints": [_gateway_peer(platform)],
        "toPorts": [{"ports": _other_ports(tuple(open_ports))}],
    }
    return cnp(
        sandbox_name(ws, CILIUM_KEY),
        {
            "description": f"Isolation of sandbox {ws.metadata.name}: denies win over every allow.",
            "endpointSelector": {"matchLabels": identity},
            "egressDeny": deny_egress,
            "egress": _egress(ws, preset, platform),
            "ingressDeny": [
                *ingress_denies(platform),
                gateway_elsewhere,
                _gateway_tcp_only(platform),
            ],
            "ingress": [
                {"fromEndpoints": [_gateway_peer(platform)], "toPorts": [{"ports": ports}]}
            ],
        },
        labels=labels(ws),
    )


def _ip_block(cidr: str, deny: list[str]) -> dict[str, Any]:
    return {"ipBlock": {"cidr": cidr, "except": deny}}


def _kubernetes_egress(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform
) -> list[dict[str, Any]]:
    site = platform.network.denied_cidrs
    v4 = [*_PINNED_V4, *(ip_text(n) for n in site if isinstance(n, IPv4Network))]
    v6 = [
        *_NETWORK_POLICY_V6,
        *(ip_text(n) for n in site if isinstance(n, IPv6Network) and _in_network_policy(n)),
    ]
    mode = ws.spec.network.egress
    dns = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    kube_dns = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    rules: list[dict[str, Any]] = []
    if mode == "Internet":
        rules.append({"to": [_ip_block("0.0.0.0/0", v4), _ip_block("::/0", v6)]})
    if mode == "Allowlist":
        # A NetworkPolicy can't name FQDNs: without Cilium, only the listed CIDRs are open.
        for rule in _sorted_allow(ws, platform):
            if rule.cidr is None:
                continue
            ports = [
                {"port": p, "protocol": proto}
                for p in sorted(set(rule.ports))
                for proto in ("TCP", "UDP")
            ]
            rules.append(
                {
                    "to": [{"ipBlock": {"cidr": ip_text(rule.cidr)}}],
                    **({"ports": ports} if ports else {}),
                }
            )
    # No DNS for allow-lists: names only work through Cilium's DNS proxy, and an L4 allow of
    # port 53 here would, on a Cilium cluster, let every name past that proxy's filter.
    if mode == "Internet" and preset.cluster_dns:
        rules.append({"to": [kube_dns], "ports": dns})
    return rules


def _kubernetes_policy(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform, open_ports: list[int]
) -> Manifest:
    gateway = platform.gateway
    source = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": gateway.namespace}},
        "podSelector": {"matchLabels": dict(sorted(gateway.pod_labels.items()))},
    }
    ports = [{"port": p, "protocol": "TCP"} for p in open_ports]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": sandbox_name(ws, KUBERNETES_KEY), "labels": labels(ws)},
        "spec": {
            "podSelector": {"matchLabels": identity_labels(ws)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [source], "ports": ports}],
            "egress": _kubernetes_egress(ws, preset, platform),
        },
    }


def network_policies(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform, *, ssh: bool
) -> dict[str, Manifest]:
    """`ssh`: whether the workload serves SSH (`Workload.serves_ssh`), so port 22 is its own."""
    check_allow(ws, platform)
    ports = _ports(ws, platform, ssh=ssh)
    out = {KUBERNETES_KEY: _kubernetes_policy(ws, preset, platform, ports)}
    if platform.network.cilium:
        out[CILIUM_KEY] = _cilium_policy(ws, preset, platform, ports)
    return out
