"""Child names, identity labels and selectors, derived from the XR's identity.

An existing child keeps the name it has. Crossplane applies a composed resource under the name
of the object it observes for that composition-resource name, so a rename would not even reach
the API server; but references to the child (a VM's disk, a snapshot's source, the Service in
`status.endpoint`, the label the policies select) must name that object. `resolve` therefore
reads every observed child's name (and, for a provider-kubernetes Object, the name of the
object it carries), and `ownership.check` refuses one this sandbox does not control. A child
that is not observed yet gets a new name, from `composed_name`:

    composed_name(readable, xr, role, *detail) = slug(readable) + "-" + h(xr, role, *detail)

- h is the first 26 characters of the lowercase base32 of SHA-256 over the NUL-joined parts,
  after a fixed domain string: 130 bits, in `[a-z2-7]`. The XR name, role and detail (a
  snapshot name, a composition-resource name) are DNS names or fixed words and never contain
  NUL, so splitting at NUL gives the parts back: the hashed string is an injective encoding of
  (xr, role, detail).
- slug is `readable` lowercased, every run of other characters turned into one '-', shortened
  to 25 characters and started with a letter (`ws-` in front when it isn't): only for people.

So every new name is a DNS-1035 label of at most 52 characters (a Service name, a pod's
hostname, a label value, a Helm release for a ComputePlane, and room for the revision hash a
StatefulSet appends to its name in a label), and its last '-'-separated segment is exactly h,
since h contains no '-'. Two new names are equal only if their h are equal, so either they
encode the same (xr, role, detail), or their SHA-256 digests agree in 130 bits: about 2^65
hashes to find any such pair, 2^130 to match a given name. That is the injectivity: across XRs
of a namespace, across roles, and within a role (two snapshots, two Objects).

Names from before this scheme, which the sandboxes that have them keep (tests/legacy_names.py
has the old function), were the parts joined by '-' when that made a DNS-1035 label of at most
63 characters, else a prefix and '-' and 8 hex digits. A legacy hashed name ends in a segment
of 8 characters and a new name in one of 26, so they never meet. A legacy literal name is some
XR's own name (or that name, '-' and a fixed word or a snapshot name), chosen by a tenant before
this scheme existed; it equals a new name only if that XR was named after a future sandbox's
hash. Neither that, nor an object of any other software that happens to have the name, is ever
adopted: a name not yet observed is looked up first (`ownership.vacancies`), and one that
exists and isn't this sandbox's is a FATAL result.

The identity label (`sandbox.cozystack.io/workspace`) is the name of the sandbox's workload,
Service and policies, in both schemes (a legacy sandbox's is its legacy name, read from them):
two sandboxes with one identity would have Services of one name, which one namespace can't
hold, and the look-up refuses the second one. The other children are named per key: an existing
one keeps its name, a new one (a snapshot added after this scheme) gets a new name. (Of two
legacy sandboxes that wanted one name, the second never got it: whatever of it is not observed
now gets a new name, so it is no longer in the way.)
"""

import base64
import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function.compose import ownership
from function.compose.observed import dig
from function.model import Observed
from function.model.spec import WorkspaceSandbox

WORKSPACE_LABEL = "sandbox.cozystack.io/workspace"
MANAGED_BY = {"app.kubernetes.io/managed-by": "function-workspace-sandbox"}

MAX_NAME = 52
_HASH_CHARS = 26
_SLUG_CHARS = MAX_NAME - _HASH_CHARS - 1
_DOMAIN = "sandbox.cozystack.io/composed-names/v2"
_NOT_NAME = re.compile(r"[^a-z0-9]+")

