"""The tenant's WorkspaceSandbox, mirroring apis/workspacesandbox/definition.yaml."""

import base64
import binascii
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, model_validator

from function.model import Model
from function.model.names import DnsLabel, DnsSubdomain, Fqdn, PortName, SnapshotName
from function.model.types import Cidr, Cpu, Port, TenantBytes, Time

MAX_ALLOW_RULES = 64
MAX_RULE_PORTS = 16
MAX_PORTS = 16
MAX_SNAPSHOTS = 32
MAX_SSH_KEYS = 8

_SSH_KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)
# A comment is free text for humans; keep it printable and short so it can't smuggle lines.
_SSH_KEY = re.compile(
    r"(?P<type>[a-z0-9@.-]+) (?P<body>[A-Za-z0-9+/]+={0,2})(?: (?P<comment>[ -~]{1,100}))?"
)


def _ssh_key(value: str) -> str:
    match = _SSH_KEY.fullmatch(value)
    if match is None or match["type"] not in _SSH_KEY_TYPES:
        raise ValueError(
            "must be one OpenSSH public key line: '<type> <base64> [comment]', with type one of "
            + ", ".join(_SSH_KEY_TYPES)
        )
    try:
        blob = base64.b64decode(match["body"], validate=True)
    except binascii.Error:
        raise ValueError("the key's base64 body is malformed") from None
    # The blob starts with its own length-prefixed type name; a mismatch is a pasted-wrong key.
    size = int.from_bytes(blob[:4], "big")
    if blob[4 : 4 + size].decode("ascii", "replace") != match["type"]:
        raise ValueError(f"the key's body is not a {match['type']} key")
    return value


SshKey = Annotated[str, Field(max_length=2048), AfterValidator(_ssh_key)]


class Resources(Model):
    cpu: Cpu | None = None
    memory: TenantBytes | None = None
    disk: TenantBytes | None = None


class Lifetime(Model):
    suspend_at: Time | None = None


class Destination(Model):
    """One destination, by name or by address, with its ports.

    A bundle's entry, and what each tenant allow entry stands for once bundles are expanded.
    """

    fqdn: Fqdn | None = None
    cidr: Cidr | None = None  # strict parsing: host bits are an error
    ports: tuple[Port, ...] = Field(default=(), max_length=MAX_RULE_PORTS)

    @model_validator(mode="after")
    def _one_destination(self) -> "Destination":
        if (self.fqdn is None) == (self.cidr is None):
            raise ValueError("set exactly one of fqdn and cidr")
        return self


class AllowRule(Model):
    fqdn: Fqdn | None = None
    cidr: Cidr | None = None  # strict parsing: host bits are an error
    # A named bundle of destinations from the platform's input.network.egressBundles.
    bundle: DnsLabel | None = None
    ports: tuple[Port, ...] = Field(default=(), max_length=MAX_RULE_PORTS)

    @model_validator(mode="after")
    def _one_destination(self) -> "AllowRule":
        if sum(v is not None for v in (self.fqdn, self.cidr, self.bundle)) != 1:
            raise ValueError("set exactly one of fqdn, cidr and bundle")
        if self.bundle is not None and self.ports:
            raise ValueError("a bundle's entries carry their own ports; leave ports out")
        return self


class Network(Model):
    egress: Literal["Internet", "Allowlist", "None"] = "Internet"
    allow: tuple[AllowRule, ...] = Field(default=(), max_length=MAX_ALLOW_RULES)

    @model_validator(mode="after")
    def _allow_needs_allowlist(self) -> "Network":
        if self.allow and self.egress != "Allowlist":
            raise ValueError("allow entries are only used with egress: Allowlist")
        return self


class ServicePort(Model):
    name: PortName
    port: Port


class Ssh(Model):
    authorized_keys: tuple[SshKey, ...] = Field(default=(), max_length=MAX_SSH_KEYS)


class Snapshot(Model):
    name: SnapshotName


def _same_namespace(value: object) -> object:
    if isinstance(value, str) and "/" in value:
        raise ValueError(
            f"{value!r} names another namespace; only VolumeSnapshots in the sandbox's own "
            "namespace can be restored"
        )
    return value


class RestoreFrom(Model):
    snapshot: Annotated[DnsSubdomain, BeforeValidator(_same_namespace)]


def _unique(key: str, what: str) -> AfterValidator:
    def check(items: tuple[Any, ...]) -> tuple[Any, ...]:
        seen: set[object] = set()
        for item in items:
            value = getattr(item, key)
            if value in seen:
                raise ValueError(f"{what} {value!r} is listed twice")
            seen.add(value)
        return items

    return AfterValidator(check)


class WorkspaceSandboxSpec(Model):
    preset: DnsLabel | None = None  # a key of SandboxPlatform.presets; checked in render
    image: Annotated[str, Field(min_length=1, max_length=63)]  # a key of the image catalog
    resources: Resources = Resources()
    power: Literal["Running", "Suspended"] = "Running"
    lifetime: Lifetime = Lifetime()
    network: Network = Network()
    ports: Annotated[
        tuple[ServicePort, ...],
        Field(max_length=MAX_PORTS),
        _unique("name", "port name"),
        _unique("port", "port"),
    ] = ()
    ssh: Ssh = Ssh()
    snapshots: Annotated[
        tuple[Snapshot, ...], Field(max_length=MAX_SNAPSHOTS), _unique("name", "snapshot")
    ] = ()
    restore_from: RestoreFrom | None = None
    # Crossplane adds spec.crossplane to every v2 XR; it isn't the tenant's input.
    crossplane: dict[str, Any] | None = Field(default=None, exclude=True)


class Metadata(Model):
    # The API server adds uid, generation, managedFields and more; only these matter here.
    model_config = ConfigDict(extra="ignore")

    name: Annotated[DnsSubdomain, Field(min_length=1)]
    namespace: Annotated[DnsLabel, Field(min_length=1)]
    uid: str | None = None


class WorkspaceSandbox(Model):
    metadata: Metadata
    spec: WorkspaceSandboxSpec
