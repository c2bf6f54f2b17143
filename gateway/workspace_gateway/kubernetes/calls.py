"""The cluster backend's calls on WorkspaceSandbox objects, and its waits on their watch.

Each replica watches the gateway's sandboxes in every namespace (`cache`): the data plane finds
a sandbox in that cache, and create and connect wait on its changes rather than polling the API
server. The cache only saves requests: every answer that matters is also reachable by a direct
call when it misses or falls silent.
"""

import asyncio
import contextlib
import functools
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import httpx
from kubernetes.client.exceptions import ApiException

from workspace_gateway import agent_client
from workspace_gateway.backend import INTERPRETER_PORT, Sandbox
from workspace_gateway.errors import GatewayError, not_found
from workspace_gateway.kubernetes import sealed
from workspace_gateway.kubernetes.cache import Allowance, Cache, Watcher
from workspace_gateway.kubernetes.objects import (
    CACHED_LABELS,
    ENV_VARS,
    GROUP,
    ID_LABEL,
    MAX_MESSAGE,
    PLURAL,
    PREFIX,
    VERSION,
    Settings,
    agent_url,
    alive,
    is_member,
    refusal_of,
    sandbox_of,
    shown,
)
from workspace_gateway.kubernetes.view import Projection
from workspace_gateway.metrics import Metrics
from workspace_gateway.sandbox_ids import is_id

HEALTH_SECONDS = 0.25  # between two `/health` calls while an agent boots
RECHECK_SECONDS = 5.0  # the API server is asked after this long without a watch event
SYNC_SECONDS = 5.0  # how long `locate` waits for the watch's first list
FALLBACK_PER_SECOND, FALLBACK_BURST = 5.0, 10  # `locate`'s direct lists on a cache miss
MERGE_PATCH = "application/merge-patch+json"
UPDATE_ATTEMPTS = 5
NOT_FOUND, CONFLICT = 404, 409
CALL_PAGE = 20  # objects a page of a list made for a call: each may be as large as etcd allows
# RBAC's wording: `... is forbidden: User "x" cannot create resource "y" in API group ...`.
RBAC_REFUSAL = re.compile(r'\bUser "[^"]*" cannot [a-z]+ resource\b')

log = logging.getLogger("workspace_gateway")
T = TypeVar("T")