# Composition-resource names whose objects' names others refer to, defined here once: the
# modules composing them take their KEY from here (tests/compose/test_names.py checks those
# that still spell it out). A key never changes: renaming one deletes its object.
VM_KEY = "vm"
SANDBOX_KEY = "sandbox"
STATEFULSET_KEY = "statefulset"
SERVICE_KEY = "service"
NETWORK_POLICY_KEY = "network-policy"
CILIUM_POLICY_KEY = "cilium-policy"
SERVICE_ACCOUNT_KEY = "service-account"
PLANE_KEY = "compute-plane"
PROVIDER_CONFIG_KEY = "plane-access"
PLANE_NAMESPACE_KEY = "plane-namespace"
SANDBOX_NAMESPACE_KEY = "sandbox-namespace"
WORKSPACE_VOLUME_KEY = "workspace-volume"
WORKSPACE_CLAIM_KEY = "workspace-claim"
SNAPSHOT_PREFIX = "snapshot-"
_WORKSPACE_KEYS = (WORKSPACE_VOLUME_KEY, WORKSPACE_CLAIM_KEY)
# The workload, its Service and its policies: each is named after the sandbox's identity, the
# workload first, since its pod carries the identity label it was started with.
_IDENTITY_KEYS = (
    VM_KEY,
    SANDBOX_KEY,
    STATEFULSET_KEY,
    SERVICE_KEY,
    NETWORK_POLICY_KEY,
    CILIUM_POLICY_KEY,
)
_OBJECT = ("kubernetes.m.crossplane.io/v1alpha1", "Object")


# Pure, and asked for the same few names many times in a render: the disk's by the VM, the
# snapshots and the status.
@functools.lru_cache(maxsize=4096)
def composed_name(readable: str, xr: str, role: str, *detail: str) -> str:
    """A new child name: a readable prefix, then 130 bits of hash over (xr, role, detail)."""
    digest = hashlib.sha256("\0".join((_DOMAIN, xr, role, *detail)).encode()).digest()
    tag = base64.b32encode(digest).decode("ascii").lower()[:_HASH_CHARS]
    slug = _NOT_NAME.sub("-", readable.lower()).strip("-")[:_SLUG_CHARS].rstrip("-")
    if not slug[:1].isalpha():
        slug = f"ws-{slug}"[:_SLUG_CHARS].rstrip("-")
    return f"{slug}-{tag}"


def new_identity(xr: str) -> str:
    """The identity of a sandbox that has no workload, Service or policy yet."""
    return composed_name(xr, xr, "sandbox")


@dataclass(frozen=True)
class Names:
    """The names observed state gives this sandbox's children; new ones get new names."""

    xr: str
    seen: Mapping[str, str]
    """Composition-resource name -> the observed object's name (an Object's: the carried one's)."""
    objects: Mapping[str, str]
    """Composition-resource name -> an observed provider-kubernetes Object's own name."""
    identity: str
    """The value of the identity label: the observed workload's or Service's name, or a new one."""


class NamedSandbox(WorkspaceSandbox):
    """A WorkspaceSandbox with the names of its children resolved from observed state."""

    names: Names


def _carried_name(obj: Mapping[str, Any]) -> Any:
    if obj.get("kind") != _OBJECT[1] or obj.get("apiVersion") != _OBJECT[0]:
        return None
    return dig(obj, "spec", "forProvider", "manifest", "metadata", "name")


def resolve(ws: WorkspaceSandbox, observed: Observed) -> NamedSandbox:
    """Read the names of the observed children, each checked to be this sandbox's."""
    seen: dict[str, str] = {}
    objects: dict[str, str] = {}
    for key, obj in observed.items():
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):
            meta = {}
        ownership.check(ws, key, obj, meta)
        name = meta.get("name")
        carried = _carried_name(obj)
        if isinstance(carried, str):
            if isinstance(name, str):
                objects[key] = name
            name = carried
        if isinstance(name, str):
            seen[key] = name
    xr = ws.metadata.name
    identity = next((seen[k] for k in _IDENTITY_KEYS if k in seen), None) or new_identity(xr)
    names = Names(xr, seen, objects, identity)
    return NamedSandbox.model_construct(metadata=ws.metadata, spec=ws.spec, names=names)


def _names(ws: WorkspaceSandbox) -> Names:
    if not isinstance(ws, NamedSandbox):
        msg = "a sandbox's child names are read from observed state: call names.resolve first"
        raise TypeError(msg)
    return ws.names


def identity_labels(ws: WorkspaceSandbox) -> dict[str, str]:
    """The labels that select this sandbox's pod: one key, set only by us."""
    return {WORKSPACE_LABEL: _names(ws).identity}


def labels(ws: WorkspaceSandbox) -> dict[str, str]:
    """Labels for every composed object's own metadata."""
    return {**MANAGED_BY, **identity_labels(ws)}


