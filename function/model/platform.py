"""The platform's SandboxPlatform function input, mirroring package/input/.

Crossplane does not validate a function's input: it is an opaque object nested in a
Composition. So this model forbids unknown fields, and every problem becomes a FATAL result
whose path starts with `input.`, pointing the platform engineer at the field to fix.
"""

import re
from decimal import Decimal
from functools import lru_cache
from ipaddress import IPv4Address, IPv4Network, ip_network
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from function.errors import FieldError
from function.model import Model
from function.model.address import Network, ip_text
from function.model.blocklist import blocked, first_overlap, nat64_denies, refusal
from function.model.names import DnsLabel, DnsSubdomain, LabelKey, LabelValue
from function.model.spec import MAX_ALLOW_RULES, Destination
from function.model.types import (
    Bool,
    Bytes,
    Cidr,
    Cpu,
    Duration,
    Int,
    IpAddress,
    Nat64Prefix,
    Port,
)

Runtime = Literal["kubevirt", "kata", "gvisor", "container"]
Placement = Literal["Namespace", "SandboxNamespace", "SharedComputePlane", "DedicatedComputePlane"]

_DIGEST_PINNED = re.compile(r"[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+(:[\w.-]+)?@sha256:[0-9a-f]{64}")


def _pinned(value: str) -> str:
    if not _DIGEST_PINNED.fullmatch(value):
        raise ValueError(f"{value!r} must be pinned by digest: registry/repository@sha256:<64 hex>")
    return value


class Sizes(Model):
    cpu: Cpu
    memory: Bytes
    disk: Bytes


class ResourceBounds(Model):
    default: Sizes
    max: Sizes

    @model_validator(mode="after")
    def _default_within_max(self) -> "ResourceBounds":
        for field in ("cpu", "memory", "disk"):
            if getattr(self.default, field) > getattr(self.max, field):
                raise ValueError(f"default.{field} is larger than max.{field}")
        return self


class Reference(Model):
    namespace: DnsLabel
    name: DnsSubdomain


class Instancetype(Model):
    kind: Literal["VirtualMachineClusterInstancetype", "VirtualMachineInstancetype"] = (
        "VirtualMachineClusterInstancetype"
    )
    name: DnsSubdomain


class Preference(Model):
    kind: Literal["VirtualMachineClusterPreference", "VirtualMachinePreference"] = (
        "VirtualMachineClusterPreference"
    )
    name: DnsSubdomain


class KubeVirtOptions(Model):
    # passt is a binding plugin the cluster must register; masquerade works everywhere.
    network_binding: Literal["masquerade", "passt"] = "masquerade"
    eviction_strategy: Literal["LiveMigrate", "LiveMigrateIfPossible", "External", "None"] = (
        "LiveMigrateIfPossible"
    )
    instancetype: Instancetype | None = None
    preference: Preference | None = None
    termination_grace_period_seconds: Annotated[Int, Field(ge=0, le=3600)] = 60
    # `virtctl console` reaches the guest through KubeVirt's API, past every network policy
    # and the gateway; without a serial console it has nothing to attach to.
    serial_console: Bool = False


class Toleration(Model):
    key: LabelKey | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: Int | None = None

    @model_validator(mode="after")
    def _exists_takes_no_value(self) -> "Toleration":
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        return self


class Scheduling(Model):
    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    priority_class_name: DnsSubdomain | None = None


class Overhead(Model):
    cpu: Cpu
    memory: Bytes


class PodOptions(Model):
    """The sandbox pod, for the kata and gvisor runtimes."""

    # A fixed, unprivileged identity: the workspace's files belong to it across restarts.
    uid: Annotated[Int, Field(ge=1, le=2**31 - 1)] = 1000
    gid: Annotated[Int, Field(ge=1, le=2**31 - 1)] = 1000
    # The root filesystem is read-only; /tmp is a size-limited scratch space.
    tmp_size: Bytes = Decimal(2**30)
    ephemeral_storage: Bytes = Decimal(2 * 2**30)
    # What the runtime itself costs beyond the containers, when its RuntimeClass doesn't
    # declare it as overhead (Kata: about 250m and 130 to 320 MiB). It is added to the
    # container's requests and limits, so the sandbox still gets the size it asked for.
    overhead: Overhead | None = None


DEFAULT_RUNTIME_CLASS = {"kata": "kata-clh", "gvisor": "gvisor"}
# The role the ComputePlane chart requires of at least one node group: its ingress-nginx
# controller schedules only onto such nodes.
INGRESS_ROLE = "ingress-nginx"


