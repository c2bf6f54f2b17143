"""The modelled cluster that flows are evaluated in: pods, nodes, services, DNS.

Policies select by labels, but packets carry addresses. This module answers what Cilium's
ipcache answers: which identity an address has (a pod, a node, the apiserver, or `world`),
and which backends a Service VIP is translated to before policy is applied.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from ipaddress import IPv4Address, IPv6Address, IPv6Network, ip_address, ip_network

from function.compose.names import WORKSPACE_LABEL, new_identity
from function.model.address import ip_text

Address = IPv4Address | IPv6Address

NAMESPACE_NAME = "kubernetes.io/metadata.name"
"""Kubernetes stamps this label on every namespace; NetworkPolicies select namespaces by it."""
NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
"""The label Cilium gives every endpoint for its namespace."""
_NAMESPACE_LABELS = "io.cilium.k8s.namespace.labels."


def _canonical(ips: tuple[str, ...]) -> tuple[str, ...]:
    # Canonical text, so "fd00:10:244::0a" and "fd00:10:244::a" are the same address.
    return tuple(ip_text(ip_address(ip)) for ip in ips)


@dataclass(frozen=True)
class Workload:
    """A pod; a KubeVirt sandbox is its virt-launcher pod, which carries the VM's labels."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    ips: tuple[str, ...]
    node: str = "node-1"
    host_network: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "ips", _canonical(self.ips))

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Node:
    """A node and every address Cilium knows for it (InternalIP, ExternalIP, IPv6)."""

    name: str
    ips: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ips", _canonical(self.ips))


