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

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

from workspace_gateway import agent_client
from workspace_gateway.backend import NewSandbox, Sandbox, always
from workspace_gateway.errors import GatewayError
from workspace_gateway.kubernetes.calls import CONFLICT, NOT_FOUND, UPDATE_ATTEMPTS, Calls
from workspace_gateway.kubernetes.objects import (
    GROUP,
    MADE_NOTE,
    PLURAL,
    POOL_TEMPLATE_LABEL,
    READY_NOTE,
    VERSION,
    agent_url,
    handout_patch,
    is_member,
    is_ready,
    labels,
    member_manifest,
    notes,
    sandbox_of,
)
from workspace_gateway.kubernetes.templates import Template
from workspace_gateway.sandbox_ids import new_id

LIMITS_CONFIGMAP = "sandbox-gateway-pools"
MAX_AGE = timedelta(hours=24)  # a member older than this is replaced, so images stay fresh


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


CLAIMS = 3  # members a create tries before it creates cold: a broken pool costs little time
log = logging.getLogger("workspace_gateway")


class Pools(Calls):
    """The hand-out of warm-pool members: picked, claimed, checked and `/init`ed; and refilled."""

    REFILL_EVERY = 5.0  # likewise, but for the members it makes and the tenants' limits it reads
    LIMITS_EVERY = 30.0  # how long a tenant's pool limits are used before they are read again

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits: dict[str, tuple[float, dict[str, int]]] = {}

    async def _from_pool(self, namespace: str, request: NewSandbox) -> Sandbox | None:
        """A ready member of this namespace and template, claimed, resumed, checked and `/init`ed.

        Candidates come from the cache, in random order so that replicas rarely reach for the
        same one; the claim itself is decided by the API server. A member that fails its health
        check, or does not come back from suspension, is deleted and the next one tried, up to
        CLAIMS; None then, and the caller creates cold.
        """
        if not await self._synced():
            return None
        candidates = [
            o
            for o in self.cache.objects.values()
            if o["metadata"].get("namespace") == namespace
            and is_ready(o)
            and labels(o).get(POOL_TEMPLATE_LABEL) == request.template
        ]
        secrets.SystemRandom().shuffle(candidates)
        tried = 0
        for candidate in candidates:
            if tried >= CLAIMS:
                break
            claimed = await self._claim(candidate, request)
            if claimed is None:
                continue
            tried += 1
            sandbox_id = claimed["metadata"]["name"]
            try:
                return await self._hand_out(claimed)
            except GatewayError as e:
                log.warning("pool member %s/%s not handed out: %s", namespace, sandbox_id, e)
                with contextlib.suppress(GatewayError):
                    await self._delete(namespace, sandbox_id)
            except BaseException:
                with contextlib.suppress(GatewayError):
                    await self._delete(namespace, sandbox_id)
                raise
        return None

    async def _claim(self, member: dict[str, Any], request: NewSandbox) -> dict[str, Any] | None:
        """The member handed out to this request, or None when another took it or it is gone.

        A conflict is also the platform's routine status writes: read again, and try again as
        long as it is still a ready member.
        """
        metadata = member["metadata"]
        namespace, sandbox_id = metadata["namespace"], metadata["name"]
        obj: dict[str, Any] = member
        for _ in range(UPDATE_ATTEMPTS):
            if not is_ready(obj):
                return None
            patch = handout_patch(obj, request, datetime.now(UTC), self.settings.seed)
            try:
                claimed = await self._patch(namespace, sandbox_id, patch)
            except GatewayError as e:
                if e.status == NOT_FOUND:
                    return None
                if e.status != CONFLICT:
                    raise
                try:
                    obj = await self._get(namespace, sandbox_id, members=True)
                except GatewayError as again:
                    if again.status == NOT_FOUND:
                        return None
                    raise
                continue
            return dict(claimed)
        return None

    async def _hand_out(self, claimed: dict[str, Any]) -> Sandbox:
        """A running member answers `/health` at once; a suspended one is waited for as it resumes.

        `/init` takes the token and env vars from the claim's own write, never from the cache.
        """
        namespace, sandbox_id = claimed["metadata"]["namespace"], claimed["metadata"]["name"]
        url = agent_url(claimed, self.settings.agent_port)
        if url is not None:
            health = await agent_client.health(self.http, url)
            if health is None:
                raise GatewayError(503, "it failed its health check")
            obj, version = claimed, health.version
        else:
            obj, url, version = await self._await_agent(namespace, sandbox_id, claimed)
        await self._init(claimed, url)
        return sandbox_of(obj, self.settings, version)

    async def refill(self, leading: Callable[[], bool] = always) -> None:
        """Top every pool up to its size; remove surplus, stale, stuck and too old members.

        Only the leader calls it, and `leading` is asked before each write. The members a round
        makes boot at once, each to its agent's first `/health` (never `/init`), then, for the
        `suspended` temperature, are suspended; the round returns when they are ready.
        """
        if not leading() or not await self._synced():
            return
        now = datetime.now(UTC)
        objects = list(self.cache.objects.values())
        boots: list[Coroutine[Any, Any, bool]] = []
        pools: list[tuple[str, str, str, int, int]] = []  # the members metric's, and boots
        for namespace in sorted(pooled_namespaces(objects, now)):
            lowered = await self._lowered(namespace)
            members = [
                o for o in objects if o["metadata"].get("namespace") == namespace and is_member(o)
            ]
            names = {n for n, t in self.settings.templates.items() if t.pool.size > 0}
            names |= {labels(o).get(POOL_TEMPLATE_LABEL, "") for o in members}
            for name in sorted(names):
                template = self.settings.templates.get(name)
                mine = [o for o in members if labels(o).get(POOL_TEMPLATE_LABEL, "") == name]
                boot = timedelta(seconds=2 * self.settings.ready_seconds)
                todo = plan(mine, template, size_of(name, template, lowered), now, boot)
                for obj in todo.remove:
                    if not leading():
                        return
                    version = obj["metadata"].get("resourceVersion")
                    with contextlib.suppress(GatewayError):  # handed out meanwhile: a 409
                        await self._delete(namespace, obj["metadata"]["name"], version)
                if template is None:
                    continue
                pools.append((namespace, name, template.pool.temperature, todo.ready, todo.make))
                boots += [self._boot(namespace, name, template, leading) for _ in range(todo.make)]
        booted = iter(await asyncio.gather(*boots))
        for namespace, name, temperature, ready, made in pools:
            count = ready + sum(next(booted) for _ in range(made))
            if self.metrics is not None:
                self.metrics.members(namespace, name, temperature, count)

    async def _boot(
        self, namespace: str, name: str, template: Template, leading: Callable[[], bool]
    ) -> bool:
        """One new member, booted to a healthy agent and marked ready; deleted if it fails."""
        if not leading():
            return False
        loop = asyncio.get_running_loop()
        began = loop.time()
        sandbox_id = new_id()
        body = member_manifest(
            (namespace, sandbox_id), name, template, datetime.now(UTC), seed=self.settings.seed
        )
        try:
            await self._call(
                self.custom.create_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, body
            )
        except GatewayError as e:  # the tenant's quota, most often: the pool waits for room
            log.info("pool %s/%s: no member added: %s", namespace, name, e.message)
            return False
        suspend = template.pool.temperature == "suspended"

        def ready(obj: Mapping[str, Any]) -> dict[str, Any]:
            if not is_member(obj):
                raise GatewayError(CONFLICT, "no longer a pool member")
            patch: dict[str, Any] = {"metadata": {"annotations": {READY_NOTE: "true"}}}
            return {**patch, "spec": {"power": "Suspended"}} if suspend else patch

        try:
            await self._await_agent(namespace, sandbox_id, member=True)
            await self._update(namespace, sandbox_id, ready, members=True)
        except BaseException as e:
            with contextlib.suppress(GatewayError):
                await self._delete(namespace, sandbox_id)
            if not isinstance(e, GatewayError):
                raise
            log.warning("pool %s/%s: member %s failed to boot: %s", namespace, name, sandbox_id, e)
            return False
        if self.metrics is not None:
            self.metrics.topped_up(namespace, name, loop.time() - began)
        return True

    async def _lowered(self, namespace: str) -> dict[str, int]:
        """The tenant's own pool sizes (its ConfigMap), read at most every LIMITS_EVERY seconds."""
        if self.core is None:
            return {}
        now = asyncio.get_running_loop().time()
        known = self.limits.get(namespace)
        if known is not None and now - known[0] < self.LIMITS_EVERY:
            return known[1]
        sizes: dict[str, int] = {}
        try:
            found = await asyncio.to_thread(
                self.core.read_namespaced_config_map, LIMITS_CONFIGMAP, namespace
            )
            sizes = tenant_sizes(found.data)
        except ApiException as e:
            if e.status != NOT_FOUND:
                log.warning("pool limits of %s unreadable: %s %s", namespace, e.status, e.reason)
                sizes = known[1] if known is not None else {}
        except Exception:
            log.exception("pool limits of %s unreadable", namespace)
            sizes = known[1] if known is not None else {}
        self.limits[namespace] = (now, sizes)
        return sizes