class NodeGroup(Model):
    """One worker group of a dedicated ComputePlane, as its chart's nodeGroups entry."""

    instance_type: DnsSubdomain = "u1.medium"
    disk_size: Bytes = Decimal(20 * 2**30)
    min_replicas: Annotated[Int, Field(ge=0, le=100)] = 0
    max_replicas: Annotated[Int, Field(ge=1, le=100)] = 1
    roles: tuple[DnsSubdomain, ...] = ()
    storage_class: DnsSubdomain | None = None

    @model_validator(mode="after")
    def _min_within_max(self) -> "NodeGroup":
        if self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas is larger than maxReplicas")
        return self


# Kamaji names a cluster's admin kubeconfig Secret `<cluster>-admin-kubeconfig`.
KAMAJI_SECRET = "-admin-kubeconfig"  # noqa: S105  # a name suffix, not a secret


def _kamaji_secret(value: str) -> str:
    if not value.endswith(KAMAJI_SECRET):
        raise ValueError(
            f"{value!r} must end in {KAMAJI_SECRET}: Kamaji names a cluster's admin kubeconfig "
            f"<cluster>{KAMAJI_SECRET}, and that cluster's name selects the plane's worker VMs"
        )
    return value


class ComputePlaneOptions(Model):
    """Where a ComputePlane placement puts sandboxes, and what the plane offers them."""

    # SharedComputePlane: the tenant's existing ComputePlane, in the tenant's namespace.
    name: DnsLabel | None = None
    # DedicatedComputePlane: the worker groups of the plane composed for each sandbox.
    node_groups: dict[DnsLabel, NodeGroup] = Field(default_factory=dict)
    # Whether the plane runs the agent-sandbox controller: the workload is then a Sandbox,
    # else a one-replica StatefulSet.
    agent_sandbox: Bool = False
    # The admin kubeconfig Secret is `<plane>` + this suffix, in the tenant's namespace; only
    # provider-kubernetes reads it (the function checks that it exists, by name).
    kubeconfig_secret_suffix: Annotated[
        str,
        Field(pattern=r"^-[a-z0-9-]*[a-z0-9]$", max_length=40),
        AfterValidator(_kamaji_secret),
    ] = "-cluster-admin-kubeconfig"  # noqa: S105  # a name suffix, not a secret
    kubeconfig_key: Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)] = (
        "super-admin.svc"
    )

    def cluster(self, plane: str) -> str:
        """The plane's Kamaji cluster, which its admin kubeconfig Secret is named after."""
        return plane + self.kubeconfig_secret_suffix.removesuffix(KAMAJI_SECRET)


class Preset(Model):
    description: str = ""
    runtime: Runtime = "kubevirt"
    placement: Placement = "Namespace"
    resources: ResourceBounds
    storage_class: DnsSubdomain
    volume_snapshot_class: DnsSubdomain
    runtime_class_name: DnsSubdomain | None = None
    # Cluster DNS would let a sandbox enumerate in-cluster services; only for presets that
    # must resolve in-cluster names (the pod then uses kube-dns instead of network.resolvers).
    cluster_dns: Bool = False
    # Take snapshots only of a suspended sandbox, so every one is consistent on disk; entries
    # added while it runs wait until it is suspended.
    clean_snapshots_only: Bool = False
    # How far ahead of now spec.lifetime.suspendAt may be; none means no limit.
    max_lifetime: Duration | None = None
    kubevirt: KubeVirtOptions = KubeVirtOptions()
    pod: PodOptions = PodOptions()
    scheduling: Scheduling = Scheduling()
    compute_plane: ComputePlaneOptions | None = None
    # SandboxNamespace: what the namespace's quota allows beyond the sandbox's own size, for
    # what runs beside it there (a RuntimeClass's pod overhead, KubeVirt's per-VM overhead and
    # CDI's clone workers).
    quota_headroom: Overhead = Overhead(cpu="1", memory="1Gi")

    @model_validator(mode="after")
    def _placed_consistently(self) -> "Preset":
        plane = self.compute_plane
        if self.placement in {"Namespace", "SandboxNamespace"}:
            self._on_the_host()
            return self
        if self.runtime == "kubevirt":
            raise ValueError(
                f"placement {self.placement} runs pods inside the plane: use runtime "
                "container, gvisor or kata"
            )
        if plane is None:
            raise ValueError(f"placement {self.placement} needs computePlane")
        if self.placement == "SharedComputePlane":
            if plane.name is None or plane.node_groups:
                raise ValueError(
                    "a SharedComputePlane preset names the tenant's plane (computePlane.name) "
                    "and sets no nodeGroups"
                )
            return self
        if plane.name is not None:
            raise ValueError(
                "a DedicatedComputePlane preset composes its plane: drop computePlane.name"
            )
        if not any(INGRESS_ROLE in g.roles for g in plane.node_groups.values()):
            raise ValueError(
                f"computePlane.nodeGroups needs a group with roles [{INGRESS_ROLE}]: the "
                "ComputePlane chart requires one"
            )
        return self

    def _on_the_host(self) -> None:
        if self.compute_plane is not None:
            raise ValueError("computePlane is only for the ComputePlane placements")
        if self.runtime == "container":
            raise ValueError(
                "runtime container is only for the ComputePlane placements, where the "
                "plane's own virtual machines isolate it"
            )
        if self.placement != "SandboxNamespace":
            return
        # KubeVirt runs VMs in Pod Security "restricted" namespaces, but not with passt.
        if self.kubevirt.network_binding == "passt":
            raise ValueError(
                "kubevirt.networkBinding passt needs a privileged namespace, and a "
                "SandboxNamespace is Pod Security restricted: use masquerade"
            )
        # The namespace's quota is sized from the sandbox's size, which an instancetype overrides.
        if self.runtime == "kubevirt" and self.kubevirt.instancetype is not None:
            raise ValueError(
                "kubevirt.instancetype sizes the VM past the sandbox's resources, which size a "
                "SandboxNamespace's quota: leave it unset and set resources instead"
            )

    @property
    def runtime_class(self) -> str | None:
        return self.runtime_class_name or DEFAULT_RUNTIME_CLASS.get(self.runtime)


