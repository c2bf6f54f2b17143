"""Sandboxes as WorkspaceSandbox objects in each tenant's namespace, through the official client.

The object is the whole state: its name is the sandbox ID (also on a label, so budgets, metrics
and audit events correlate with the workload), the template, start and end times, auto-pause,
metadata and env vars (sealed: see `sealed`) are annotations, pause is `spec.power: Suspended`.
A replica keeps nothing another one needs. An auto-pause sandbox also carries its end time as
`spec.lifetime.suspendAt`, so the platform suspends it even if no gateway is running.

The agent's access token is derived, never stored: HMAC-SHA256 of the namespace and sandbox ID
under a seed only the gateway holds. The namespace is part of it, so a sandbox of the same name
made by hand in another namespace has another token (see `Backend.locate`).

Each replica watches the gateway's sandboxes in every namespace (`sandbox_cache`): the data
plane finds a sandbox in that cache, and create and connect wait on its changes rather than
polling the API server. The cache only saves requests: every answer that matters is also
reachable by a direct call when it misses or falls silent.
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx
from kubernetes.client.exceptions import ApiException

from workspace_gateway import sealed
from workspace_gateway.backend import NewSandbox, Sandbox, State, always, choose
from workspace_gateway.errors import GatewayError, not_found
from workspace_gateway.sandbox_cache import Allowance, Cache, Watcher
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
METADATA, ENV_VARS = f"{PREFIX}metadata", f"{PREFIX}env-vars"
ID_ALPHABET = string.ascii_lowercase + string.digits
ID_LENGTH = 20
AGENT_PORT = 49983
WORKDIR = "/workspace"
READY_SECONDS = 300.0
HEALTH_SECONDS = 0.25  # between two `/health` calls while an agent boots
RECHECK_SECONDS = 5.0  # the API server is asked after this long without a watch event
SYNC_SECONDS = 5.0  # how long `locate` waits for the watch's first list
FALLBACK_PER_SECOND, FALLBACK_BURST = 5.0, 10  # `locate`'s direct lists on a cache miss
MERGE_PATCH = "application/merge-patch+json"
UPDATE_ATTEMPTS = 5
MAX_MESSAGE = 500
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


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    namespace, sandbox_id = where
    end = now.timestamp() + request.timeout
    end_at = datetime.fromtimestamp(end, UTC)
    spec: dict[str, Any] = {**template.spec(), "power": "Running"}
    if request.auto_pause:
        spec["lifetime"] = {"suspendAt": rfc3339(end_at)}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": sandbox_id,
            "labels": {ID_LABEL: sandbox_id},
            "annotations": {
                TEMPLATE: template_name,
                STARTED: now.astimezone(UTC).isoformat(),
                END: end_at.isoformat(),
                AUTO_PAUSE: "true" if request.auto_pause else "false",
                METADATA: json.dumps(request.metadata, sort_keys=True),
                ENV_VARS: sealed.seal(seed, namespace, sandbox_id, request.env_vars),
            },
        },
        "spec": spec,
    }


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


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


def ours(obj: Mapping[str, Any]) -> bool:
    """Made by the gateway: its ID label names it. Anything else in a namespace is not shown."""
    metadata = obj.get("metadata") or {}
    return bool(metadata.get("name")) and (metadata.get("labels") or {}).get(
        ID_LABEL
    ) == metadata.get("name")


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
        endpoint=agent_url(obj, settings.agent_port),
        namespace=metadata["namespace"],
    )


class KubernetesBackend:
    """The Backend over a cluster; `custom` is the client's `CustomObjectsApi`."""

    REAP_EVERY = 5.0  # from the cache: costs the API server nothing

    def __init__(self, custom: Any, settings: Settings, http: httpx.AsyncClient) -> None:
        self.custom = custom
        self.settings = settings
        self.http = http
        self.cache = Cache(ours)
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

    REFILL_EVERY = 5.0

    async def refill(self, leading: Callable[[], bool]) -> None:
        """Nothing yet: the cluster's warm pools are not built on this branch.

        A placeholder so that `main` runs one `refill_forever` for either backend; the
        cluster's pools replace it with the top-up of each tenant's template pools.
        """

    async def ready(self) -> bool:
        """Once the watch has listed: the first readiness probe starts it."""
        return await self._synced()

    async def create(self, namespace: str, request: NewSandbox) -> Sandbox:
        template = self.settings.templates.get(request.template)
        if template is None:
            raise GatewayError(404, f"template {request.template!r} not found")
        sandbox_id = new_id()
        now = datetime.now(UTC)
        where = (namespace, sandbox_id)
        body = manifest(where, request.template, template, request, now, seed=self.settings.seed)
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

    async def get(self, namespace: str, sandbox_id: str) -> Sandbox:
        return sandbox_of(await self._get(namespace, sandbox_id), self.settings)

    async def list(self, namespace: str) -> list[Sandbox]:
        listed = await self._call(
            self.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            label_selector=ID_LABEL,
        )
        return [sandbox_of(o, self.settings) for o in listed.get("items", []) if ours(o)]

    async def suspend(self, namespace: str, sandbox_id: str) -> None:
        def change(obj: Mapping[str, Any]) -> dict[str, Any]:
            if is_paused(obj):
                raise GatewayError(409, f"sandbox {sandbox_id!r} is already paused")
            return {"spec": {"power": "Suspended"}}

        await self._update(namespace, sandbox_id, change)

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
        return sandbox_of(await self._get(namespace, sandbox_id), self.settings), False

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

    async def locate(self, sandbox_id: str, access_token: str | None) -> Sandbox | None:
        """From the watch's cache; on a miss, one direct list, within an allowance.

        A miss is routine for a sandbox another replica made a moment ago, so it is asked of
        the API server, whose answer is the truth. Misses are also what made-up IDs cause, so
        those lists draw on a token bucket (FALLBACK_BURST at once, FALLBACK_PER_SECOND after):
        past it a miss is answered as unknown, and a flood of made-up IDs costs the cluster at
        most that many lists a second per replica, whatever their number.
        """
        if not is_id(sandbox_id):
            return None  # a header's text never reaches a label selector
        await self._synced()
        found: Sequence[dict[str, Any]] = self.cache.named(sandbox_id)
        now = asyncio.get_running_loop().time()
        if not found and self.fallbacks is not None and self.fallbacks.take(now):
            found = await self._listed(sandbox_id)
        return choose([sandbox_of(o, self.settings) for o in found], access_token)

    async def _listed(self, sandbox_id: str) -> tuple[dict[str, Any], ...]:
        listed = await self._call(
            self.custom.list_cluster_custom_object,
            GROUP,
            VERSION,
            PLURAL,
            label_selector=f"{ID_LABEL}={sandbox_id}",
        )
        items = listed.get("items", [])
        return tuple(o for o in items if ours(o) and o["metadata"]["name"] == sandbox_id)

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
            sandbox = sandbox_of(obj, self.settings)
            expired = sandbox.state is State.RUNNING and sandbox.end_at <= now
            if expired and not sandbox.auto_pause and leading():
                version = obj["metadata"].get("resourceVersion")
                with contextlib.suppress(GatewayError):
                    await self._delete(sandbox.namespace, sandbox.sandbox_id, version)

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
        """Wait for the platform to run it and its agent to answer, then `/init` it.

        The object's changes come from the watch; the API server is asked only after
        RECHECK_SECONDS without an event (a watch cut off, or not yet listed), or to confirm a
        deletion. Only the agent is polled, every HEALTH_SECONDS while it boots.
        """
        self.start()
        loop = asyncio.get_running_loop()
        key = (namespace, sandbox_id)
        deadline = loop.time() + self.settings.ready_seconds
        obj = self.cache.get(key)  # the watch's first list, too, wakes `change`
        stale_at = loop.time() + RECHECK_SECONDS
        while (now := loop.time()) < deadline:
            url = agent_url(obj, self.settings.agent_port) if obj is not None else None
            if obj is not None and url is not None:
                version = await self._health(url)
                if version is not None:
                    await self._init(obj, url)
                    return sandbox_of(obj, self.settings, version)
                now = loop.time()
            if now >= stale_at:
                obj = await self._get(namespace, sandbox_id)
                stale_at = loop.time() + RECHECK_SECONDS
                continue
            wait = min(stale_at, deadline) - now
            if url is not None:
                wait = min(wait, HEALTH_SECONDS)
            if await self.cache.change(key, wait):
                obj = self.cache.get(key) or await self._get(namespace, sandbox_id)
                stale_at = loop.time() + RECHECK_SECONDS
        seconds = self.settings.ready_seconds
        raise GatewayError(504, f"sandbox {sandbox_id!r} was not ready within {seconds:.0f} s")

    async def _health(self, url: str) -> str | None:
        try:
            answer = await self.http.get(url + "/health", timeout=2.0)
        except httpx.TransportError:
            return None
        return str(answer.headers.get("x-envd-version", "0.1.0")) if answer.is_success else None

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
        }
        headers = {"X-Access-Token": sandbox.access_token}
        answer = await self.http.post(url + "/init", json=body, headers=headers, timeout=10.0)
        if answer.status_code != 204:  # noqa: PLR2004  # HTTP No Content
            raise GatewayError(500, f"the sandbox's agent refused /init: {answer.text[:200]}")

    async def _get(self, namespace: str, sandbox_id: str) -> dict[str, Any]:
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
        if not ours(obj):
            raise not_found(sandbox_id)
        return dict(obj)

    async def _update(
        self, namespace: str, sandbox_id: str, change: Callable[[Mapping[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """Read, decide, merge-patch at that resourceVersion; read again if it moved meanwhile.

        The platform writes status all the time, so a conflict is routine, not an error. The
        object as it was decided on is returned.
        """
        for _ in range(UPDATE_ATTEMPTS):
            obj = await self._get(namespace, sandbox_id)
            patch = change(obj)
            version = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            patch = {**patch, "metadata": {**patch.get("metadata", {}), **version}}
            try:
                await self._call(
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