@dataclass(frozen=True)
class Service:
    """A ClusterIP Service: its VIPs are translated to backends before policy applies.

    Backends are the pods matching `selector` in the Service's namespace, or, for a Service
    without a selector, `endpoint_ips` (as the apiserver's `kubernetes` Service has).
    `ports` maps a service port to its target port; unlisted ports are passed through.
    """

    name: str
    namespace: str
    cluster_ips: tuple[str, ...]
    selector: Mapping[str, str] | None
    endpoint_ips: tuple[str, ...] = ()
    ports: Mapping[int, int] = field(default_factory=dict)
    load_balancer_ips: tuple[str, ...] = ()
    """A LoadBalancer Service's ingress addresses: Cilium translates them like its VIPs."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cluster_ips", _canonical(self.cluster_ips))
        object.__setattr__(self, "endpoint_ips", _canonical(self.endpoint_ips))
        object.__setattr__(self, "load_balancer_ips", _canonical(self.load_balancer_ips))


@dataclass(frozen=True)
class Identity:
    """An address and the identity Cilium gives it: a pod, a node, the apiserver, or `world`."""

    ip: Address
    pod: Workload | None = None
    node: Node | None = None
    apiserver: bool = False

    @property
    def world(self) -> bool:
        return self.pod is None and self.node is None and not self.apiserver

    def entities(self, here: str) -> frozenset[str]:
        """The entities this address belongs to, seen from an endpoint on node `here`."""
        if self.world:
            return frozenset({"all", "world", f"world-ipv{self.ip.version}"})
        found = {"all", "cluster"}
        if self.node is not None:
            found.add("host" if self.node.name == here else "remote-node")
        if self.apiserver:
            # An apiserver on a node address is both: it matches either entity.
            found.add("kube-apiserver")
        return frozenset(found)

    def __str__(self) -> str:
        ip = ip_text(self.ip)
        if self.pod is not None:
            return f"{self.pod.ref} ({ip})"
        if self.node is not None:
            return f"{ip} (node {self.node.name})"
        return f"{ip} (kube-apiserver)" if self.apiserver else ip


@dataclass(frozen=True)
class Environment:
    """The cluster: its workloads, nodes, services, namespaces and what DNS answers.

    `apiserver_ips` are the addresses Cilium gives the `kube-apiserver` identity (the
    endpoints of the `kubernetes` Service); `dns` maps a name to the addresses it resolves to.
    `policy_default_local_cluster` is Cilium's setting of that name: whether every endpoint
    selector implicitly selects the local cluster's endpoints only (on by default in Helm from
    1.19; off before, and an operator may turn it off).
    """

    workloads: tuple[Workload, ...]
    nodes: tuple[Node, ...]
    services: tuple[Service, ...]
    namespace_labels: Mapping[str, Mapping[str, str]]
    apiserver_ips: tuple[str, ...]
    dns: Mapping[str, tuple[str, ...]]
    policy_default_local_cluster: bool = True
    nat64_prefixes: tuple[str, ...] = ()
    """The site's NAT64 translators: an address in one of them reaches the IPv4 address it
    embeds, from outside the cluster, where no policy of it applies any more."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "apiserver_ips", _canonical(self.apiserver_ips))
        dns = {name.lower().rstrip("."): _canonical(ips) for name, ips in self.dns.items()}
        object.__setattr__(self, "dns", dns)

    def workload(self, ref: str) -> Workload:
        """The workload named `namespace/name`, or `name` when only one has that name."""
        namespace, _, name = ref.rpartition("/")
        found = [w for w in self.workloads if w.name == name and namespace in ("", w.namespace)]
        if len(found) != 1:
            raise LookupError(f"{ref!r} names {len(found)} workloads; use namespace/name")
        return found[0]

    def has_workload(self, ref: str) -> bool:
        namespace, _, name = ref.rpartition("/")
        return any(w.name == name and namespace in ("", w.namespace) for w in self.workloads)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise LookupError(f"no node named {name!r}")

    def namespace_labels_of(self, namespace: str) -> dict[str, str]:
        return {**self.namespace_labels.get(namespace, {}), NAMESPACE_NAME: namespace}

    @cached_property
    def _pods_by_ip(self) -> dict[Address, Workload]:
        # Host-network pods have no endpoint of their own: their addresses are their node's.
        return {ip_address(ip): w for w in self.workloads if not w.host_network for ip in w.ips}

    @cached_property
    def _nodes_by_ip(self) -> dict[Address, Node]:
        return {ip_address(ip): n for n in self.nodes for ip in n.ips}

    @cached_property
    def _services_by_ip(self) -> dict[Address, Service]:
        return {
            ip_address(ip): s
            for s in self.services
            for ip in (*s.cluster_ips, *s.load_balancer_ips)
        }

    def pod_at(self, ip: Address) -> Workload | None:
        return self._pods_by_ip.get(ip)

    def node_at(self, ip: Address) -> Node | None:
        return self._nodes_by_ip.get(ip)

    def service_at(self, ip: Address) -> Service | None:
        return self._services_by_ip.get(ip)

    def translated(self, ip: Address) -> IPv4Address | None:
        """The IPv4 address a site NAT64 prefix takes `ip` to (RFC 6052), or None."""
        if not isinstance(ip, IPv6Address):
            return None
        for text in self.nat64_prefixes:
            prefix = ip_network(text)
            if isinstance(prefix, IPv6Network) and ip in prefix:
                return _embedded(int(ip), prefix.prefixlen)
        return None

    def is_apiserver(self, ip: Address) -> bool:
        return ip_text(ip) in self.apiserver_ips

    def identity(self, ip: Address) -> Identity:
        """What Cilium's ipcache says `ip` is; an address it has no entry for is `world`."""
        return Identity(ip, self.pod_at(ip), self.node_at(ip), self.is_apiserver(ip))

    def endpoint_labels(self, pod: Workload) -> dict[str, str]:
        """The labels Cilium selects a pod by: its own, its namespace and namespace labels."""
        namespace = self.namespace_labels_of(pod.namespace)
        extra = {f"{_NAMESPACE_LABELS}{k}": v for k, v in namespace.items()}
        return {**pod.labels, **extra, NAMESPACE_LABEL: pod.namespace}

    def backends(self, service: Service, version: int) -> tuple[str, ...]:
        """Backend addresses of `service` in one IP family, in a stable order."""
        if service.selector is None:
            ips: tuple[str, ...] = service.endpoint_ips
        else:
            selector = service.selector
            ips = tuple(
                ip
                for w in self.workloads
                if w.namespace == service.namespace
                and all(w.labels.get(k) == v for k, v in selector.items())
                for ip in w.ips
            )
        return tuple(ip for ip in ips if ip_address(ip).version == version)

    def resolve(self, name: str) -> tuple[str, ...]:
        """What DNS answers for `name`; empty when the name is unknown."""
        return self.dns.get(name.lower().rstrip("."), ())

    def names_for(self, ip: Address) -> tuple[str, ...]:
        """Every name that resolves to `ip`, sorted: the names a DNS proxy can learn for it."""
        return tuple(sorted(n for n, ips in self.dns.items() if ip_text(ip) in ips))