def sandbox_name(ws: WorkspaceSandbox, key: str) -> str:
    """The workload (VM, Sandbox or StatefulSet), the Service and the network policies.

    One that isn't observed yet takes the identity as its name, in either scheme, so that the
    identity stays the name of the sandbox's Service.
    """
    names = _names(ws)
    return names.seen.get(key) or names.identity


def workspace_volume_name(ws: WorkspaceSandbox) -> str:
    """The workspace disk: a DataVolume and its PVC, or a pod sandbox's own claim."""
    names = _names(ws)
    for key in _WORKSPACE_KEYS:
        if key in names.seen:
            return names.seen[key]
    return composed_name(f"{names.xr}-workspace", names.xr, "workspace")


def snapshot_name(ws: WorkspaceSandbox, snapshot: str) -> str:
    names = _names(ws)
    return names.seen.get(SNAPSHOT_PREFIX + snapshot) or composed_name(
        f"{names.xr}-{snapshot}", names.xr, "snapshot", snapshot
    )


# The agent-sandbox controller names a claim template's PVC `<template>-<sandbox>`.
CLAIM_TEMPLATE = "workspace"


def claim_name(ws: WorkspaceSandbox, *, templated: bool = False) -> str:
    """The workspace PVC: the DataVolume's or our own; an older Sandbox's templated claim."""
    if templated:
        return f"{CLAIM_TEMPLATE}-{sandbox_name(ws, SANDBOX_KEY)}"
    return workspace_volume_name(ws)


def plane_name(ws: WorkspaceSandbox) -> str:
    """A dedicated ComputePlane: one per sandbox, named after it."""
    names = _names(ws)
    return names.seen.get(PLANE_KEY) or composed_name(f"{names.xr}-plane", names.xr, "plane")


def plane_namespace(ws: WorkspaceSandbox) -> str:
    """The sandbox's own namespace inside a ComputePlane."""
    names = _names(ws)
    return names.seen.get(PLANE_NAMESPACE_KEY) or composed_name(
        f"sandbox-{names.xr}", names.xr, "plane-namespace"
    )


def sandbox_namespace(ws: WorkspaceSandbox) -> str:
    """The host namespace of its own that the SandboxNamespace placement gives a sandbox.

    Namespaces are cluster-wide, so the tenant's namespace is hashed in beside the XR's name
    (XR names are unique only within it); the readable part starts with `sandbox-`.
    """
    names = _names(ws)
    tenant = ws.metadata.namespace
    return names.seen.get(SANDBOX_NAMESPACE_KEY) or composed_name(
        f"sandbox-{tenant.removeprefix('tenant-')}-{names.xr}",
        names.xr,
        "sandbox-namespace",
        tenant,
    )


def provider_config_name(ws: WorkspaceSandbox) -> str:
    names = _names(ws)
    return names.seen.get(PROVIDER_CONFIG_KEY) or composed_name(
        f"{names.xr}-plane-access", names.xr, "plane-access"
    )


def object_name(ws: WorkspaceSandbox, key: str) -> str:
    """The provider-kubernetes Object that carries one composed resource."""
    names = _names(ws)
    return names.objects.get(key) or composed_name(f"{names.xr}-{key}", names.xr, "object", key)


def child_name(ws: WorkspaceSandbox, key: str) -> str:
    """Any other composed resource, by its composition-resource name."""
    names = _names(ws)
    return names.seen.get(key) or composed_name(f"{names.xr}-{key}", names.xr, "child", key)


def service_account_name(ws: WorkspaceSandbox) -> str:
    names = _names(ws)
    return names.seen.get(SERVICE_ACCOUNT_KEY) or composed_name(
        f"{names.xr}-sandbox", names.xr, "service-account"
    )


EGRESS_LABEL = "sandbox.cozystack.io/egress"
"""On the sandbox's pod: its egress mode, so that the guard denies what the mode denies."""


def pod_labels(ws: WorkspaceSandbox) -> dict[str, str]:
    """The labels of the sandbox's pod (or VM template): its identity and its egress mode.

    Only the identity selects it; the egress mode only ever adds the guard's denies (a pod
    that loses the label is back to the guard's Internet-mode denies, under its own policy).
    """
    return {**identity_labels(ws), EGRESS_LABEL: ws.spec.network.egress}
