"""The control API: E2B's routes, checked and turned into Backend calls and E2B-shaped JSON.

Everything here but `handle` is plain functions over plain values, tested without sockets.
"""

import asyncio
import base64
import binascii
import ipaddress
import json
import re
import secrets
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, parse_qsl, unquote

import httpx

from workspace_gateway import credentials, idempotency, not_offered
from workspace_gateway.backend import Backend, NewSandbox, Sandbox, Snapshot, State
from workspace_gateway.errors import GatewayError
from workspace_gateway.times import rfc3339

DEFAULT_TIMEOUT = 300
MAX_TIMEOUT = 24 * 3600  # E2B's cap for its Pro tier
MAX_FORKS = 20  # the SDK's own bound
PAUSE_MODE = "pause-mode"
"""The header a pause answers with: what it kept, always `filesystem` here."""
DEFAULT_LIMIT = 100
MAX_LIMIT = 100
CLIENT_ID = "workspace-sandbox-gateway"

# Create fields this gateway can't honour; a request naming them gets a clear 400, never a
# sandbox without what it asked for.
NOT_OFFERED = ("mcp", "iam", "volumeMounts")
# E2B's `network` settings that map onto the sandbox's egress (`egress_of`); the others
# (a proxy, request rewriting, public URLs, DNS servers to open) are refused like the above.
NETWORK_OFFERED = ("allowOut", "denyOut")
# The WorkspaceSandbox's limit on allow-list entries (deploy/xrd.yaml).
MAX_ALLOWED = 64
ALL_TRAFFIC = frozenset({"0.0.0.0/0", "::/0"})


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()


async def always() -> bool:
    return True


def now() -> datetime:
    return datetime.now(UTC)


def sandbox_json(sandbox: Sandbox, domain: str) -> dict[str, Any]:
    """The `Sandbox` body of create and connect."""
    return {
        "templateID": sandbox.template,
        "sandboxID": sandbox.sandbox_id,
        "clientID": CLIENT_ID,
        "envdVersion": sandbox.envd_version,
        "envdAccessToken": sandbox.access_token,
        # Not E2B's (whose is null for public previews): what the code interpreter SDK sends
        # to its port for contexts, where it sends no access token (`credentials`).
        "trafficAccessToken": credentials.traffic_token(sandbox.access_token),
        # Always: without it the SDK falls back to e2b.app and sends envd traffic there.
        "domain": domain,
    }


def listed_json(sandbox: Sandbox) -> dict[str, Any]:
    """`ListedSandbox`: no access token in a list."""
    return {
        "templateID": sandbox.template,
        "sandboxID": sandbox.sandbox_id,
        "clientID": CLIENT_ID,
        "startedAt": rfc3339(sandbox.started_at),
        "endAt": rfc3339(sandbox.end_at),
        "envdVersion": sandbox.envd_version,
        "cpuCount": sandbox.cpu_count,
        "memoryMB": sandbox.memory_mb,
        "diskSizeMB": sandbox.disk_size_mb,
        "state": sandbox.state.value,
        "metadata": sandbox.metadata,
    }


def detail_json(sandbox: Sandbox, domain: str, *, token: bool = True) -> dict[str, Any]:
    """`SandboxDetail`: the pause keeps files, not memory, so `pauseMode` is `filesystem`.

    Without `token` (a caller who may only read the sandbox) `envdAccessToken` is left out:
    the token runs commands as root in the sandbox and reads its env vars.
    """
    secret = {"envdAccessToken": sandbox.access_token} if token else {}
    return {
        **listed_json(sandbox),
        **secret,
        "domain": domain,
        "lifecycle": {
            "autoResume": False,
            "onTimeout": "pause" if sandbox.auto_pause else "kill",
        },
        "pauseMode": "filesystem",
    }


