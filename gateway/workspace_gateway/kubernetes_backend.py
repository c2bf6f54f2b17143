"""Sandboxes as WorkspaceSandbox objects in each tenant's namespace, through the official client.

The object is the whole state: its name is the sandbox ID (also on a label, so budgets, metrics
and audit events correlate with the workload), the template, start and end times, auto-pause,
metadata and env vars (sealed: see `sealed`) are annotations, pause is `spec.power: Suspended`.
A replica keeps nothing another one needs. An auto-pause sandbox also carries its end time as
`spec.lifetime.suspendAt`, so the platform suspends it even if no gateway is running.

The agent's access token is derived, never stored: HMAC-SHA256 of the namespace and sandbox ID
under a seed only the gateway holds. The namespace is part of it, so a sandbox of the same name
made by hand in another namespace has another token (see `Backend.locate`). Every object the
gateway makes also carries its mark (`mark`), under the same seed but another message: without
it an object is not the gateway's, and is never cached, shown, reaped or routed to.
An object with a `deletionTimestamp` (deleted, its finalizers still held) is killed as far as
E2B's API goes: not cached, listed, reaped or routed to, and a call on it answers 404 (`alive`).

Each replica watches the gateway's sandboxes in every namespace (`sandbox_cache`): the data
plane finds a sandbox in that cache, and create and connect wait on its changes rather than
polling the API server. The cache only saves requests: every answer that matters is also
reachable by a direct call when it misses or falls silent.

Warm pools (`kubernetes_pools`): a create first claims a ready pool member of its namespace and
template, and only creates cold when there is none (or none that passes its health check);
the leader replica's `refill` keeps each pool at its size.
"""

import asyncio
import contextlib
import functools
import hashlib
import hmac
import json
import logging
import re
import secrets
import string
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import httpx
from kubernetes.client.exceptions import ApiException

from workspace_gateway import audit, sealed
from workspace_gateway.backend import (
    INITIALIZED,
    INTERPRETER_PORT,
    NewSandbox,
    Sandbox,
    Snapshot,
    State,
    always,
)
from workspace_gateway.errors import GatewayError, not_found
from workspace_gateway.idempotency import Keyed, fingerprint, label_of, replayed
from workspace_gateway.kubernetes_pools import (
    HANDED_OUT,
    LIMITS_CONFIGMAP,
    MADE_NOTE,
    MEMBER,
    POOL_LABEL,
    POOL_TEMPLATE_LABEL,
    READY_NOTE,
    is_member,
    is_ready,
    labels,
    plan,
    pooled_namespaces,
    size_of,
    tenant_sizes,
)
from workspace_gateway.metrics import Metrics
from workspace_gateway.sandbox_cache import Allowance, Cache, Watcher
from workspace_gateway.sandbox_view import MAX_CALLER_NOTES_BYTES, Projection, notes_bytes
from workspace_gateway.templates import Template

GROUP = "sandbox.cozystack.io"
VERSION = "v1alpha1"
PLURAL = "workspacesandboxes"
KIND = "WorkspaceSandbox"
ID_LABEL = "sandbox.cozystack.io/sandbox-id"
PREFIX = "gateway.sandbox.cozystack.io/"
TEMPLATE, STARTED, END, AUTO_PAUSE = (
    f"{PREFIX}{n}" for n in ("template", "started-at", "end-at", "auto-pause")
)
METADATA, ENV_VARS, MARK = f"{PREFIX}metadata", f"{PREFIX}env-vars", f"{PREFIX}mark"
PRIVATE = f"{PREFIX}private-traffic"
"""`true` on a sandbox created with `network.allowPublicTraffic: false`."""
# The create's Idempotency-Key, as a label to find it by, and what the create asked for.
KEY_LABEL, REQUEST_NOTE = f"{PREFIX}idempotency-key", f"{PREFIX}idempotency-request"
CACHED_LABELS = frozenset({ID_LABEL, POOL_LABEL, POOL_TEMPLATE_LABEL})
ID_ALPHABET = string.ascii_lowercase + string.digits
ID_LENGTH = 20
AGENT_PORT = 49983
WORKDIR = "/workspace"
READY_SECONDS = 300.0
HEALTH_SECONDS = 0.25  # between two `/health` calls while an agent boots
MAX_SNAPSHOTS = 32  # spec.snapshots' maxItems
RECHECK_SECONDS = 5.0  # the API server is asked after this long without a watch event
SYNC_SECONDS = 5.0  # how long `locate` waits for the watch's first list
FALLBACK_PER_SECOND, FALLBACK_BURST = 5.0, 10  # `locate`'s direct lists on a cache miss
MERGE_PATCH = "application/merge-patch+json"
UPDATE_ATTEMPTS = 5
MAX_MESSAGE = 500
NOT_FOUND, CONFLICT = 404, 409
CALL_PAGE = 20  # objects a page of a list made for a call: each may be as large as etcd allows
CLAIMS = 3  # members a create tries before it creates cold: a broken pool costs little time
PAUSED_PHASES = frozenset({"Suspending", "Suspended"})
# RBAC's wording: `... is forbidden: User "x" cannot create resource "y" in API group ...`.
RBAC_REFUSAL = re.compile(r'\bUser "[^"]*" cannot [a-z]+ resource\b')