def _embedded(value: int, length: int) -> IPv4Address:
    """RFC 6052 section 2.2: the IPv4 bits follow the prefix, skipping bits 64-71 (u)."""
    if length == 96:  # noqa: PLR2004  # the one layout with the address at the end
        return IPv4Address(value & 0xFFFFFFFF)
    before = 64 - length
    high = (value >> 64) & ((1 << before) - 1)
    low = (value >> (56 - (32 - before))) & ((1 << (32 - before)) - 1)
    return IPv4Address((high << (32 - before)) | low)


# ---------------------------------------------------------------------------------------------
# A Cozystack v1.6 cluster: three nodes, Kube-OVN for pod networking with Cilium chained for
# policy, tenants nested under tenant-root, platform components in cozy-* namespaces.

_NODES = tuple(
    # Each node has an InternalIP on the private LAN, a public IPv4 (ExternalIP) and a public
    # IPv6, all known to Cilium as node addresses (host / remote-node identities). Kube-OVN also
    # gives every node an address on its join network (100.64.0.0/16), but Cilium does not
    # list those as node IPs, so from a pod's viewpoint they are plain `world` addresses.
    Node(f"node-{i}", (f"192.168.100.1{i}", f"185.12.64.1{i}", f"2a01:4f8:0:1::1{i}"))
    for i in (1, 2, 3)
)
APISERVER_IPS = ("192.168.100.11", "192.168.100.12", "192.168.100.13")
"""The apiserver runs on every node (6443 on the InternalIP): kube-apiserver and a node IP."""

CONTROL_PLANE_VIP = "185.12.64.100"
"""A kube-vip (or Talos) VIP in front of the apiservers on the nodes' public network. It is no
node's address and no endpoint of the `kubernetes` Service, so Cilium sees it as `world`."""

UNLISTED_NODE_IPS = ("185.12.64.21", "2a01:4f8:0:1::21")
"""Further public addresses of node-1 that its Node object does not list: `world` to Cilium."""

LOAD_BALANCER_IP = "185.12.65.10"
"""tenant-root's ingress, a LoadBalancer Service. Cilium translates it to the ingress pods;
from inside a ComputePlane it is a public address like any other."""

NAT64_PREFIX = "2a01:4f8:c0c:6400::/96"
"""The site's network-specific NAT64 prefix: <prefix>::a9fe:a9fe is 169.254.169.254, reached
through the site's translator, outside the cluster."""

PLANE_CLUSTER = "computeplane-cluster"
"""tenant-acme's ComputePlane's Kamaji cluster: its control plane runs as pods in tenant-acme,
its workers as KubeVirt VMs there, labelled by the Cluster API KubeVirt provider."""

NODE_LOCAL_DNS = "169.254.20.10"
"""NodeLocal DNSCache listens on a link-local address in the host network namespace. Cilium has
no identity for that address, so a pod sending to it is sending to `world`."""

_SYSTEM = {"cozystack.io/system": "true"}
# Cozystack's package operator stamps cozystack.io/system=true on every namespace it creates for
# a platform package; the tenant baseline trusts that label at ingress.
_COZY_NAMESPACES: Mapping[str, Mapping[str, str]] = {
    # A tenant namespace carries tenant.cozystack.io/<t> for itself and each ancestor; the
    # tenant's egress baseline selects its own and its descendants' pods by that label.
    "tenant-root": {"tenant.cozystack.io/tenant-root": ""},
    "tenant-acme": {"tenant.cozystack.io/tenant-acme": "", "tenant.cozystack.io/tenant-root": ""},
    "tenant-evil": {"tenant.cozystack.io/tenant-evil": "", "tenant.cozystack.io/tenant-root": ""},
    "kube-system": {},
    "cozy-system": _SYSTEM,
    "cozy-sandbox-gateway": _SYSTEM,
    "cozy-dashboard": _SYSTEM,
    "cozy-keycloak": _SYSTEM,
    "cozy-linstor": _SYSTEM,
    "cozy-kubevirt-cdi": _SYSTEM,
    "cozy-grafana-operator": _SYSTEM,
}