class KubeVirtImage(Model):
    """Where a golden disk comes from; exactly one source."""

    pvc: Reference | None = None
    data_source: Reference | None = None
    snapshot: Reference | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "KubeVirtImage":
        if sum(s is not None for s in (self.pvc, self.data_source, self.snapshot)) != 1:
            raise ValueError("set exactly one of pvc, dataSource and snapshot")
        return self


class Image(Model):
    description: str = ""
    kubevirt: KubeVirtImage | None = None
    oci: Annotated[str, AfterValidator(_pinned)] | None = None  # for pod runtimes
    # The smallest workspace disk this image fits on; a smaller request is refused.
    min_disk: Bytes | None = None


class Gateway(Model):
    namespace: DnsLabel
    pod_labels: Annotated[dict[LabelKey, LabelValue], Field(min_length=1)]
    agent_port: Port = 49983


# What a pod sandbox's user can write: the workspace (mount, working directory and HOME), the
# pod's /tmp, and the usual writable places of an image. The agent's interpreter is never there.
USER_WRITABLE = ("/workspace", "/home", "/tmp", "/var/tmp", "/dev/shm")  # noqa: S108  # to refuse
DEFAULT_PYTHON = "/usr/bin/python3"
# Absolute, and plain: no empty, '.' or '..' part that would make two spellings of one file.
_PLAIN_PATH = re.compile(r"(/(\.?[A-Za-z0-9_+-][A-Za-z0-9._+-]*|\.\.[A-Za-z0-9._+-]+))+")


def under(path: str, prefixes: tuple[str, ...]) -> str | None:
    """The first of `prefixes` that is `path` or one of its parents."""
    return next((p for p in prefixes if path == p or path.startswith(f"{p}/")), None)


def _interpreter(value: str) -> str:
    if not _PLAIN_PATH.fullmatch(value):
        raise ValueError(
            f"{value!r} must be a plain absolute path such as {DEFAULT_PYTHON} (letters, digits "
            "and ._+-, no empty, '.' or '..' part); a bare name is looked up on the image's PATH"
        )
    if found := under(value, USER_WRITABLE):
        raise ValueError(
            f"{value!r} is under {found}, which the sandbox's user can write; name the image's "
            f"own interpreter, such as {DEFAULT_PYTHON}"
        )
    return value


Interpreter = Annotated[str, Field(max_length=255), AfterValidator(_interpreter)]


class AgentDelivery(Model):
    """Where sandboxes get the in-sandbox agent from: one image, two layouts.

    `/disk/agent.img` is an ext4 filesystem a VM attaches as a read-only disk (KubeVirt's
    containerDisk convention); `/opt/workspace-sandbox-agent/` is the same bundle, which an init
    container copies into a pod. `agent/Dockerfile` builds it.
    """

    image: Annotated[str, AfterValidator(_pinned)]
    # The pod image's CPython (3.11 or newer) that runs the copied bundle, by absolute path: a
    # bare `python3` would be found on the image's PATH, whose first directories may be the
    # user's. A VM's agent runs on the guest's python3, which systemd finds on its own PATH.
    python: Interpreter = DEFAULT_PYTHON


