"""One listener, two sides: a sandbox's data plane, chosen by header or Host, else the control API.

The control API needs a key on every call, and acts only in that key's namespace. The data plane
needs no API key (the SDK sends none to a sandbox): the sandbox's own access token is the
authority there. The gateway checks it before forwarding anything (`credentials`): a request
that carries neither the token nor a signature made with it is answered 401 and never reaches
the sandbox, so an agent that restarted, and holds no token until the gateway's `/init` runs
again (`Reinits`), is never open to someone who merely knows the sandbox's ID. The agent then
checks the token a second time.
"""

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import httpx

from workspace_gateway import audit, credentials, idempotency, previews, proxy
from workspace_gateway.asgi import ASGIApp, Receive, Scope, Send, header, respond_json
from workspace_gateway.backend import INTERPRETER_PORT, Backend, Sandbox, State, choose
from workspace_gateway.control import Control
from workspace_gateway.errors import GatewayError
from workspace_gateway.keys import NAMESPACE_HEADER, Keys

log = logging.getLogger("workspace_gateway")

HOST_ROUTE = re.compile(r"(?P<port>[0-9]{1,5})-(?P<id>[a-z0-9]+)\.(?P<domain>.+)")
PORT = re.compile(r"[0-9]{1,5}")
MAX_PORT = 65535
MAX_CONTROL_BODY = 1 << 20
UNAUTHORIZED = GatewayError(401, "Invalid API key, please check your X-API-Key header")
NO_CREDENTIAL = GatewayError(
    401, "missing or invalid access token: send the sandbox's X-Access-Token, or a signed URL"
)


@dataclass(frozen=True)
class Target:
    """Where a data-plane request goes: a sandbox and the port asked for on it."""

    sandbox_id: str
    port: int


def route(headers: dict[str, str], domain: str) -> Target | None:
    """The sandbox a request is for, or None for the control API.

    `headers` are lower-cased names. The header form is what the SDK sends with
    `E2B_SANDBOX_URL`; the Host form is `<port>-<id>.<domain>`, its own port ignored.
    """
    sandbox_id = headers.get("e2b-sandbox-id")
    if sandbox_id is not None:
        port = headers.get("e2b-sandbox-port", str(proxy.ENVD_PORT))
        # Anything but a port (non-ASCII digits, thousands of them) is no port: a 502, not a 500.
        return Target(sandbox_id, int(port) if PORT.fullmatch(port) else -1)
    host = headers.get("host", "").rsplit(":", 1)[0] if "]" not in headers.get("host", "") else ""
    match = HOST_ROUTE.fullmatch(host.lower())
    if match and match["domain"] == domain.lower():
        return Target(match["id"], int(match["port"]))
    return None