log = logging.getLogger("workspace_gateway")
T = TypeVar("T")


def new_id() -> str:
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


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


def is_id(text: str) -> bool:
    return len(text) == ID_LENGTH and not set(text) - set(ID_ALPHABET)


def access_token(seed: bytes, namespace: str, sandbox_id: str) -> str:
    return hmac.new(seed, f"{namespace}/{sandbox_id}".encode(), hashlib.sha256).hexdigest()


def mark(seed: bytes, namespace: str, sandbox_id: str) -> str:
    """What the gateway writes on every sandbox it makes, and only it can: no tenant has the seed.

    Another message than the token's under the same seed, so the mark, which anyone who may
    read the object sees, says nothing of the token.
    """
    message = f"mark\0{namespace}/{sandbox_id}".encode()
    return hmac.new(seed, message, hashlib.sha256).hexdigest()


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _callers(
    where: tuple[str, str], request: NewSandbox, now: datetime, seed: bytes
) -> tuple[dict[str, str], dict[str, Any]]:
    """What a create request sets on its sandbox: annotations, and power and lifetime."""
    namespace, sandbox_id = where
    end_at = datetime.fromtimestamp(now.timestamp() + request.timeout, UTC)
    spec: dict[str, Any] = {"power": "Running"}
    if request.auto_pause:
        spec["lifetime"] = {"suspendAt": rfc3339(end_at)}
    if request.network is not None:
        spec["network"] = request.network
    annotations = {
        TEMPLATE: request.template,
        STARTED: now.astimezone(UTC).isoformat(),
        END: end_at.isoformat(),
        AUTO_PAUSE: "true" if request.auto_pause else "false",
        METADATA: json.dumps(request.metadata, sort_keys=True),
        ENV_VARS: sealed.seal(seed, namespace, sandbox_id, request.env_vars),
    }
    if request.idempotency_key is not None:
        annotations[REQUEST_NOTE] = fingerprint(seed, namespace, request)
    if not request.public_traffic:
        annotations[PRIVATE] = "true"
    size = notes_bytes(annotations)
    if size > MAX_CALLER_NOTES_BYTES:
        # Past this the watch cache would not keep it (`sandbox_view`).
        raise GatewayError(
            400,
            f"metadata and envVars are too large: {size} bytes once stored on the sandbox, "
            f"at most {MAX_CALLER_NOTES_BYTES}",
        )
    return annotations, spec


def keyed_labels(namespace: str, request: NewSandbox, seed: bytes) -> dict[str, str]:
    """The label a create with an Idempotency-Key is found by again."""
    if request.idempotency_key is None:
        return {}
    return {KEY_LABEL: label_of(seed, namespace, request.idempotency_key)}


def manifest(
    where: tuple[str, str],
    template_name: str,
    template: Template,
    request: NewSandbox,
    now: datetime,
    *,
    seed: bytes,
) -> dict[str, Any]:
    """The WorkspaceSandbox a create request stands for, in `where` (namespace, sandbox ID)."""
    annotations, spec = _callers(where, request, now, seed)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": where[1],
            "labels": {ID_LABEL: where[1], **keyed_labels(where[0], request, seed)},
            "annotations": {**annotations, TEMPLATE: template_name, MARK: mark(seed, *where)},
        },
        "spec": {**template.spec(), **spec},
    }