class SiteAddresses(Model):
    """Addresses of this site that Cilium sees as `world`, so only a CIDR deny keeps them out.

    Each list is None until the platform engineer states it; [] states that there are none.
    """

    # A control-plane VIP (kube-vip, Talos) is neither a node address nor an apiserver endpoint.
    control_plane_cidrs: tuple[Cidr, ...] | None = None
    # Node addresses Cilium does not list: further public addresses, other interfaces.
    node_cidrs: tuple[Cidr, ...] | None = None
    # The cluster's LoadBalancer and ingress addresses: `world` from inside a ComputePlane.
    load_balancer_cidrs: tuple[Cidr, ...] | None = None
    # Network-specific NAT64 prefixes: <prefix>::a9fe:a9fe is the metadata service.
    nat64_prefixes: tuple[Nat64Prefix, ...] | None = None

    def unstated(self) -> list[str]:
        """The fields not stated yet, by their input names."""
        return [
            info.alias or name
            for name, info in type(self).model_fields.items()
            if getattr(self, name) is None
        ]


class PlatformNetwork(Model):
    # Public resolvers by default (Quad9, Swiss): cluster DNS would reveal in-cluster names.
    resolvers: Annotated[tuple[IpAddress, ...], Field(min_length=1, max_length=3)] = (
        IPv4Address("9.9.9.9"),
        IPv4Address("149.112.112.112"),
    )
    site_deny_cidrs: tuple[Cidr, ...] = ()
    site_addresses: SiteAddresses = SiteAddresses()
    cilium: Bool = True
    # Cozystack's tenant baseline allows every pod egress to `world`, and allows add up: an
    # allow-list must then be enforced with denies, which Cilium can only write by address.
    namespaces_allow_internet: Bool = True
    # Approved egress curated once: tenants name a bundle in spec.network.allow[].bundle.
    egress_bundles: dict[
        DnsLabel,
        Annotated[tuple[Destination, ...], Field(min_length=1, max_length=MAX_ALLOW_RULES)],
    ] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _bundles_allowed(self) -> "PlatformNetwork":
        """A bundle's addresses pass the checks a tenant's would, so no tenant is blamed."""
        nat64 = self.site_addresses.nat64_prefixes or ()
        for name, entries in self.egress_bundles.items():
            cidrs = [(k, e.cidr) for k, e in enumerate(entries) if e.cidr is not None]
            for k, cidr in cidrs:
                why = refusal(cidr, self.denied_cidrs, nat64)
                if why is not None:
                    raise FieldError(f"input.network.egressBundles.{name}[{k}].cidr", why)
            overlap = first_overlap([cidr for _, cidr in cidrs])
            if overlap is not None:
                (earlier, first), (later, second) = cidrs[overlap[0]], cidrs[overlap[1]]
                raise FieldError(
                    f"input.network.egressBundles.{name}[{later}].cidr",
                    f"{ip_text(second)} overlaps {name}[{earlier}] ({ip_text(first)}); merge them",
                )
        return self

    def bundle(self, name: str, path: str) -> tuple[Destination, ...]:
        try:
            return self.egress_bundles[name]
        except KeyError:
            known = ", ".join(sorted(self.egress_bundles))
            fix = f"use one of: {known}" if known else "this platform offers none"
            raise FieldError(path, f"{name!r} is not an egress bundle; {fix}") from None

    @model_validator(mode="after")
    def _resolvers_reachable(self) -> "PlatformNetwork":
        for i, resolver in enumerate(self.resolvers):
            hit = blocked(ip_network(resolver), self.denied_cidrs)
            if hit is not None:
                raise FieldError(
                    f"input.network.resolvers[{i}]",
                    f"{ip_text(resolver)} is in the blocked range {ip_text(hit[0])} "
                    f"({hit[1]}), so sandboxes could not reach it; use public resolvers, "
                    "or a preset with clusterDns",
                )
        return self

    @property
    def denied_cidrs(self) -> tuple[Network, ...]:
        """Every site range sandboxes are denied, on top of the pinned lists."""
        return _denied(self.site_addresses, self.site_deny_cidrs, load_balancers=True)

    @property
    def worker_denied_cidrs(self) -> tuple[Network, ...]:
        """The same without the load balancers.

        A plane's workers reach their control plane through the cluster's ingress.
        """
        return _denied(self.site_addresses, self.site_deny_cidrs, load_balancers=False)

    @property
    def unstated_warning(self) -> str | None:
        """What the platform engineer is told while the site's own addresses are not stated."""
        return _unstated_warning(self.site_addresses)