def metric_json(envd: dict[str, Any]) -> dict[str, Any]:
    """`SandboxMetric` from the agent's envd `/metrics` sample."""
    try:
        ts = int(envd["ts"])
        return {
            "timestamp": rfc3339(datetime.fromtimestamp(ts, UTC)),
            "timestampUnix": ts,
            "cpuCount": int(envd["cpu_count"]),
            "cpuUsedPct": float(envd["cpu_used_pct"]),
            "memUsed": int(envd["mem_used"]),
            "memTotal": int(envd["mem_total"]),
            "memCache": int(envd.get("mem_cache", 0)),
            "diskUsed": int(envd["disk_used"]),
            "diskTotal": int(envd["disk_total"]),
        }
    except (KeyError, TypeError, ValueError):
        raise GatewayError(502, "the sandbox's agent answered /metrics with no sample") from None


def _unix(query: dict[str, list[str]], name: str) -> int | None:
    text = _one(query, name)
    if text is None or text == "":
        return None
    if not text.isdigit():
        raise GatewayError(400, f"{name} must be a time in Unix seconds")
    return int(text)


def timeout_of(value: object, field: str = "timeout") -> int:
    if value is None:
        return DEFAULT_TIMEOUT
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TIMEOUT:
        raise GatewayError(
            400, f"{field} must be a whole number of seconds from 0 to {MAX_TIMEOUT}"
        )
    return value


def _strings(body: dict[str, Any], field: str) -> dict[str, str]:
    value = body.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise GatewayError(400, f"{field} must be an object of strings")
    return dict(value)