_VIRT_LAUNCHER = {"kubevirt.io": "virt-launcher"}


def _sandbox(name: str, namespace: str, ips: tuple[str, ...], node: str) -> Workload:
    """The pod of the sandbox the XR `name` becomes: its VM and its label are its identity."""
    identity = new_identity(name)
    labels = {WORKSPACE_LABEL: identity, **_VIRT_LAUNCHER, "vm.kubevirt.io/name": identity}
    return Workload(name, namespace, labels, ips, node)


_WORKLOADS = (
    # Two sandboxes of one tenant on different nodes, so host and remote-node differ for them.
    _sandbox("alice-api", "tenant-acme", ("10.244.0.21", "fd00:10:244::21"), "node-1"),
    _sandbox("bob-frontend", "tenant-acme", ("10.244.1.22", "fd00:10:244:1::22"), "node-2"),
    Workload(
        "postgres-acme",
        "tenant-acme",
        {"app.kubernetes.io/name": "postgres", "app.kubernetes.io/instance": "postgres-acme"},
        ("10.244.2.23", "fd00:10:244:2::23"),
        "node-3",
    ),
    Workload("mallory-shell", "tenant-evil", {"app": "shell"}, ("10.244.1.31",), "node-2"),
    _sandbox("mallory-sandbox", "tenant-evil", ("10.244.0.32", "fd00:10:244::32"), "node-1"),
    # tenant-root's ingress controller: tenants' baselines let their pods reach it.
    Workload(
        "root-ingress",
        "tenant-root",
        {"cozystack.io/service": "ingress", "app.kubernetes.io/name": "ingress-nginx"},
        ("10.244.2.41",),
        "node-3",
    ),
    Workload(
        "sandbox-gateway",
        "cozy-sandbox-gateway",
        {"app.kubernetes.io/name": "sandbox-gateway"},
        ("10.244.2.51", "fd00:10:244:2::51"),
        "node-3",
    ),
    # Same namespace as the gateway, without its label: must not be treated as the gateway.
    Workload(
        "gateway-debug",
        "cozy-sandbox-gateway",
        {"app.kubernetes.io/name": "debug"},
        ("10.244.0.52",),
        "node-1",
    ),
    Workload(
        "platform-db",
        "cozy-system",
        {"app.kubernetes.io/name": "postgres", "app.kubernetes.io/part-of": "cozystack"},
        ("10.244.1.61",),
        "node-2",
    ),
    Workload("keycloak", "cozy-keycloak", {"app.kubernetes.io/name": "keycloak"}, ("10.244.2.62",)),
    Workload(
        "dashboard", "cozy-dashboard", {"app.kubernetes.io/name": "dashboard"}, ("10.244.0.63",)
    ),
    Workload("linstor-gui", "cozy-linstor", {"app": "linstor-gui"}, ("10.244.1.64",), "node-2"),
    Workload(
        "cdi-uploadproxy",
        "cozy-kubevirt-cdi",
        {"cdi.kubevirt.io": "cdi-uploadproxy"},
        ("10.244.2.65",),
    ),
    Workload(
        "coredns-1",
        "kube-system",
        {"k8s-app": "kube-dns"},
        ("10.244.0.10", "fd00:10:244::a"),
        "node-1",
    ),
    Workload(
        "coredns-2",
        "kube-system",
        {"k8s-app": "kube-dns"},
        ("10.244.1.10", "fd00:10:244:1::a"),
        "node-2",
    ),
    Workload(
        "node-local-dns",
        "kube-system",
        {"k8s-app": "node-local-dns"},
        (NODE_LOCAL_DNS,),
        "node-1",
        host_network=True,
    ),
)

