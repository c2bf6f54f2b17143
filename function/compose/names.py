"""Identity labels, selectors and child names, all derived from the XR's identity.

A WorkspaceSandbox name is a DNS-1123 subdomain of up to 253 characters and may contain dots or
start with a digit. Services need DNS-1035 labels and label values stop at 63 characters, so a
name that doesn't fit is shortened and given a hash of the full name: still deterministic, still
unique, and recognisable by its prefix.
"""

import hashlib
import re

from function.model.spec import WorkspaceSandbox

WORKSPACE_LABEL = "sandbox.cozystack.io/workspace"
MANAGED_BY = {"app.kubernetes.io/managed-by": "function-workspace-sandbox"}

_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_HASH_LEN = 8
_MAX = 63


def dns_label(*parts: str) -> str:
    """A DNS-1035 label for the joined parts: as is when it fits, else prefix + hash."""
    full = "-".join(parts)
    if len(full) <= _MAX and _DNS_1035.fullmatch(full):
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:_HASH_LEN]
    cleaned = re.sub(r"[^a-z0-9-]+", "-", full.lower())
    prefix = cleaned[: _MAX - _HASH_LEN - 1].strip("-")
    if not prefix or not prefix[0].isalpha():
        prefix = f"ws-{prefix}"[: _MAX - _HASH_LEN - 1].rstrip("-")
    return f"{prefix}-{digest}"


def identity_labels(ws: WorkspaceSandbox) -> dict[str, str]:
    """The labels that select this sandbox's pod: one key, set only by us."""
    return {WORKSPACE_LABEL: dns_label(ws.metadata.name)}


def labels(ws: WorkspaceSandbox) -> dict[str, str]:
    """Labels for every composed object's own metadata."""
    return {**MANAGED_BY, **identity_labels(ws)}


def sandbox_name(ws: WorkspaceSandbox) -> str:
    """The VM (or Sandbox) and its Service: the name tenants see in `kubectl get`."""
    return dns_label(ws.metadata.name)


def workspace_volume_name(ws: WorkspaceSandbox) -> str:
    return dns_label(ws.metadata.name, "workspace")


def snapshot_name(ws: WorkspaceSandbox, snapshot: str) -> str:
    return dns_label(ws.metadata.name, snapshot)


# The agent-sandbox controller names a claim template's PVC `<template>-<sandbox>`.
CLAIM_TEMPLATE = "workspace"


def claim_name(ws: WorkspaceSandbox, *, templated: bool = False) -> str:
    """The workspace PVC: the DataVolume's or our own; an older Sandbox's templated claim."""
    if templated:
        return f"{CLAIM_TEMPLATE}-{sandbox_name(ws)}"
    return workspace_volume_name(ws)


def plane_name(ws: WorkspaceSandbox) -> str:
    """A dedicated ComputePlane: one per sandbox, named after it."""
    return dns_label(ws.metadata.name, "plane")


def plane_namespace(ws: WorkspaceSandbox) -> str:
    """The sandbox's own namespace inside a ComputePlane."""
    return dns_label("sandbox", ws.metadata.name)


def provider_config_name(ws: WorkspaceSandbox) -> str:
    return dns_label(ws.metadata.name, "plane-access")


def object_name(ws: WorkspaceSandbox, key: str) -> str:
    """The provider-kubernetes Object that carries one composed resource."""
    return dns_label(ws.metadata.name, key)


def service_account_name(ws: WorkspaceSandbox) -> str:
    return dns_label(ws.metadata.name, "sandbox")


EGRESS_LABEL = "sandbox.cozystack.io/egress"
"""On the sandbox's pod: its egress mode, so that the guard denies what the mode denies."""


def pod_labels(ws: WorkspaceSandbox) -> dict[str, str]:
    """The labels of the sandbox's pod (or VM template): its identity and its egress mode.

    Only the identity selects it; the egress mode only ever adds the guard's denies (a pod
    that loses the label is back to the guard's Internet-mode denies, under its own policy).
    """
    return {**identity_labels(ws), EGRESS_LABEL: ws.spec.network.egress}