def member_manifest(
    where: tuple[str, str], template_name: str, template: Template, now: datetime, *, seed: bytes
) -> dict[str, Any]:
    """A pool member: the template's spec, running, and nothing of any caller's."""
    sandbox_id = where[1]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": sandbox_id,
            "labels": {
                ID_LABEL: sandbox_id,
                POOL_LABEL: MEMBER,
                POOL_TEMPLATE_LABEL: template_name,
            },
            "annotations": {
                TEMPLATE: template_name,
                MADE_NOTE: now.astimezone(UTC).isoformat(),
                MARK: mark(seed, *where),
            },
        },
        "spec": {**template.spec(), "power": "Running"},
    }


def handout_patch(
    member: Mapping[str, Any], request: NewSandbox, now: datetime, seed: bytes
) -> dict[str, Any]:
    """The claim: member to handed-out at the version read, with the caller's settings.

    One merge patch, so the label moves only if nobody wrote the object since it was read, and
    a member is never seen handed out without its caller's metadata and sealed env vars.
    """
    metadata = member["metadata"]
    where = (metadata["namespace"], metadata["name"])
    annotations, spec = _callers(where, request, now, seed)
    return {
        "metadata": {
            "resourceVersion": metadata["resourceVersion"],
            "labels": {POOL_LABEL: HANDED_OUT, **keyed_labels(where[0], request, seed)},
            "annotations": {**annotations, READY_NOTE: None},
        },
        "spec": spec,
    }


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


# How Crossplane reports a FATAL result of the function on the XR (its Synced condition):
# crossplane/crossplane internal/controller/apiextensions/composite, errFmtFatalResult.
FATAL = re.compile(r'pipeline step "[^"]*" returned a fatal result: (.+)', re.DOTALL)


def refusal_of(obj: Mapping[str, Any]) -> str | None:
    """What the function said when it refused the sandbox (bad input); None if it hasn't.

    Such a sandbox never becomes ready until its spec changes, so a caller waiting for it is
    told at once, with the field the function names. A condition from before the spec's last
    change (its observedGeneration behind) says nothing of the spec as it is.
    """
    conditions = (obj.get("status") or {}).get("conditions") or []
    generation = (obj.get("metadata") or {}).get("generation")
    for c in conditions:
        seen = c.get("observedGeneration")
        stale = isinstance(seen, int) and isinstance(generation, int) and seen < generation
        if c.get("type") == "Synced" and c.get("status") == "False" and not stale:
            found = FATAL.search(str(c.get("message") or ""))
            if found:
                return found.group(1)[:MAX_MESSAGE]
    return None


def is_paused(obj: Mapping[str, Any]) -> bool:
    phase = (obj.get("status") or {}).get("phase")
    return (obj.get("spec") or {}).get("power") == "Suspended" or phase in PAUSED_PHASES


def agent_url(obj: Mapping[str, Any], port: int) -> str | None:
    """The agent's URL once the platform says the sandbox is up: Ready, Running, an endpoint."""
    status = obj.get("status") or {}
    host = status.get("endpoint")
    if is_paused(obj) or status.get("phase") != "Running" or not _condition(obj, "Ready"):
        return None
    return f"http://{host}:{port}" if isinstance(host, str) and host else None


def _json_strings(text: str | None) -> dict[str, str]:
    with contextlib.suppress(ValueError, TypeError):
        value = json.loads(text or "{}")
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
    return {}


def _moment(text: str | None, default: datetime) -> datetime:
    try:
        moment = datetime.fromisoformat(text or "")
    except ValueError:
        return default
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def ours(obj: Mapping[str, Any], seed: bytes) -> bool:
    """Made by the gateway: its ID label names it and it carries the gateway's mark.

    Anything else is ignored, never cached, shown or routed to: a tenant may make an object of
    any name and labels, but not the mark of another namespace's sandbox.
    """
    metadata = obj.get("metadata") or {}
    name, namespace = metadata.get("name"), metadata.get("namespace")
    if not (isinstance(name, str) and name and isinstance(namespace, str)):
        return False
    if (metadata.get("labels") or {}).get(ID_LABEL) != name:
        return False
    given = (metadata.get("annotations") or {}).get(MARK)
    return isinstance(given, str) and hmac.compare_digest(
        given.encode(), mark(seed, namespace, name).encode()
    )