def _strings_list(value: object, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise GatewayError(400, f"{field} must be a list of non-empty strings")
    return list(value)


def _allowed(entry: str, field: str) -> dict[str, str]:
    """One `allowOut` entry as an allow-list entry: an address, a range, or a host name."""
    try:
        address = ipaddress.ip_address(entry)
    except ValueError:
        pass
    else:
        return {"cidr": str(ipaddress.ip_network(address))}
    if "/" in entry:
        try:
            return {"cidr": str(ipaddress.ip_network(entry, strict=True))}
        except ValueError as e:
            raise GatewayError(400, f"{field}: {entry!r} is not an address range: {e}") from None
    return {"fqdn": entry.lower()}


def public_traffic(body: dict[str, Any]) -> bool:
    """`network.allowPublicTraffic`: previews are public unless it says false."""
    network = body.get("network")
    public = network.get("allowPublicTraffic") if isinstance(network, dict) else None
    if public is not None and not isinstance(public, bool):
        raise GatewayError(400, "network.allowPublicTraffic must be true or false")
    return public is not False


def egress_of(body: dict[str, Any]) -> dict[str, Any] | None:
    """The sandbox's `spec.network` that E2B's egress settings stand for; None: unrestricted.

    In E2B, `denyOut` takes address ranges, `allowOut` wins over it and also takes host names,
    and `allow_internet_access: false` denies all traffic. A sandbox here reaches the internet
    (less what the platform always denies), only an allow-list, or nothing; so `denyOut` may
    only deny all traffic, which is what makes `allowOut` a list of what alone is reached.
    """
    internet = body.get("allow_internet_access")
    if internet is not None and not isinstance(internet, bool):
        raise GatewayError(400, "allow_internet_access must be true or false")
    network = body.get("network")
    if network is None:
        network = {}
    if not isinstance(network, dict):
        raise GatewayError(400, "network must be an object")
    for name in sorted(network):
        if name not in {*NETWORK_OFFERED, "allowPublicTraffic"} and network[name] is not None:
            raise GatewayError(400, f"'network.{name}' is not offered by this gateway")
    denied = network.get("denyOut")
    denied = [] if denied is None else _strings_list(denied, "network.denyOut")
    partly = sorted(set(denied) - ALL_TRAFFIC)
    if partly:
        raise GatewayError(
            400,
            f"network.denyOut: only all traffic (0.0.0.0/0) can be denied here, not {partly[0]}: "
            "the platform already denies private and reserved ranges; list what to reach in "
            "network.allowOut instead",
        )
    allowed = network.get("allowOut")
    allowed = [] if allowed is None else _strings_list(allowed, "network.allowOut")
    if len(allowed) > MAX_ALLOWED:
        raise GatewayError(400, f"network.allowOut: at most {MAX_ALLOWED} entries")
    if (internet is not False and not denied) or ALL_TRAFFIC & set(allowed):
        return None  # allowOut alone, or allowing all traffic, allows what is allowed anyway
    if not allowed:
        return {"egress": "None"}
    entries = [_allowed(entry, "network.allowOut") for entry in allowed]
    unique = list({tuple(sorted(e.items())): e for e in entries}.values())
    return {"egress": "Allowlist", "allow": unique}


def new_sandbox(body: dict[str, Any]) -> NewSandbox:
    """A create request (v1 or v2), checked."""
    for name in NOT_OFFERED:
        if body.get(name) is not None:
            raise GatewayError(400, f"{name!r} is not offered by this gateway")
    network = egress_of(body)
    resume = body.get("autoResume")
    if isinstance(resume, dict) and resume.get("enabled"):
        raise GatewayError(400, "'autoResume' is not offered by this gateway")
    template = body.get("templateID", "base")
    if not isinstance(template, str) or not template:
        raise GatewayError(400, "templateID must be a non-empty string")
    auto_pause = body.get("autoPause", False)
    if not isinstance(auto_pause, bool):
        raise GatewayError(400, "autoPause must be true or false")
    return NewSandbox(
        template=template,
        timeout=timeout_of(body.get("timeout")),
        metadata=_strings(body, "metadata"),
        env_vars=_strings(body, "envVars"),
        auto_pause=auto_pause,
        network=network,
        public_traffic=public_traffic(body),
    )


SNAPSHOT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?")
"""A name of `spec.snapshots`: a DNS label of at most 40 characters."""


def snapshot_json(snapshot: Snapshot) -> dict[str, Any]:
    """`SnapshotInfo`, and what kind of snapshot it is: E2B's fields, then this gateway's."""
    return {
        "snapshotID": snapshot.snapshot_id,
        "names": [snapshot.name],
        "sandboxID": snapshot.sandbox_id,
        "memory": False,
        "kind": "filesystem",
        "readyToUse": snapshot.ready,
    }


def template_build(name: str) -> str:
    """A template's one build, as a UUID: the same for its name on every replica."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"workspace-sandbox-gateway:template:{name}"))


def metadata_filter(raw: str) -> dict[str, str]:
    """The `metadata` list filter, whose outer layer of quoting the query parser took off.

    The SDK quotes each key and value, urlencodes the pairs, and its HTTP client quotes the
    whole again: what is left here is the pairs, each part still quoted once.
    """
    try:
        return {
            unquote(k, errors="strict"): unquote(v, errors="strict")
            for k, v in parse_qsl(raw, keep_blank_values=True, strict_parsing=bool(raw))
        }
    except (ValueError, UnicodeDecodeError):
        raise GatewayError(400, f"metadata filter {raw!r} is not key=value pairs") from None


def _key(sandbox: Sandbox) -> tuple[int, str]:
    moment = sandbox.started_at
    return (int(moment.timestamp() * 1_000_000), sandbox.sandbox_id)


def page_token(sandbox: Sandbox) -> str:
    """Where the next page starts: after this sandbox, so deletions in between skip nothing."""
    micros, sandbox_id = _key(sandbox)
    return base64.urlsafe_b64encode(f"{micros}:{sandbox_id}".encode()).decode().rstrip("=")


def token_key(token: str) -> tuple[int, str]:
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        micros, sandbox_id = text.split(":", 1)
        if not re.fullmatch(r"[a-z0-9]+", sandbox_id):
            raise ValueError
        return int(micros), sandbox_id
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise GatewayError(400, "nextToken is not a token this gateway gave out") from None


def _one(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


def started_after(text: str | None) -> datetime | None:
    """The `startedAfter` list filter: an RFC 3339 time with its offset, as the SDK sends it."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise GatewayError(
            400,
            f"startedAfter {text!r} is not an RFC 3339 time with an offset, such as "
            "2026-12-03T07:00:00Z (a + in the query is sent as %2B)",
        )
    return moment