def refusal(e: ApiException) -> str:
    """The message of the API server's Status, without the rest of its body."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return str(json.loads(e.body)["message"])[:MAX_MESSAGE]
    return str(e.reason)


def forbidden(e: ApiException) -> GatewayError:
    """The API server's 403, as the caller should see it.

    A ResourceQuota is the tenant's concurrent-sandbox limit: 429, as E2B answers at its limit,
    so the SDK raises `RateLimitException`. An admission policy or webhook refusing the object
    is the tenant's to read: 403 with its message. RBAC refusing the gateway itself is the
    operator's problem, logged, and never tells the caller the gateway's identity.
    """
    message = refusal(e)
    if "exceeded quota" in message:
        return GatewayError(429, f"the namespace's sandbox quota is used up: {message}")
    if RBAC_REFUSAL.search(message):
        log.error("the cluster refused the gateway: %s", message)
        return GatewayError(500, "the gateway may not do that in this namespace")
    return GatewayError(403, f"the platform refused the sandbox: {message}")


class Calls:
    """The Backend's calls and waits; `custom` is the client's `CustomObjectsApi`.

    `core` (the `CoreV1Api`) reads tenants' pool limits; without it none is read.
    """

    def __init__(
        self,
        custom: Any,
        settings: Settings,
        http: httpx.AsyncClient,
        metrics: Metrics | None = None,
        core: Any = None,
    ) -> None:
        self.custom = custom
        self.settings = settings
        self.http = http
        self.metrics = metrics
        self.core = core
        self.cache = Cache(
            functools.partial(alive, seed=settings.seed), Projection(CACHED_LABELS, PREFIX)
        )
        self.watcher: Watcher | None = None
        self.fallbacks: Allowance | None = None
        self.closed = False

    def start(self) -> None:
        """Start watching, on the running loop; the first call that needs the cache does."""
        if self.watcher is not None or self.closed:
            return
        loop = asyncio.get_running_loop()
        listing = functools.partial(
            self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, label_selector=ID_LABEL
        )
        self.fallbacks = Allowance(FALLBACK_PER_SECOND, FALLBACK_BURST, loop.time())
        self.watcher = Watcher(listing, self.cache, loop)
        self.watcher.start()

    async def _synced(self) -> bool:
        """Whether the watch has listed once, waiting for that a little."""
        self.start()
        if not self.cache.synced.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.cache.synced.wait(), SYNC_SECONDS)
        return self.cache.synced.is_set()

    async def close(self) -> None:
        self.closed = True
        if self.watcher is not None:
            await self.watcher.stop()
        await self.http.aclose()

    async def _ready(self, namespace: str, sandbox_id: str) -> Sandbox:
        """Wait for the platform to run it and its agent to answer, then `/init` it."""
        obj, url, version = await self._await_agent(namespace, sandbox_id)
        await self._init(obj, url)
        return sandbox_of(obj, self.settings, version)

    async def _await_agent(
        self,
        namespace: str,
        sandbox_id: str,
        first: dict[str, Any] | None = None,
        *,
        member: bool = False,
    ) -> tuple[dict[str, Any], str, str]:
        """The object once its agent answers `/health`, the agent's URL and envd version.

        The object's changes come from the watch; the API server is asked only after
        RECHECK_SECONDS without an event (a watch cut off, or not yet listed), or to confirm a
        deletion. Only the agent is polled, every HEALTH_SECONDS while it boots. Only a version
        that is (`member`) or is not a pool member counts: a lagging cache's view of a member
        from before its hand-out is never taken for the handed-out sandbox.
        """
        self.start()
        loop = asyncio.get_running_loop()
        key = (namespace, sandbox_id)
        deadline = loop.time() + self.settings.ready_seconds

        def fit(found: dict[str, Any] | None) -> dict[str, Any] | None:
            return found if found is not None and is_member(found) == member else None

        obj = fit(first if first is not None else self.cache.get(key))
        stale_at = loop.time() + RECHECK_SECONDS
        while (now := loop.time()) < deadline:
            if obj is not None and (why := refusal_of(obj)) is not None:
                raise GatewayError(400, f"the platform refused the sandbox: {why}")
            url = agent_url(obj, self.settings.agent_port) if obj is not None else None
            if obj is not None and url is not None:
                health = await agent_client.health(self.http, url)
                if health is not None:
                    return obj, url, health.version
                now = loop.time()
            if now >= stale_at:
                obj = fit(await self._get(namespace, sandbox_id, members=member))
                stale_at = loop.time() + RECHECK_SECONDS
                continue
            wait = min(stale_at, deadline) - now
            if url is not None:
                wait = min(wait, HEALTH_SECONDS)
            if await self.cache.change(key, wait):
                cached = self.cache.get(key)
                obj = (
                    fit(cached)
                    if cached is not None
                    else await self._get(namespace, sandbox_id, members=member)
                )
                stale_at = loop.time() + RECHECK_SECONDS
        seconds = self.settings.ready_seconds
        raise GatewayError(504, f"sandbox {sandbox_id!r} was not ready within {seconds:.0f} s")

    async def _init(self, obj: Mapping[str, Any], url: str) -> None:
        sandbox = sandbox_of(obj, self.settings)
        notes = obj["metadata"].get("annotations") or {}
        env_vars = sealed.unseal(
            self.settings.seed, sandbox.namespace, sandbox.sandbox_id, notes.get(ENV_VARS)
        )
        # Its template's `interpreter`, as the object records it: the port opened for it.
        interpreter = INTERPRETER_PORT in sandbox.ports
        settings = agent_client.Init(
            sandbox.access_token, env_vars, self.settings.workdir, interpreter
        )
        await agent_client.init(self.http, url, settings)

    async def _get(
        self, namespace: str, sandbox_id: str, *, members: bool = False
    ) -> dict[str, Any]:
        """The gateway's object of this ID, alive; a member only with `members`; else a 404."""
        if not is_id(sandbox_id):
            raise not_found(sandbox_id)  # never a name the cluster would read as a path
        obj = await self._call(
            self.custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            sandbox_id,
            missing=sandbox_id,
        )
        if not alive(obj, self.settings.seed) or (is_member(obj) and not members):
            raise not_found(sandbox_id)
        return dict(obj)

    async def _update(
        self,
        namespace: str,
        sandbox_id: str,
        change: Callable[[Mapping[str, Any]], dict[str, Any]],
        *,
        members: bool = False,
    ) -> dict[str, Any]:
        """Read, decide, merge-patch at that resourceVersion; read again if it moved meanwhile.

        The platform writes status all the time, so a conflict is routine, not an error. The
        object as it was decided on is returned.
        """
        for _ in range(UPDATE_ATTEMPTS):
            obj = await self._get(namespace, sandbox_id, members=members)
            patch = change(obj)
            version = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            patch = {**patch, "metadata": {**patch.get("metadata", {}), **version}}
            try:
                await self._patch(namespace, sandbox_id, patch)
            except GatewayError as e:
                if e.status != 409:  # noqa: PLR2004  # HTTP Conflict
                    raise
                continue
            return obj
        raise GatewayError(409, f"sandbox {sandbox_id!r} kept changing; try again")

    async def _delete(self, namespace: str, sandbox_id: str, version: str | None = None) -> None:
        """Delete; with `version`, only if the object is still at that resourceVersion."""
        preconditions = {"preconditions": {"resourceVersion": version}} if version else None
        await self._call(
            self.custom.delete_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            sandbox_id,
            body=preconditions,
            missing=sandbox_id,
        )

    async def _patch(
        self, namespace: str, sandbox_id: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A merge patch; one at a `resourceVersion` is refused 409 if the object has moved on."""
        patched: dict[str, Any] = await self._call(
            self.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            sandbox_id,
            patch,
            missing=sandbox_id,
            _content_type=MERGE_PATCH,
        )
        return patched

    async def _call(
        self, method: Callable[..., T], *args: Any, missing: str | None = None, **kwargs: Any
    ) -> T:
        """One client call, off the event loop, its errors turned into the gateway's."""
        try:
            return await asyncio.to_thread(method, *args, **kwargs)
        except ApiException as e:
            if e.status == 404 and missing is not None:  # noqa: PLR2004  # HTTP Not Found
                raise not_found(missing) from None
            if e.status == 409:  # noqa: PLR2004  # HTTP Conflict
                raise GatewayError(409, "the sandbox changed meanwhile; try again") from None
            if e.status in {400, 422}:
                # The API server or the platform's admission refused what the caller asked for.
                raise GatewayError(400, f"the platform refused the sandbox: {refusal(e)}") from None
            if e.status == 403:  # noqa: PLR2004  # HTTP Forbidden
                raise forbidden(e) from None
            log.error("the cluster answered %s: %s", e.status, e.reason)
            raise GatewayError(502, "the cluster did not answer as expected") from None
        except Exception:
            log.exception("calling the cluster failed")
            raise GatewayError(502, "the cluster could not be reached") from None

    def _listing(self, namespace: str) -> Callable[..., Any]:
        """A list call of the namespace's sandboxes, for `_pages`."""
        return functools.partial(
            self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL
        )

    async def _pages(
        self, listing: Callable[..., Any], selector: str, keep: Callable[[dict[str, Any]], T]
    ) -> Sequence[T]:
        """A list, page by page, with `keep` of each of the gateway's shown objects."""
        found: list[T] = []
        token: str | None = None
        while True:
            options: dict[str, Any] = {"label_selector": selector, "limit": CALL_PAGE}
            if token:
                options["_continue"] = token
            listed = await self._call(listing, **options)
            seed = self.settings.seed
            found += [keep(o) for o in listed.get("items") or [] if shown(o, seed)]
            token = (listed.get("metadata") or {}).get("continue")
            if not token:
                return found

    async def _listed(self, sandbox_id: str) -> tuple[dict[str, Any], ...]:
        def listing(**options: Any) -> Any:
            return self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **options)

        found = await self._pages(listing, f"{ID_LABEL}={sandbox_id}", dict)
        return tuple(o for o in found if o["metadata"]["name"] == sandbox_id)