def is_deleting(obj: Mapping[str, Any]) -> bool:
    """Deleted, and kept only until its finalizers are done: for E2B's API, killed.

    Crossplane holds its finalizer while it deletes what it composed, so a killed sandbox stays
    for a while with its `deletionTimestamp` set.
    """
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _spec_snapshots(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    taken = (obj.get("spec") or {}).get("snapshots")
    return [s for s in taken if isinstance(s, dict)] if isinstance(taken, list) else []


def snapshots_of(obj: Mapping[str, Any]) -> tuple[Snapshot, ...]:
    """A sandbox's `spec.snapshots`, each with what its `status.snapshots` reports."""
    reported = (obj.get("status") or {}).get("snapshots")
    status = {
        s.get("name"): s
        for s in (reported if isinstance(reported, list) else [])
        if isinstance(s, Mapping)
    }
    sandbox_id = obj["metadata"]["name"]
    out = []
    for entry in _spec_snapshots(obj):
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        seen = status.get(name) or {}
        volume = seen.get("volumeSnapshot")
        volume = volume if isinstance(volume, str) else ""
        ready = seen.get("readyToUse") is True and bool(volume)
        out.append(Snapshot(sandbox_id, name, ready=ready, volume=volume if ready else ""))
    return tuple(out)


def alive(obj: Mapping[str, Any], seed: bytes) -> bool:
    """The gateway's, and not being deleted: what the cache keeps and calls act on."""
    return ours(obj, seed) and not is_deleting(obj)


def shown(obj: Mapping[str, Any], seed: bytes) -> bool:
    """What the E2B API answers for: alive, and not a pool member still in its pool."""
    return alive(obj, seed) and not is_member(obj)


@dataclass(frozen=True)
class Settings:
    templates: Mapping[str, Template]
    seed: bytes
    agent_port: int = AGENT_PORT
    workdir: str = WORKDIR
    ready_seconds: float = READY_SECONDS


def sandbox_of(obj: Mapping[str, Any], settings: Settings, envd_version: str = "") -> Sandbox:
    metadata = obj["metadata"]
    notes = metadata.get("annotations") or {}
    epoch = datetime.fromtimestamp(0, UTC)
    started = _moment(notes.get(STARTED), epoch)
    template = settings.templates.get(notes.get(TEMPLATE, ""))
    cpu, memory, disk = template.figures() if template else (0, 0, 0)
    return Sandbox(
        sandbox_id=metadata["name"],
        template=notes.get(TEMPLATE, ""),
        metadata=_json_strings(notes.get(METADATA)),
        state=State.PAUSED if is_paused(obj) else State.RUNNING,
        started_at=started,
        end_at=_moment(notes.get(END), started),
        cpu_count=cpu,
        memory_mb=memory,
        disk_size_mb=disk,
        envd_version=envd_version,
        access_token=access_token(settings.seed, metadata["namespace"], metadata["name"]),
        auto_pause=notes.get(AUTO_PAUSE) == "true",
        public_traffic=notes.get(PRIVATE) != "true",
        endpoint=agent_url(obj, settings.agent_port),
        namespace=metadata["namespace"],
        ports=preview_ports(obj, settings.agent_port),
        network=_network(obj),
    )


def _network(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    network = (obj.get("spec") or {}).get("network")
    return dict(network) if isinstance(network, Mapping) else None


def preview_ports(obj: Mapping[str, Any], agent_port: int) -> frozenset[int]:
    """The ports of its `spec.ports`: what its Service and its policies open to the gateway."""
    ports = (obj.get("spec") or {}).get("ports")
    if not isinstance(ports, list):
        return frozenset()
    found = {p.get("port") for p in ports if isinstance(p, Mapping)}
    return frozenset(p for p in found if isinstance(p, int) and p != agent_port)


class KubernetesBackend:
    """The Backend over a cluster; `custom` is the client's `CustomObjectsApi`.

    `core` (the `CoreV1Api`) reads tenants' pool limits; without it none is read.
    """

    REAP_EVERY = 5.0  # from the cache: costs the API server nothing
    REFILL_EVERY = 5.0  # likewise, but for the members it makes and the tenants' limits it reads
    LIMITS_EVERY = 30.0  # how long a tenant's pool limits are used before they are read again

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
        self.limits: dict[str, tuple[float, dict[str, int]]] = {}
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
            started = _moment(notes.get(STARTED), datetime.fromtimestamp(0, UTC))
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
                spec["lifetime"] = {"suspendAt": rfc3339(end)}
            return {**patch, "spec": spec} if spec else patch

        before = await self._update(namespace, sandbox_id, change)
        resumed = is_paused(before)
        if resumed or agent_url(before, self.settings.agent_port) is None:
            return await self._ready(namespace, sandbox_id), resumed
        obj = await self._get(namespace, sandbox_id)
        url = agent_url(obj, self.settings.agent_port)
        health = await self._health(url) if url is not None else None
        if url is None or health is None:  # stopped or rebooting meanwhile: wait for it
            return await self._ready(namespace, sandbox_id), False
        if not health[1]:
            await self._init(obj, url)  # its agent restarted since: back to the caller's
        return sandbox_of(obj, self.settings, health[0]), False

    async def snapshot(self, namespace: str, sandbox_id: str, name: str) -> Snapshot:
        """A `spec.snapshots` entry, answered once its VolumeSnapshot is ready to use.

        Past `ready_seconds` it is answered as it is, `readyToUse` false: a restore from it
        waits (409) until the platform reports it ready.
        """

        def change(obj: Mapping[str, Any]) -> dict[str, Any]:
            taken = list(_spec_snapshots(obj))
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
            taken = list(_spec_snapshots(obj))
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
                patch["spec"] = {"lifetime": {"suspendAt": rfc3339(end_at)}}
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

    async def _listed(self, sandbox_id: str) -> tuple[dict[str, Any], ...]:
        def listing(**options: Any) -> Any:
            return self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **options)

        found = await self._pages(listing, f"{ID_LABEL}={sandbox_id}", dict)
        return tuple(o for o in found if o["metadata"]["name"] == sandbox_id)

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

    # --- Warm pools (see `kubernetes_pools`)

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
            health = await self._health(url)
            if health is None:
                raise GatewayError(503, "it failed its health check")
            obj, version = claimed, health[0]
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
                health = await self._health(url)
                if health is not None:
                    return obj, url, health[0]
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

    async def _health(self, url: str) -> tuple[str, bool] | None:
        """The agent's envd version, and whether it holds its token; None while it is down."""
        try:
            answer = await self.http.get(url + "/health", timeout=2.0)
        except httpx.TransportError:
            return None
        if not answer.is_success:
            return None
        version = str(answer.headers.get("x-envd-version", "0.1.0"))
        return version, answer.headers.get(INITIALIZED) != "false"

    async def _init(self, obj: Mapping[str, Any], url: str) -> None:
        sandbox = sandbox_of(obj, self.settings)
        notes = obj["metadata"].get("annotations") or {}
        body = {
            "envVars": sealed.unseal(
                self.settings.seed, sandbox.namespace, sandbox.sandbox_id, notes.get(ENV_VARS)
            ),
            "accessToken": sandbox.access_token,
            "defaultWorkdir": self.settings.workdir,
            "timestamp": datetime.now(UTC).isoformat(),
            # Its template's `interpreter`, as the object records it: the port opened for it.
            "codeInterpreter": INTERPRETER_PORT in sandbox.ports,
        }
        headers = {"X-Access-Token": sandbox.access_token}
        answer = await self.http.post(url + "/init", json=body, headers=headers, timeout=10.0)
        if answer.status_code != 204:  # noqa: PLR2004  # HTTP No Content
            raise GatewayError(500, f"the sandbox's agent refused /init: {answer.text[:200]}")

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
