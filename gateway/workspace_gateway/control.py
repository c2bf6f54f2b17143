"""The control API: E2B's routes, checked and turned into Backend calls and E2B-shaped JSON.

The routes of sandboxes are here; snapshots' in `snapshot_routes`, templates' in
`template_routes`. The bodies are checked in `request_bodies` and `listing`, and answered in
`sandbox_json`: plain functions over plain values, tested without sockets.
"""

import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import httpx

from workspace_gateway import idempotency, not_offered
from workspace_gateway.backend import Backend, Snapshot, State
from workspace_gateway.errors import GatewayError
from workspace_gateway.listing import metadata_filter, page, unix_of
from workspace_gateway.reply import Reply
from workspace_gateway.request_bodies import new_sandbox, request_object, timeout_of
from workspace_gateway.sandbox_json import detail_json, listed_json, metric_json, sandbox_json
from workspace_gateway.snapshot_routes import SnapshotRoutes, reads_files
from workspace_gateway.template_routes import TemplateRoutes

PAUSE_MODE = "pause-mode"
"""The header a pause answers with: what it kept, always `filesystem` here."""


async def always() -> bool:
    return True


def now() -> datetime:
    return datetime.now(UTC)


def _refusal(message: str) -> Callable[..., Awaitable[Reply]]:
    async def refuse(*_: object, **__: object) -> Reply:
        raise GatewayError(501, message)

    return refuse


SANDBOX_ID = r"(?P<id>[^/]+)"
SEGMENT = r"(?:[^/]+)"
ALIAS = r"(?P<alias>[^/]+)"
Route = tuple[str, re.Pattern[str], str, Callable[..., Any]]
"""Method, path pattern, the route's template (for the audit log), action."""