_SERVICES = (
    # The apiserver's Service has no selector: its endpoints are the nodes' InternalIPs:6443.
    Service(
        "kubernetes",
        "default",
        ("10.96.0.1", "fd00:10:96::1"),
        None,
        APISERVER_IPS,
        {443: 6443},
    ),
    Service("kube-dns", "kube-system", ("10.96.0.10", "fd00:10:96::a"), {"k8s-app": "kube-dns"}),
    Service(
        "bob-frontend",
        "tenant-acme",
        ("10.96.100.22", "fd00:10:96::6416"),
        {WORKSPACE_LABEL: new_identity("bob-frontend")},
    ),
    # A Service whose pods are all gone: its VIP leads nowhere.
    Service("orphan", "tenant-acme", ("10.96.100.99",), {"app": "gone"}),
    Service(
        "root-ingress",
        "tenant-root",
        ("10.96.0.80",),
        {"cozystack.io/service": "ingress"},
        load_balancer_ips=(LOAD_BALANCER_IP,),
    ),
)

_DNS: Mapping[str, tuple[str, ...]] = {
    # Public registries and forges an agent installs from (real-looking public addresses).
    "pypi.org": ("151.101.0.223", "151.101.64.223", "2a04:4e42::223"),
    "upload.pypi.org": ("151.101.128.223", "2a04:4e42:200::223"),
    "files.pythonhosted.org": ("151.101.1.63", "2a04:4e42::319"),
    "registry.npmjs.org": ("104.16.1.34", "2606:4700::6810:122"),
    "github.com": ("140.82.121.4",),
    "objects.githubusercontent.com": ("185.199.108.133", "2606:50c0:8000::154"),
    # A hostile name that resolves into private and metadata space: a DNS-rebinding attempt.
    "rebind.example.net": ("10.0.0.5", "169.254.169.254"),
    # Cluster names, so flows can name in-cluster services as a program would.
    "kubernetes.default.svc.cluster.local": ("10.96.0.1",),
    "kube-dns.kube-system.svc.cluster.local": ("10.96.0.10",),
    # The site's own public names: the control-plane VIP, and a plane's control-plane endpoint
    # behind tenant-root's ingress.
    "api.cozy.example.net": (CONTROL_PLANE_VIP,),
    f"{PLANE_CLUSTER}.acme.cozy.example.net": (LOAD_BALANCER_IP,),
}


def _worker(name: str, ips: tuple[str, ...], node: str) -> Workload:
    """A ComputePlane worker: the virt-launcher pod of its VM, with the provider's labels."""
    labels = {
        **_VIRT_LAUNCHER,
        "kubevirt.io/vm": name,
        "name": name,
        "cluster.x-k8s.io/cluster-name": PLANE_CLUSTER,
        "cluster.x-k8s.io/role": "worker",
        "cluster.x-k8s.io/deployment-name": f"{PLANE_CLUSTER}-md0",
        "apps.cozystack.io/application.kind": "Kubernetes",
        "apps.cozystack.io/application.name": PLANE_CLUSTER,
        "node-role.kubernetes.io/ingress-nginx": "",
    }
    return Workload(name, "tenant-acme", labels, ips, node)


_PLANE = (
    _worker(f"{PLANE_CLUSTER}-md0-x7k2p", ("10.244.1.71", "fd00:10:244:1::71"), "node-2"),
    _worker(f"{PLANE_CLUSTER}-md0-q4w8n", ("10.244.2.72",), "node-3"),
    # Kamaji's control plane of the same cluster, as pods in the tenant's namespace.
    Workload(
        f"{PLANE_CLUSTER}-kcp",
        "tenant-acme",
        {"kamaji.clastix.io/name": PLANE_CLUSTER, "kamaji.clastix.io/component": "deployment"},
        ("10.244.0.73",),
        "node-1",
    ),
)


def cozystack_environment() -> Environment:
    """A Cozystack v1.6 cluster with two tenants, platform services and public DNS names.

    tenant-acme also has a ComputePlane (two worker VMs and its Kamaji control plane), and the
    site has addresses Cilium sees as `world`: a control-plane VIP, node addresses it does not
    list, tenant-root's load balancer, and a NAT64 prefix.

    Pod CIDR 10.244.0.0/16 + fd00:10:244::/56, service CIDR 10.96.0.0/16 + fd00:10:96::/112.
    """
    return Environment(
        workloads=(*_WORKLOADS, *_PLANE),
        nodes=_NODES,
        services=_SERVICES,
        namespace_labels=_COZY_NAMESPACES,
        apiserver_ips=APISERVER_IPS,
        dns=_DNS,
        nat64_prefixes=(NAT64_PREFIX,),
    )