def page(sandboxes: list[Sandbox], query: dict[str, list[str]]) -> Reply:
    """`GET /v2/sandboxes`: filter by metadata, state, template and start, order, then a page.

    `template` matches the template a sandbox was created from, by the name it was asked for
    (this gateway's templates have no separate IDs); `startedAfter` keeps the sandboxes started
    at or after that time.
    """
    wanted = metadata_filter(_one(query, "metadata") or "")
    template = _one(query, "template")
    since = started_after(_one(query, "startedAfter"))
    states_text = _one(query, "state")
    states = set(State) if not states_text else set()
    for name in (states_text or "").split(","):
        if name:
            try:
                states.add(State(name))
            except ValueError:
                raise GatewayError(400, f"state {name!r} is not running or paused") from None
    order = _one(query, "order") or "desc"
    if order not in {"asc", "desc"}:
        raise GatewayError(400, "order must be asc or desc")
    limit = _limit(query)
    chosen = sorted(
        (
            s
            for s in sandboxes
            if s.state in states
            and all(s.metadata.get(k) == v for k, v in wanted.items())
            and (not template or s.template == template)
            and (since is None or s.started_at >= since)
        ),
        key=_key,
        reverse=order == "desc",
    )
    token = _one(query, "nextToken")
    if token:
        after = token_key(token)
        chosen = [s for s in chosen if (_key(s) < after if order == "desc" else _key(s) > after)]
    headers = (("x-next-token", page_token(chosen[limit - 1])),) if len(chosen) > limit else ()
    return Reply(200, [listed_json(s) for s in chosen[:limit]], headers)


async def _reads_files(acts: Callable[[], Awaitable[bool]]) -> None:
    """Refuse a caller who may not act on the namespace's sandboxes a restore or a fork.

    Either hands its caller a copy of a sandbox's files, with the copy's token: as much as a
    read of the sandbox's own token gives, which needs the same right.
    """
    if not await acts():
        raise GatewayError(
            403,
            "a restore or a fork gives you a copy of a sandbox's files: it needs the right to "
            "act on the namespace's sandboxes (update on workspacesandboxes), not only to "
            "create them",
        )


def _limit(query: dict[str, list[str]]) -> int:
    text = _one(query, "limit")
    if text is None:
        return DEFAULT_LIMIT
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise GatewayError(400, f"limit must be from 1 to {MAX_LIMIT}")
    return int(text)