class Control:
    """The routes, over one Backend."""

    def __init__(
        self, backend: Backend, domain: str, http: httpx.AsyncClient | None = None
    ) -> None:
        self.backend = backend
        self.domain = domain
        self.http = http
        """For the agents' `/metrics`; without it (route tests) a sandbox has no samples."""
        self.locks = idempotency.Locks()
        self.started = now()
        """When the gateway started: what its templates report as their creation."""
        self.snapshots = SnapshotRoutes(backend, domain)
        self.templates = TemplateRoutes(backend, self.started)
        self.routes = self._routes()

    async def handle(
        self,
        namespace: str,
        method: str,
        path: str,
        query_string: str,
        body: bytes,
        *,
        acts: Callable[[], Awaitable[bool]] = always,
        idempotency_key: str | None = None,
    ) -> Reply:
        """Answer one call of the tenant whose namespace this is; nothing outside it is seen.

        `acts` says whether the caller may act on the namespace's sandboxes, not only read
        them: only then does a read of one include its access token.
        """
        query = parse_qs(query_string, keep_blank_values=True)
        for verb, pattern, _, action in self.routes:
            match = pattern.fullmatch(path)
            if match and verb == method:
                return await action(  # type: ignore[no-any-return]  # the route table erases each action's type
                    *match.groups(),
                    namespace=namespace,
                    query=query,
                    body=body,
                    acts=acts,
                    idempotency_key=idempotency_key,
                )
        if any(p.fullmatch(path) for _, p, _, _ in self.routes):
            raise GatewayError(405, f"{method} is not allowed on {path}")
        raise GatewayError(404, f"no route {path}")

    def resolve(self, method: str, path: str) -> tuple[str, str | None]:
        """The route template and sandbox ID of a call, for the audit log; no raw paths."""
        for verb, pattern, template, _ in self.routes:
            match = pattern.fullmatch(path)
            if match and verb == method:
                return f"{method} {template}", match.groupdict().get("id")
        return f"{method} (no route)", None

    def _routes(self) -> list[Route]:
        def one(template: str) -> re.Pattern[str]:
            pattern = template.replace("{id}", SANDBOX_ID).replace("{name}", SEGMENT)
            pattern = pattern.replace("{alias}", ALIAS)
            return re.compile(pattern.replace("{v2}", "(?:v2/)?"))

        refused = [(r.method, r.template, _refusal(r.message)) for r in not_offered.ROUTES]
        # A fixed path first: GET /sandboxes/metrics is not the sandbox "metrics".
        table: list[tuple[str, str, Callable[..., Any]]] = [
            *(r for r in refused if "{" not in r[1]),
            ("POST", "/{v2}sandboxes", self.create),
            ("GET", "/v2/sandboxes", self.list_all),
            ("GET", "/sandboxes", self.list_running),
            ("POST", "/{v2}sandboxes/{id}/connect", self.connect),
            ("GET", "/sandboxes/{id}", self.get),
            ("DELETE", "/sandboxes/{id}", self.kill),
            ("POST", "/sandboxes/{id}/timeout", self.timeout),
            ("POST", "/sandboxes/{id}/pause", self.pause),
            ("GET", "/sandboxes/{id}/metrics", self.metrics),
            ("POST", "/sandboxes/{id}/snapshots", self.snapshots.take_snapshot),
            ("POST", "/sandboxes/{id}/fork", self.snapshots.fork),
            ("GET", "/snapshots", self.snapshots.list_snapshots),
            ("DELETE", "/templates/{alias}", self.snapshots.delete_template),
            # Before the routes not offered, where /templates/{name} would take it.
            ("GET", "/templates/aliases/{alias}", self.templates.template_alias),
            ("GET", "/templates", self.templates.list_templates),
            ("GET", "/templates/{alias}", self.templates.get_template),
            ("GET", "/templates/{alias}/tags", self.templates.template_tags),
            *(r for r in refused if "{" in r[1]),
        ]
        return [(verb, one(t), t.replace("{v2}", ""), action) for verb, t, action in table]

    async def create(
        self,
        *,
        namespace: str,
        body: bytes,
        idempotency_key: str | None,
        acts: Callable[[], Awaitable[bool]],
        **_: object,
    ) -> Reply:
        key = idempotency.key_of(idempotency_key)
        request = replace(new_sandbox(request_object(body)), idempotency_key=key)
        restore = Snapshot.of(request.template)
        if restore is not None:
            await reads_files(acts)
            request = await self.snapshots.restoring(namespace, request, restore)
        elif request.template not in self.backend.templates():
            raise GatewayError(404, f"template {request.template!r} not found")
        if key is None:
            sandbox = await self.backend.create(namespace, request)
        else:
            async with self.locks.hold(namespace, key):
                sandbox = await self.backend.create(namespace, request)
        return Reply(201, sandbox_json(sandbox, self.domain))

    async def connect(self, sandbox_id: str, *, namespace: str, body: bytes, **_: object) -> Reply:
        timeout = timeout_of(request_object(body).get("timeout"))
        sandbox, resumed = await self.backend.resume(
            namespace, sandbox_id, now() + timedelta(seconds=timeout)
        )
        return Reply(201 if resumed else 200, sandbox_json(sandbox, self.domain))

    async def get(
        self, sandbox_id: str, *, namespace: str, acts: Callable[[], Awaitable[bool]], **_: object
    ) -> Reply:
        sandbox = await self.backend.get(namespace, sandbox_id)
        return Reply(200, detail_json(sandbox, self.domain, token=await acts()))

    async def list_all(self, *, namespace: str, query: dict[str, list[str]], **_: object) -> Reply:
        return page(await self.backend.list(namespace), query)

    async def list_running(
        self, *, namespace: str, query: dict[str, list[str]], **_: object
    ) -> Reply:
        """The v1 list: running sandboxes only, one page."""
        wanted = metadata_filter((query.get("metadata") or [""])[-1])
        return Reply(
            200,
            [
                listed_json(s)
                for s in await self.backend.list(namespace)
                if s.state is State.RUNNING
                and all(s.metadata.get(k) == v for k, v in wanted.items())
            ],
        )

    async def kill(self, sandbox_id: str, *, namespace: str, **_: object) -> Reply:
        await self.backend.delete(namespace, sandbox_id)
        return Reply(204)

    async def timeout(self, sandbox_id: str, *, namespace: str, body: bytes, **_: object) -> Reply:
        value = request_object(body).get("timeout")
        if value is None:
            raise GatewayError(400, "timeout is required")
        seconds = timeout_of(value)
        await self.backend.set_end(namespace, sandbox_id, now() + timedelta(seconds=seconds))
        return Reply(204)

    async def pause(self, sandbox_id: str, *, namespace: str, body: bytes, **_: object) -> Reply:
        """A filesystem pause, whatever `memory` says.

        SDKs before 2.63 send `memory: true` on every pause, so it cannot be refused. The answer
        says what was kept (`Pause-Mode: filesystem`), as the sandbox's `pauseMode` does.
        """
        memory = request_object(body).get("memory")
        if memory is not None and not isinstance(memory, bool):
            raise GatewayError(400, "memory must be true or false")
        await self.backend.suspend(namespace, sandbox_id)
        return Reply(204, headers=((PAUSE_MODE, "filesystem"),))

    async def metrics(
        self, sandbox_id: str, *, namespace: str, query: dict[str, list[str]], **_: object
    ) -> Reply:
        """`get_metrics`: the sample the agent takes now, if it falls in `start`..`end`.

        No history is kept, so a paused sandbox has none, and a range in the past is empty.
        """
        start, end = (unix_of(query, name) for name in ("start", "end"))
        sandbox = await self.backend.get(namespace, sandbox_id)
        if sandbox.state is not State.RUNNING or sandbox.endpoint is None or self.http is None:
            return Reply(200, [])
        headers = {"X-Access-Token": sandbox.access_token}
        try:
            answer = await self.http.get(sandbox.endpoint + "/metrics", headers=headers, timeout=10)
        except httpx.HTTPError as e:
            raise GatewayError(502, f"the sandbox's agent did not answer /metrics: {e}") from None
        if answer.status_code != 200:  # noqa: PLR2004  # the one success
            raise GatewayError(502, f"the sandbox's agent answered /metrics {answer.status_code}")
        sample = metric_json(answer.json())
        ts = sample["timestampUnix"]
        inside = (start is None or start <= ts) and (end is None or ts <= end)
        return Reply(200, [sample] if inside else [])