@lru_cache(maxsize=32)
def _denied(
    site: SiteAddresses, deny: tuple[Network, ...], *, load_balancers: bool
) -> tuple[Network, ...]:
    stated = (
        *(site.control_plane_cidrs or ()),
        *(site.node_cidrs or ()),
        *((site.load_balancer_cidrs or ()) if load_balancers else ()),
    )
    # Through NAT64, every denied IPv4 range (the load balancers' included) is denied too.
    v4 = tuple(
        n for n in (*deny, *stated, *(site.load_balancer_cidrs or ())) if isinstance(n, IPv4Network)
    )
    nat64 = nat64_denies(site.nat64_prefixes or (), v4)
    found: dict[Network, None] = dict.fromkeys((*deny, *stated, *nat64))
    return tuple(found)


@lru_cache(maxsize=32)
def _unstated_warning(site: SiteAddresses) -> str | None:
    unstated = site.unstated()
    if not unstated:
        return None
    names = unstated[0] if len(unstated) == 1 else f"{', '.join(unstated[:-1])} and {unstated[-1]}"
    verb = "is" if len(unstated) == 1 else "are"
    return (
        f"input.network.siteAddresses: {names} {verb} not stated, so sandboxes may reach "
        "addresses of this site that Cilium sees as the internet (a control-plane VIP, node "
        "addresses it does not list, the cluster's load balancers from a ComputePlane, the "
        "metadata service through a NAT64 prefix); list them, or [] where there are none"
    )


class DiskExpansion(Model):
    """How a VM's workspace disk grows.

    CDI never changes a DataVolume once created, so its PVC is patched through
    provider-kubernetes, with this ClusterProviderConfig's identity.
    """

    cluster_provider_config: DnsSubdomain


class SandboxNamespaces(Model):
    """How the SandboxNamespace placement writes into the namespaces it gives sandboxes.

    Every object there is a provider-kubernetes Object using this ClusterProviderConfig, whose
    identity the install's admission policies confine to those namespaces.
    """

    cluster_provider_config: DnsSubdomain = "workspace-sandbox-namespaces"


class ComputePlanes(Model):
    """How a DedicatedComputePlane preset creates each sandbox's ComputePlane.

    Cozystack's API server keeps no owner references on its applications, so the plane can't
    be composed directly (it would outlive its sandbox): it is a provider-kubernetes Object
    using this ClusterProviderConfig, whose identity the install's RBAC and admission policies
    confine to ComputePlanes in the Object's own namespace.
    """

    cluster_provider_config: DnsSubdomain = "workspace-sandbox-planes"


class SandboxPlatform(Model):
    api_version: Literal["sandbox.fn.cozystack.io/v1beta1"]
    kind: Literal["SandboxPlatform"]
    metadata: dict[str, object] | None = None
    default_preset: DnsLabel = "standard"
    presets: Annotated[dict[DnsLabel, Preset], Field(min_length=1)]
    images: Annotated[dict[Annotated[str, Field(max_length=63)], Image], Field(min_length=1)]
    gateway: Gateway
    # None: VMs get no agent (a warning says so), and pods run their image's own
    # (compose/agent.py's IMAGE_LAUNCHER).
    agent: AgentDelivery | None = None
    network: PlatformNetwork = PlatformNetwork()
    disk_expansion: DiskExpansion | None = None
    sandbox_namespaces: SandboxNamespaces = SandboxNamespaces()
    compute_planes: ComputePlanes = ComputePlanes()

    @model_validator(mode="after")
    def _default_preset_offered(self) -> "SandboxPlatform":
        if self.default_preset not in self.presets:
            raise ValueError(f"defaultPreset {self.default_preset!r} is not one of the presets")
        return self

    def preset(self, name: str | None) -> tuple[str, Preset]:
        name = name or self.default_preset
        try:
            return name, self.presets[name]
        except KeyError:
            offered = ", ".join(sorted(self.presets))
            raise FieldError(
                "spec.preset", f"{name!r} is not offered; use one of: {offered}"
            ) from None

    def image(self, name: str) -> Image:
        try:
            return self.images[name]
        except KeyError:
            offered = ", ".join(sorted(self.images))
            raise FieldError(
                "spec.image", f"{name!r} is not in the catalog; use one of: {offered}"
            ) from None
