"""The platform's SandboxPlatform function input, mirroring package/input/.

Crossplane does not validate a function's input: it is an opaque object nested in a
Composition. So this model forbids unknown fields, and every problem becomes a FATAL result
whose path starts with `input.`, pointing the platform engineer at the field to fix.
"""

import re
from decimal import Decimal
from ipaddress import IPv4Address, ip_network
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from function.errors import FieldError
from function.model import Model
from function.model.blocklist import blocked
from function.model.names import DnsLabel, DnsSubdomain, LabelKey, LabelValue
from function.model.types import Bool, Bytes, Cidr, Cpu, Duration, Int, IpAddress, Port

Runtime = Literal["kubevirt", "kata", "gvisor"]
Placement = Literal["Namespace", "SharedComputePlane", "DedicatedComputePlane"]

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


class PlatformNetwork(Model):
    # Public resolvers by default (Quad9, Swiss): cluster DNS would reveal in-cluster names.
    resolvers: Annotated[tuple[IpAddress, ...], Field(min_length=1, max_length=3)] = (
        IPv4Address("9.9.9.9"),
        IPv4Address("149.112.112.112"),
    )
    site_deny_cidrs: tuple[Cidr, ...] = ()
    cilium: Bool = True
    # Cozystack's tenant baseline allows every pod egress to `world`, and allows add up: an
    # allow-list must then be enforced with denies, which Cilium can only write by address.
    namespaces_allow_internet: Bool = True

    @model_validator(mode="after")
    def _resolvers_reachable(self) -> "PlatformNetwork":
        for i, resolver in enumerate(self.resolvers):
            hit = blocked(ip_network(resolver), self.site_deny_cidrs)
            if hit is not None:
                raise FieldError(
                    f"input.network.resolvers[{i}]",
                    f"{resolver} is in the blocked range {hit[0]} ({hit[1]}), so sandboxes "
                    "could not reach it; use public resolvers, or a preset with clusterDns",
                )
        return self


class SandboxPlatform(Model):
    api_version: Literal["sandbox.fn.cozystack.io/v1beta1"]
    kind: Literal["SandboxPlatform"]
    metadata: dict[str, object] | None = None
    default_preset: DnsLabel = "standard"
    presets: Annotated[dict[DnsLabel, Preset], Field(min_length=1)]
    images: Annotated[dict[Annotated[str, Field(max_length=63)], Image], Field(min_length=1)]
    gateway: Gateway
    network: PlatformNetwork = PlatformNetwork()

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
