"""Sandboxes as WorkspaceSandbox objects in each tenant's namespace, through the official client.

What an object stands for is `objects`; the calls and the waits on the watch are `calls`.
Warm pools (`pools`): a create first claims a ready pool member of its namespace and
template, and only creates cold when there is none (or none that passes its health check);
the leader replica's `refill` keeps each pool at its size.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from workspace_gateway import agent_client, audit
from workspace_gateway.backend import NewSandbox, Sandbox, Snapshot, State, always
from workspace_gateway.errors import GatewayError
from workspace_gateway.idempotency import Keyed, replayed
from workspace_gateway.kubernetes.calls import RECHECK_SECONDS
from workspace_gateway.kubernetes.objects import (
    AUTO_PAUSE,
    END,
    GROUP,
    ID_LABEL,
    KEY_LABEL,
    PAUSED_PHASES,
    PLURAL,
    REQUEST_NOTE,
    STARTED,
    VERSION,
    agent_url,
    is_deleting,
    is_member,
    is_paused,
    manifest,
    moment,
    sandbox_of,
    shown,
    snapshots_of,
    spec_snapshots,
)
from workspace_gateway.kubernetes.pools import Pools
from workspace_gateway.kubernetes.templates import Template
from workspace_gateway.sandbox_ids import is_id, new_id
from workspace_gateway.times import rfc3339

MAX_SNAPSHOTS = 32  # spec.snapshots' maxItems

log = logging.getLogger("workspace_gateway")


class KubernetesBackend(Pools):
    """The Backend over a cluster; `custom` is the client's `CustomObjectsApi`.

    `core` (the `CoreV1Api`) reads tenants' pool limits; without it none is read.
    """

    REAP_EVERY = 5.0  # from the cache: costs the API server nothing

    def templates(self) -> frozenset[str]:
        return frozenset(self.settings.templates)

    def figures(self, template: str) -> tuple[int, int, int]:
        return self.settings.templates[template].figures()

    async def ready(self) -> bool:
        """Once the watch has listed: the first readiness probe starts it."""
        return await self._synced()

    async def create(self, namespace: str, request: NewSandbox) -> Sandbox:
        """From the pool when it has a member that passes its health check, else cold."""
        template = self.settings.templates.get(request.template)
        if template is None:
            raise GatewayError(404, f"template {request.template!r} not found")
        if request.idempotency_key is not None:
            earlier = await self._made_with(namespace, request)
            if earlier is not None:
                return earlier
        began = asyncio.get_running_loop().time()
        pooled = template.pool.size > 0
        # A member was made with the template's network; one that asks for less is made cold,
        # so it never runs a moment with more than it asked for.
        fits = request.network is None
        sandbox = await self._from_pool(namespace, request) if pooled and fits else None
        hit = sandbox is not None
        if sandbox is None:
            sandbox = await self._cold(namespace, request, template)
        if pooled:  # hit or miss means something only where a pool is kept
            audit.note_pool(hit=hit)
            if self.metrics is not None:
                seconds = asyncio.get_running_loop().time() - began
                self.metrics.served(namespace, request.template, hit=hit, seconds=seconds)
        return sandbox

    async def _cold(self, namespace: str, request: NewSandbox, template: Template) -> Sandbox:
        sandbox_id = new_id()
        now = datetime.now(UTC)
        where = (namespace, sandbox_id)
        body = manifest(where, request.template, template, request, now, seed=self.settings.seed)
        if request.restore is not None:
            body["spec"]["restoreFrom"] = {"snapshot": request.restore.volume}
        await self._call(
            self.custom.create_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, body
        )
        try:
            return await self._ready(namespace, sandbox_id)
        except BaseException:
            # A sandbox that never became usable is not left behind to cost anything.
            with contextlib.suppress(GatewayError):
                await self._delete(namespace, sandbox_id)
            raise

    async def _made_with(self, namespace: str, request: NewSandbox) -> Sandbox | None:
        """The sandbox a create with the same key made, once usable.

        Asked of the API server, which a retry on another replica reaches as well as this one.
        """
        assert request.idempotency_key is not None  # noqa: S101  # the caller checked
        asked = Keyed.of(self.settings.seed, namespace, request.idempotency_key, request)

        selector = f"{ID_LABEL},{KEY_LABEL}={asked.label}"
        now = datetime.now(UTC)
        for obj in await self._pages(self._listing(namespace), selector, dict):
            if is_deleting(obj):
                continue
            notes = obj["metadata"].get("annotations") or {}
            keyed = Keyed(asked.label, notes.get(REQUEST_NOTE, ""))
            started = moment(notes.get(STARTED), datetime.fromtimestamp(0, UTC))
            if replayed(keyed, asked, started, now):
                return await self._ready(namespace, obj["metadata"]["name"])
        return None

    async def get(self, namespace: str, sandbox_id: str) -> Sandbox:
        return sandbox_of(await self._get(namespace, sandbox_id), self.settings)

    async def list(self, namespace: str) -> list[Sandbox]:
        """Straight from the API server, each page read down at once to what the answer needs.

        A tenant's objects may be as large as etcd allows: a page of CALL_PAGE holds few.
        """
        listing = self._listing(namespace)
        return [*await self._pages(listing, ID_LABEL, lambda o: sandbox_of(o, self.settings))]

    async def suspend(self, namespace: str, sandbox_id: str) -> None:
        def change(obj: Mapping[str, Any]) -> dict[str, Any]:
            if is_paused(obj):
                raise GatewayError(409, f"sandbox {sandbox_id!r} is already paused")
            return {"spec": {"power": "Suspended"}}

        await self._update(namespace, sandbox_id, change)
        await self._stopping(namespace, sandbox_id)

    async def _stopping(self, namespace: str, sandbox_id: str) -> None:
        """Wait until the platform has acted on a pause: its phase Suspending or Suspended.

        E2B answers a pause once the sandbox is paused. Answering before the platform has
        seen it would let a connect right after find the old phase, Running, and the agent
        that the platform is about to stop. Past `ready_seconds` the pause goes on unwatched.
        """
        await self._synced()
        loop = asyncio.get_running_loop()
        key = (namespace, sandbox_id)
        deadline = loop.time() + self.settings.ready_seconds
        while (now := loop.time()) < deadline:
            obj = self.cache.get(key)
            if obj is None or (obj.get("status") or {}).get("phase") in PAUSED_PHASES:
                return
            await self.cache.change(key, min(RECHECK_SECONDS, deadline - now))
        log.warning("sandbox %s/%s: not yet paused after %.0f s", *key, self.settings.ready_seconds)

    async def resume(
        self, namespace: str, sandbox_id: str, end_at: datetime
    ) -> tuple[Sandbox, bool]:
        def change(obj: Mapping[str, Any]) -> dict[str, Any]:
            current = sandbox_of(obj, self.settings)
            end = max(end_at, current.end_at)  # connect only ever extends
            patch: dict[str, Any] = {"metadata": {"annotations": {END: end.isoformat()}}}
            spec: dict[str, Any] = {"power": "Running"} if is_paused(obj) else {}
            if current.auto_pause:
                spec["lifetime"] = {"suspendAt": rfc3339(end, "seconds")}
            return {**patch, "spec": spec} if spec else patch

        before = await self._update(namespace, sandbox_id, change)
        resumed = is_paused(before)
        if resumed or agent_url(before, self.settings.agent_port) is None:
            return await self._ready(namespace, sandbox_id), resumed
        obj = await self._get(namespace, sandbox_id)
        url = agent_url(obj, self.settings.agent_port)
        health = await agent_client.health(self.http, url) if url is not None else None
        if url is None or health is None:  # stopped or rebooting meanwhile: wait for it
            return await self._ready(namespace, sandbox_id), False
        if not health.initialized:
            await self._init(obj, url)  # its agent restarted since: back to the caller's
        return sandbox_of(obj, self.settings, health.version), False

    async def snapshot(self, namespace: str, sandbox_id: str, name: str) -> Snapshot:
        """A `spec.snapshots` entry, answered once its VolumeSnapshot is ready to use.

        Past `ready_seconds` it is answered as it is, `readyToUse` false: a restore from it
        waits (409) until the platform reports it ready.
        """

        def change(obj: Mapping[str, Any]) -> dict[str, Any]:
            taken = list(spec_snapshots(obj))
            if any(s.get("name") == name for s in taken):
                raise GatewayError(409, f"sandbox {sandbox_id!r} has a snapshot {name!r} already")
            if len(taken) >= MAX_SNAPSHOTS:
                raise GatewayError(
                    409, f"sandbox {sandbox_id!r} has {MAX_SNAPSHOTS} snapshots: delete one first"
                )
            return {"spec": {"snapshots": [*taken, {"name": name}]}}

        await self._update(namespace, sandbox_id, change)
        await self._synced()
        loop = asyncio.get_running_loop()
        key = (namespace, sandbox_id)
        deadline = loop.time() + self.settings.ready_seconds
        while True:
            obj = self.cache.get(key)
            found = {s.name: s for s in snapshots_of(obj)} if obj is not None else {}
            if (name in found and found[name].ready) or (now := loop.time()) >= deadline:
                return found.get(name, Snapshot(sandbox_id, name, ready=False))
            await self.cache.change(key, min(RECHECK_SECONDS, deadline - now))

    async def snapshots(self, namespace: str) -> tuple[Snapshot, ...]:
        """From the API server, as `list` is: each sandbox's `spec.snapshots` and their status."""
        found = await self._pages(self._listing(namespace), ID_LABEL, snapshots_of)
        return tuple(s for taken in found for s in taken)

    async def delete_snapshot(self, namespace: str, snapshot: Snapshot) -> None:
        """Its entry out of `spec.snapshots`: the function deletes its VolumeSnapshot."""
        missing = GatewayError(404, f"snapshot {snapshot.snapshot_id!r} not found")

        def change(obj: Mapping[str, Any]) -> dict[str, Any]:
            taken = list(spec_snapshots(obj))
            kept = [s for s in taken if s.get("name") != snapshot.name]
            if len(kept) == len(taken):
                raise missing
            return {"spec": {"snapshots": kept}}

        try:
            await self._update(namespace, snapshot.sandbox_id, change)
        except GatewayError as e:
            raise missing if e.status == 404 else e from None  # noqa: PLR2004  # HTTP Not Found

    async def delete(self, namespace: str, sandbox_id: str) -> None:
        await self._get(namespace, sandbox_id)  # only the gateway's own
        await self._delete(namespace, sandbox_id)

    async def set_end(self, namespace: str, sandbox_id: str, end_at: datetime) -> None:
        def change(obj: Mapping[str, Any]) -> dict[str, Any]:
            patch: dict[str, Any] = {"metadata": {"annotations": {END: end_at.isoformat()}}}
            if (obj["metadata"].get("annotations") or {}).get(AUTO_PAUSE) == "true":
                patch["spec"] = {"lifetime": {"suspendAt": rfc3339(end_at, "seconds")}}
            return patch

        await self._update(namespace, sandbox_id, change)

    def preview(self, sandbox: Sandbox, port: int) -> str | None:
        return sandbox.port_url(port)

    async def locate(self, sandbox_id: str) -> tuple[Sandbox, ...]:
        """From the watch's cache; on a miss, one direct list, within an allowance.

        A miss is routine for a sandbox another replica made a moment ago, so it is asked of
        the API server, whose answer is the truth. Misses are also what made-up IDs cause, so
        those lists draw on a token bucket (FALLBACK_BURST at once, FALLBACK_PER_SECOND after):
        past it a miss is answered as unknown, and a flood of made-up IDs costs the cluster at
        most that many lists a second per replica, whatever their number.
        """
        if not is_id(sandbox_id):
            return ()  # a header's text never reaches a label selector
        await self._synced()
        seed = self.settings.seed
        found: Sequence[dict[str, Any]] = [
            o for o in self.cache.named(sandbox_id) if shown(o, seed)
        ]
        now = asyncio.get_running_loop().time()
        if not found and self.fallbacks is not None and self.fallbacks.take(now):
            found = await self._listed(sandbox_id)
        return tuple(sandbox_of(o, self.settings) for o in found)

    async def reinit(self, sandbox: Sandbox) -> None:
        where = (sandbox.namespace, sandbox.sandbox_id)
        obj = self.cache.get(where)
        if obj is None or is_member(obj):
            obj = await self._get(sandbox.namespace, sandbox.sandbox_id)
        url = agent_url(obj, self.settings.agent_port)
        if url is None:
            raise GatewayError(502, f"sandbox {sandbox.sandbox_id!r} is not running")
        log.info("sandbox %s/%s: its agent restarted; /init again", *where)
        await self._init(obj, url)

    async def reap(self, now: datetime, leading: Callable[[], bool] = always) -> None:
        """Kill running sandboxes past their end time; the platform pauses auto-pause ones.

        A paused sandbox is kept, as E2B keeps it, until it is killed or resumed. The candidates
        come from the watch's cache, so a round costs the API server nothing but the deletes;
        each delete is conditional on the resourceVersion the cache holds, so a sandbox whose
        end another replica has just moved on (a `set_timeout`, a connect) is answered 409 and
        kept, however stale the cache.
        """
        if not await self._synced():
            return  # no list yet: next round
        for obj in list(self.cache.objects.values()):
            if is_member(obj):
                continue  # a member has no end: `refill` removes it when too old
            sandbox = sandbox_of(obj, self.settings)
            expired = sandbox.state is State.RUNNING and sandbox.end_at <= now
            if expired and not sandbox.auto_pause and leading():
                version = obj["metadata"].get("resourceVersion")
                with contextlib.suppress(GatewayError):
                    await self._delete(sandbox.namespace, sandbox.sandbox_id, version)