def _object(body: bytes) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except ValueError:
        raise GatewayError(400, "the request body is not valid JSON") from None
    if not isinstance(value, dict):
        raise GatewayError(400, "the request body must be a JSON object")
    return value


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
        self.routes = self._routes()
        self.started = now()
        """When the gateway started: what its templates report as their creation."""

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
            ("POST", "/sandboxes/{id}/snapshots", self.take_snapshot),
            ("POST", "/sandboxes/{id}/fork", self.fork),
            ("GET", "/snapshots", self.list_snapshots),
            ("DELETE", "/templates/{alias}", self.delete_template),
            # Before the routes not offered, where /templates/{name} would take it.
            ("GET", "/templates/aliases/{alias}", self.template_alias),
            ("GET", "/templates", self.list_templates),
            ("GET", "/templates/{alias}", self.get_template),
            ("GET", "/templates/{alias}/tags", self.template_tags),
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
        request = replace(new_sandbox(_object(body)), idempotency_key=key)
        restore = Snapshot.of(request.template)
        if restore is not None:
            await _reads_files(acts)
            request = await self._restoring(namespace, request, restore)
        elif request.template not in self.backend.templates():
            raise GatewayError(404, f"template {request.template!r} not found")
        if key is None:
            sandbox = await self.backend.create(namespace, request)
        else:
            async with self.locks.hold(namespace, key):
                sandbox = await self.backend.create(namespace, request)
        return Reply(201, sandbox_json(sandbox, self.domain))

    async def _restoring(
        self, namespace: str, request: NewSandbox, restore: Snapshot
    ) -> NewSandbox:
        """A create from a snapshot (`Sandbox.create(snapshot_id)`): its sandbox's template."""
        known = {s.snapshot_id: s for s in await self.backend.snapshots(namespace)}
        found = known.get(restore.snapshot_id)
        if found is None:
            raise GatewayError(404, f"snapshot {restore.snapshot_id!r} not found")
        if not found.ready:
            raise GatewayError(
                409, f"snapshot {restore.snapshot_id!r} is still being taken; try again shortly"
            )
        source = await self.backend.get(namespace, restore.sandbox_id)
        return replace(request, template=source.template, restore=found)

    async def take_snapshot(
        self, sandbox_id: str, *, namespace: str, body: bytes, **_: object
    ) -> Reply:
        """`create_snapshot`: a filesystem snapshot, which the answer says it is."""
        asked = _object(body)
        if asked.get("memory") is True:
            raise GatewayError(501, not_offered.MEMORY)
        if asked.get("memory") not in {None, False}:
            raise GatewayError(400, "memory must be true or false")
        name = asked.get("name")
        if name is None:
            name = "snap-" + secrets.token_hex(4)
        elif not isinstance(name, str) or not SNAPSHOT_NAME.fullmatch(name):
            raise GatewayError(
                400,
                f"name {name!r}: a snapshot's name here is a DNS label of at most 40 characters "
                "(lower-case letters, digits and '-'), with no project or tag",
            )
        taken = await self.backend.snapshot(namespace, sandbox_id, name)
        return Reply(201, snapshot_json(taken))

    async def fork(
        self,
        sandbox_id: str,
        *,
        namespace: str,
        body: bytes,
        acts: Callable[[], Awaitable[bool]],
        **_: object,
    ) -> Reply:
        """`fork`: `count` sandboxes from one filesystem snapshot of this one, taken now.

        The snapshot (`fork-...`) is kept, listed with the others; the forks have the source's
        files, template, metadata, egress and preview privacy, and none of its processes.
        """
        asked = _object(body)
        timeout = timeout_of(asked.get("timeout"))
        count = asked.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_FORKS:
            raise GatewayError(400, f"count must be a whole number from 1 to {MAX_FORKS}")
        source = await self.backend.get(namespace, sandbox_id)
        await _reads_files(acts)
        taken = await self.backend.snapshot(namespace, sandbox_id, "fork-" + secrets.token_hex(4))
        if not taken.ready:
            raise GatewayError(
                504,
                f"the fork's snapshot {taken.snapshot_id!r} is not ready yet: create sandboxes "
                "from it with Sandbox.create once list_snapshots says it is",
            )
        request = NewSandbox(
            template=source.template,
            timeout=timeout,
            metadata=dict(source.metadata),
            auto_pause=source.auto_pause,
            network=source.network,
            public_traffic=source.public_traffic,
            restore=taken,
        )
        made = await asyncio.gather(
            *(self.backend.create(namespace, request) for _ in range(count)),
            return_exceptions=True,
        )
        results: list[dict[str, Any]] = []
        for one in made:
            if isinstance(one, Sandbox):
                results.append({"sandbox": sandbox_json(one, self.domain)})
            elif isinstance(one, GatewayError):
                results.append({"error": one.body()})
            else:
                raise one
        return Reply(201, results)

    async def list_snapshots(
        self, *, namespace: str, query: dict[str, list[str]], **_: object
    ) -> Reply:
        """`list_snapshots`: by sandbox and by name (or ID), a page at a time."""
        sandbox_id, name = _one(query, "sandboxID"), _one(query, "name")
        limit = _limit(query)
        chosen = sorted(
            (
                s
                for s in await self.backend.snapshots(namespace)
                if (not sandbox_id or s.sandbox_id == sandbox_id)
                and (not name or name in {s.name, s.snapshot_id})
            ),
            key=lambda s: s.snapshot_id,
        )
        token = _one(query, "nextToken")
        if token:
            chosen = [s for s in chosen if s.snapshot_id > token]
        headers = (("x-next-token", chosen[limit - 1].snapshot_id),) if len(chosen) > limit else ()
        return Reply(200, [snapshot_json(s) for s in chosen[:limit]], headers)

    async def delete_template(self, name: str, *, namespace: str, **_: object) -> Reply:
        """`delete_snapshot` (E2B's snapshots are templates); any other template is refused."""
        snapshot = Snapshot.of(name)
        if snapshot is None:
            raise GatewayError(501, not_offered.TEMPLATES)
        await self.backend.delete_snapshot(namespace, snapshot)
        return Reply(204)

    async def connect(self, sandbox_id: str, *, namespace: str, body: bytes, **_: object) -> Reply:
        timeout = timeout_of(_object(body).get("timeout"))
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
        value = _object(body).get("timeout")
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
        memory = _object(body).get("memory")
        if memory is not None and not isinstance(memory, bool):
            raise GatewayError(400, "memory must be true or false")
        await self.backend.suspend(namespace, sandbox_id)
        return Reply(204, headers=((PAUSE_MODE, "filesystem"),))

    async def template_alias(self, name: str, **_: object) -> Reply:
        """`Template.exists`: the templates of this gateway's mapping, the same for everyone."""
        if name not in self.backend.templates():
            raise GatewayError(404, f"template {name!r} not found")
        return Reply(200, {"templateID": name, "public": True})

    def _template(self, name: str) -> dict[str, Any]:
        """E2B's `Template`, from the mapping: one build, ready, the only tag `default`."""
        cpu, memory, disk = self.backend.figures(name)
        return {
            "templateID": name,
            "buildID": template_build(name),
            "cpuCount": cpu,
            "memoryMB": memory,
            "diskSizeMB": disk,
            "public": True,
            "aliases": [name],
            "names": [name],
            "createdAt": rfc3339(self.started),
            "updatedAt": rfc3339(self.started),
            "createdBy": None,
            "lastSpawnedAt": None,
            "spawnCount": 0,
            "buildCount": 1,
            "envdVersion": "",
            "buildStatus": "ready",
        }

    async def list_templates(self, **_: object) -> Reply:
        """`GET /templates`: the mapping's templates (E2B CLI's `template list`)."""
        return Reply(200, [self._template(n) for n in sorted(self.backend.templates())])

    async def get_template(self, name: str, **_: object) -> Reply:
        if name not in self.backend.templates():
            raise GatewayError(404, f"template {name!r} not found")
        template = self._template(name)
        build = {
            "buildID": template["buildID"],
            "status": "ready",
            "createdAt": template["createdAt"],
            "updatedAt": template["updatedAt"],
            "finishedAt": template["createdAt"],
            "cpuCount": template["cpuCount"],
            "memoryMB": template["memoryMB"],
            "diskSizeMB": template["diskSizeMB"],
        }
        return Reply(200, {**template, "builds": [build]})

    async def template_tags(self, name: str, **_: object) -> Reply:
        """`Template.get_tags`: a mapping's template has one build, tagged `default`."""
        if name not in self.backend.templates():
            raise GatewayError(404, f"template {name!r} not found")
        created = rfc3339(self.started)
        return Reply(
            200, [{"tag": "default", "buildID": template_build(name), "createdAt": created}]
        )

    async def metrics(
        self, sandbox_id: str, *, namespace: str, query: dict[str, list[str]], **_: object
    ) -> Reply:
        """`get_metrics`: the sample the agent takes now, if it falls in `start`..`end`.

        No history is kept, so a paused sandbox has none, and a range in the past is empty.
        """
        start, end = (_unix(query, name) for name in ("start", "end"))
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
