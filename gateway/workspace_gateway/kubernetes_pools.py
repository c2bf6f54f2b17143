"""Warm pools on a cluster, as plain decisions over WorkspaceSandbox objects (no I/O here).

A pool member is a WorkspaceSandbox made ahead in a tenant's namespace, with a random sandbox
ID like any other, labelled `gateway.sandbox.cozystack.io/pool: member` and with its template
on `gateway.sandbox.cozystack.io/pool-template`. It is the tenant's object, counted by its
quota, visible to `kubectl get wss -l gateway.sandbox.cozystack.io/pool=member`, but never to
the E2B API (get, list, the data plane) until a create claims it by moving that label to
`handed-out` at the resourceVersion it read: two replicas can't both win that write.

A member is marked ready (`gateway.sandbox.cozystack.io/pool-ready`) once its agent answered
`/health` and, for the `suspended` temperature, once it was told to suspend: only ready members
are handed out. It never receives `/init` before hand-out, so it has no token and no env vars;
what its first boot wrote is the image's and the platform's, the same for every member.

Which namespaces get pools: those where the gateway is in use, that is holding one of its
sandboxes (handed out or made cold), or a member younger than the maximum age. The gateway can
neither list tenant namespaces nor their ConfigMaps (and should not), and under Kubernetes
tokens it has no key per namespace; its own watch already shows where it is used, at no cost.
A namespace that never used the gateway pays for no pool, and one that stopped pays for at most
a maximum age's worth of members past its last sandbox.

A tenant lowers its own pools with the ConfigMap `sandbox-gateway-pools` in its namespace,
`data: {<template>: "<size>"}`, which the gateway reads with `get` on that one name: the size
used is the smaller of the platform's and the tenant's, so a tenant can never raise it.
"""

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from workspace_gateway.templates import Template

POOL_LABEL = "gateway.sandbox.cozystack.io/pool"
POOL_TEMPLATE_LABEL = "gateway.sandbox.cozystack.io/pool-template"
MEMBER, HANDED_OUT = "member", "handed-out"
READY_NOTE = "gateway.sandbox.cozystack.io/pool-ready"
MADE_NOTE = "gateway.sandbox.cozystack.io/pool-made-at"
LIMITS_CONFIGMAP = "sandbox-gateway-pools"
MAX_AGE = timedelta(hours=24)  # a member older than this is replaced, so images stay fresh


def labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def notes(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def is_member(obj: Mapping[str, Any]) -> bool:
    """Not yet handed out: the E2B API answers for it as for an unknown sandbox."""
    return labels(obj).get(POOL_LABEL) == MEMBER


def is_ready(obj: Mapping[str, Any]) -> bool:
    return is_member(obj) and notes(obj).get(READY_NOTE) == "true"


def made_at(obj: Mapping[str, Any], default: datetime) -> datetime:
    try:
        return datetime.fromisoformat(notes(obj).get(MADE_NOTE) or "")
    except ValueError:
        return default


def tenant_sizes(data: Mapping[str, Any] | None) -> dict[str, int]:
    """The sizes a tenant's ConfigMap asks for; a value that is not a whole number is 0.

    The tenant wrote it to lower a pool, so what can't be read lowers it all the way: never
    a reason to keep (let alone raise) what the platform set.
    """
    out: dict[str, int] = {}
    for name, value in (data or {}).items():
        size = 0
        with contextlib.suppress(TypeError, ValueError):
            size = max(0, int(str(value).strip()))
        out[str(name)] = size
    return out


def size_of(name: str, template: Template | None, lowered: Mapping[str, int]) -> int:
    """The platform's size, or the tenant's when smaller."""
    if template is None:
        return 0
    return min(template.pool.size, lowered.get(name, template.pool.size))


def pooled_namespaces(objects: Iterable[Mapping[str, Any]], now: datetime) -> set[str]:
    """Where the gateway is in use: a sandbox of its own, or a member not yet too old."""
    out = set()
    for obj in objects:
        namespace = (obj.get("metadata") or {}).get("namespace")
        if not isinstance(namespace, str):
            continue
        if not is_member(obj) or now - made_at(obj, now - MAX_AGE) < MAX_AGE:
            out.add(namespace)
    return out


TEMPLATE_FIELDS = ("image", "preset", "resources")


def stale(obj: Mapping[str, Any], template: Template | None) -> bool:
    """Made from another version of its template (or one no longer offered).

    Only the fields a template sets are compared: Crossplane and the platform add their own to
    an XR's spec (`spec.crossplane`, defaults), which must not make every member look stale.
    """
    if template is None:
        return True
    spec, wanted = obj.get("spec") or {}, template.spec()
    return any(spec.get(k) != wanted.get(k) for k in TEMPLATE_FIELDS)


@dataclass
class Plan:
    """One template's pool in one namespace: members to delete, how many to make."""

    remove: list[Mapping[str, Any]] = field(default_factory=list)
    make: int = 0
    ready: int = 0


def plan(
    members: Iterable[Mapping[str, Any]],
    template: Template | None,
    size: int,
    now: datetime,
    boot: timedelta,
) -> Plan:
    """Expired, stale and stuck members go; then the oldest surplus; then top up to `size`.

    A member not ready after `boot` (twice the create timeout, say) failed to boot. Surplus
    goes oldest first, ready or not: the younger ones have the fresher image.
    """
    out = Plan()
    kept = []
    for obj in members:
        made = made_at(obj, now - MAX_AGE)
        age = now - made
        if age >= MAX_AGE or stale(obj, template) or (not is_ready(obj) and age >= boot):
            out.remove.append(obj)
        else:
            kept.append((made, obj))
    kept.sort(key=lambda pair: pair[0])
    surplus = max(0, len(kept) - size)
    out.remove.extend(obj for _, obj in kept[:surplus])
    kept = kept[surplus:]
    out.ready = sum(1 for _, obj in kept if is_ready(obj))
    out.make = max(0, size - len(kept))
    return out