def credential(scope: Scope) -> str | None:
    """The API key or token: `X-API-Key` (all the SDK sends), else `Authorization: Bearer`."""
    given = header(scope, "x-api-key")
    if given is not None:
        return given
    scheme, _, token = (header(scope, "authorization") or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class Reinits:
    """One `/init` at a time per sandbox, however many requests find its agent restarted."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.running: dict[tuple[str, str], asyncio.Future[None]] = {}

    def run(self, sandbox: Sandbox) -> Callable[[], Awaitable[None]]:
        key = (sandbox.namespace, sandbox.sandbox_id)

        async def again() -> None:
            task = self.running.get(key)
            if task is None:
                task = asyncio.ensure_future(self.backend.reinit(sandbox))
                self.running[key] = task
                task.add_done_callback(self._done(key))
            await asyncio.shield(task)

        return again

    def _done(self, key: tuple[str, str]) -> Callable[[asyncio.Future[None]], None]:
        def done(task: asyncio.Future[None]) -> None:
            self.running.pop(key, None)
            if not task.cancelled():
                task.exception()  # each waiter has it; none left must not make it "unretrieved"

        return done


def build_app(
    backend: Backend,
    http: httpx.AsyncClient,
    *,
    keys: Keys,
    domain: str,
    streams: proxy.Streams | None = None,
) -> ASGIApp:
    """The gateway's ASGI app; `streams` caps the data plane's (default: proxy's defaults).

    Previews are counted apart, under the same caps: they are public, so whoever has a sandbox's
    ID can hold its namespace's preview streams, but never the streams its SDK calls need.
    """
    control = Control(backend, domain, http)
    streams = streams or proxy.Streams()
    previewing = proxy.Streams(streams.most, streams.per_tenant)
    reinits = Reinits(backend)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in {"http", "websocket"}:
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        target = route(headers, domain)
        if scope["type"] == "websocket":
            await _websocket(backend, target, scope, receive, send, previewing)
            return
        if target is None and (scope["method"], scope["path"]) == ("GET", "/health"):
            # E2B's API answers this without a key; probes call it, so it is not audited.
            ready = await backend.ready()
            await respond_json(send, 200 if ready else 503, {"ready": ready})
            return
        entry = audit.Entry()
        current = audit.CURRENT.set(entry)
        receive, send = entry.counting(receive, send)
        try:
            if target is None:
                entry.route, entry.sandbox_id = control.resolve(scope["method"], scope["path"])
                if unroutable_signed_url(scope):
                    raise GatewayError(421, UNROUTABLE_SIGNED_URL)
                await _control(control, keys, entry, scope, receive, send)
            else:
                entry.sandbox_id = target.sandbox_id
                entry.route = f"{scope['method']} sandbox:{target.port} {scope['path']}"
                await _sandbox(
                    backend,
                    http,
                    target,
                    entry,
                    reinits=reinits,
                    scope=scope,
                    receive=receive,
                    send=send,
                    streams=streams,
                    previewing=previewing,
                )
        except GatewayError as e:
            await respond_json(send, e.status, e.body())
        finally:
            audit.CURRENT.reset(current)
            audit.write(entry)

    return app


UNROUTABLE_SIGNED_URL = (
    "this signed file URL names no sandbox: over plain HTTP the SDK routes to a sandbox by a "
    "header a browser or curl doesn't send. Serve the gateway with a domain and TLS, so that "
    "download_url and upload_url read https://49983-<sandbox id>.<domain>/files "
    "(docs/gateway.md, HTTPS), or read and write the file through the SDK"
)


def unroutable_signed_url(scope: Scope) -> bool:
    """A sandbox's signed `/files` URL that reached the control API: it has no sandbox ID."""
    if scope["path"] != "/files":
        return False
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return "signature" in query


async def _control(  # noqa: PLR0917  # the ASGI call's parts
    control: Control, keys: Keys, entry: audit.Entry, scope: Scope, receive: Receive, send: Send
) -> None:
    principal = await keys.principal(credential(scope), namespace=header(scope, NAMESPACE_HEADER))
    if principal is None:
        raise UNAUTHORIZED
    entry.key_id, entry.namespace = principal.key_id, principal.namespace
    await keys.authorize(principal, entry.route)
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if len(body) > MAX_CONTROL_BODY:
            raise GatewayError(413, "the request body is larger than 1 MiB")
        if not message.get("more_body", False):
            break
    reply = await control.handle(
        principal.namespace,
        scope["method"],
        scope["path"],
        scope.get("query_string", b"").decode("latin-1"),
        body,
        acts=lambda: keys.acts(principal),
        idempotency_key=header(scope, idempotency.HEADER),
    )
    await respond_json(send, reply.status, reply.body, reply.headers)


async def _sandbox(
    backend: Backend,
    http: httpx.AsyncClient,
    target: Target,
    entry: audit.Entry,
    *,
    reinits: Reinits,
    scope: Scope,
    receive: Receive,
    send: Send,
    streams: proxy.Streams,
    previewing: proxy.Streams,
) -> None:
    if not proxy.origin_form(scope):
        raise GatewayError(400, "the request's target must be a path that starts with one /")
    if target.port == proxy.ENVD_PORT and proxy.internal(scope["path"]):
        raise GatewayError(403, f"{scope['path']} is not reachable from outside the sandbox")
    query = scope.get("query_string", b"").decode("latin-1")
    parameters = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
    presented = header(scope, "x-access-token")
    if target.port == proxy.ENVD_PORT and presented is None and "signature" not in parameters:
        # Nothing to check: refused before any look-up, which a made-up ID would cost.
        raise NO_CREDENTIAL
    if target.port == INTERPRETER_PORT:
        await _interpreter(
            backend, http, target, entry, scope=scope, receive=receive, send=send,
            streams=streams,
        )  # fmt: skip
        return
    if target.port != proxy.ENVD_PORT:
        await _preview(
            backend, http, target, entry, scope=scope, receive=receive, send=send,
            streams=previewing,
        )  # fmt: skip
        return
    found = await backend.locate(target.sandbox_id)
    if not found:
        await respond_json(send, 502, proxy.not_found_body(target.sandbox_id))
        return

    def opens(token: str) -> bool:
        return credentials.authenticates(
            token,
            method=scope["method"],
            path=scope["path"],
            access_token=presented,
            query=parameters,
        )

    sandbox = choose(found, opens)
    if sandbox is None:
        raise NO_CREDENTIAL
    entry.namespace = sandbox.namespace
    if sandbox.state is not State.RUNNING or sandbox.endpoint is None:
        await respond_json(send, 502, proxy.not_found_body(target.sandbox_id))
        return
    await proxy.forward(
        http,
        sandbox_id=target.sandbox_id,
        endpoint=sandbox.endpoint,
        scope=scope,
        receive=receive,
        send=send,
        reinit=reinits.run(sandbox),
        streams=streams,
        tenant=sandbox.namespace,
    )


PRIVATE_PREVIEW = GatewayError(
    403,
    "this sandbox's previews are private (network.allowPublicTraffic: false): send its "
    "trafficAccessToken as the e2b-traffic-access-token header",
)


async def previewed(
    backend: Backend, target: Target, traffic: str | None
) -> tuple[Sandbox, str] | dict[str, Any]:
    """The sandbox a preview is for and its port's base URL, or the 502 body to answer.

    A preview carries no credential to choose between two sandboxes of one ID (a look-alike
    a tenant made by hand, which the gateway's mark keeps out): it reaches one sandbox or none.
    A private sandbox's (`network.allowPublicTraffic: false`) takes its traffic token, `traffic`
    (the request's `e2b-traffic-access-token`), else raises 403.
    """
    found = await backend.locate(target.sandbox_id)
    running = [s for s in found if s.state is State.RUNNING and s.endpoint is not None]
    if len(found) != 1 or not running:
        return proxy.not_found_body(target.sandbox_id)
    (sandbox,) = running
    if not sandbox.public_traffic and not credentials.opens_previews(sandbox.access_token, traffic):
        raise PRIVATE_PREVIEW
    base = backend.preview(sandbox, target.port) if 0 < target.port <= MAX_PORT else None
    if base is None:
        return previews.not_open(target.sandbox_id, target.port)
    return sandbox, base


async def _preview(
    backend: Backend,
    http: httpx.AsyncClient,
    target: Target,
    entry: audit.Entry,
    *,
    scope: Scope,
    receive: Receive,
    send: Send,
    streams: proxy.Streams,
) -> None:
    """An HTTP request to one of the sandbox's own ports (`previews`)."""
    got = await previewed(backend, target, header(scope, "e2b-traffic-access-token"))
    if isinstance(got, dict):
        await respond_json(send, 502, got)
        return
    sandbox, base = got
    entry.namespace = sandbox.namespace
    await _to_port(http, target, sandbox, base, scope=scope, receive=receive, send=send,
                   streams=streams)  # fmt: skip


async def _to_port(
    http: httpx.AsyncClient,
    target: Target,
    sandbox: Sandbox,
    base: str,
    *,
    scope: Scope,
    receive: Receive,
    send: Send,
    streams: proxy.Streams,
) -> None:
    """Forward to one of the sandbox's own ports at `base`, with none of the tokens."""
    await proxy.forward(
        http,
        sandbox_id=target.sandbox_id,
        endpoint=base,
        scope=scope,
        receive=receive,
        send=send,
        reinit=None,
        streams=streams,
        tenant=sandbox.namespace,
        headers=previews.headers(list(scope["headers"])),
        unreachable=previews.not_open(target.sandbox_id, target.port),
    )


NO_INTERPRETER_CREDENTIAL = GatewayError(
    401,
    "missing or invalid token: the code interpreter's port takes the sandbox's X-Access-Token, "
    "or for its contexts its E2B-Traffic-Access-Token",
)


async def _interpreter(
    backend: Backend,
    http: httpx.AsyncClient,
    target: Target,
    entry: audit.Entry,
    *,
    scope: Scope,
    receive: Receive,
    send: Send,
    streams: proxy.Streams,
) -> None:
    """A call to the code interpreter (49999): never public, whatever the previews are.

    It runs code as the sandbox's user, so `/execute` needs the access token, as envd's routes
    do; its contexts take the traffic token too, which is all the SDK sends there
    (`credentials.opens_interpreter`). Neither reaches the sandbox.
    """
    presented = header(scope, "x-access-token")
    traffic = header(scope, "e2b-traffic-access-token")
    if presented is None and traffic is None:
        raise NO_INTERPRETER_CREDENTIAL
    found = await backend.locate(target.sandbox_id)
    if not found:
        await respond_json(send, 502, proxy.not_found_body(target.sandbox_id))
        return

    def opens(token: str) -> bool:
        return credentials.opens_interpreter(
            token, path=scope["path"], access_token=presented, traffic=traffic
        )

    sandbox = choose(found, opens)
    if sandbox is None:
        raise NO_INTERPRETER_CREDENTIAL
    entry.namespace = sandbox.namespace
    base = backend.preview(sandbox, INTERPRETER_PORT) if sandbox.state is State.RUNNING else None
    if base is None:
        await respond_json(send, 502, previews.not_open(target.sandbox_id, target.port))
        return
    await _to_port(http, target, sandbox, base, scope=scope, receive=receive, send=send,
                   streams=streams)  # fmt: skip


async def _websocket(  # noqa: PLR0917  # the ASGI call's parts
    backend: Backend,
    target: Target | None,
    scope: Scope,
    receive: Receive,
    send: Send,
    streams: proxy.Streams,
) -> None:
    """A WebSocket: to a preview port, relayed; else refused (neither API speaks it)."""
    entry = audit.Entry()
    current = audit.CURRENT.set(entry)
    try:
        if target is None or target.port in {proxy.ENVD_PORT, INTERPRETER_PORT}:
            entry.route = f"WEBSOCKET {scope['path']}"
            body = {"code": 404, "message": "only a sandbox's preview ports take WebSockets"}
            await previews.refuse(scope, send, 404, body)
            return
        entry.sandbox_id = target.sandbox_id
        entry.route = f"WEBSOCKET sandbox:{target.port} {scope['path']}"
        if not proxy.origin_form(scope):
            body = {"code": 400, "message": "the request's target must be a path"}
            await previews.refuse(scope, send, 400, body)
            return
        try:
            got = await previewed(backend, target, header(scope, "e2b-traffic-access-token"))
        except GatewayError as e:
            await previews.refuse(scope, send, e.status, e.body())
            return
        if isinstance(got, dict):
            await previews.refuse(scope, send, 502, got)
            return
        sandbox, base = got
        entry.namespace = sandbox.namespace
        await previews.websocket(
            base,
            sandbox_id=target.sandbox_id,
            port=target.port,
            scope=scope,
            receive=receive,
            send=send,
            streams=streams,
            tenant=sandbox.namespace,
        )
    finally:
        audit.CURRENT.reset(current)
        audit.write(entry)
