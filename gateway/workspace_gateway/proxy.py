"""The data plane: one request, streamed both ways to one sandbox's agent and back.

Nothing is buffered: command output reaches the client as the agent writes it, and uploads of
any size pass through in chunks. Timeouts sit far above the SDK's 50 s keepalive pings.
"""

import asyncio
import posixpath
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from workspace_gateway.asgi import Receive, Scope, Send, respond_json
from workspace_gateway.backend import INITIALIZED
from workspace_gateway.errors import GatewayError
from workspace_gateway.http_protocol import FLOW_EXTENSION, Outbound

ENVD_PORT = 49983
# The orchestrator's own paths on envd: never reachable from outside.
INTERNAL_PATHS = frozenset({"/init", "/freeze", "/unfreeze", "/fsfreeze", "/fsthaw", "/collapse"})
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
# The control API's key is never the sandbox's business: code in a sandbox may read its traffic.
# Nor is a Kubernetes token sent in its place (`Authorization: Bearer`); `Authorization: Basic`
# is envd's, naming the user a command or a file operation runs as, and goes through.
GATEWAY_ONLY = frozenset({"x-api-key"})
# A request body up to this size is read whole before it is sent, so that it can be sent again
# after an agent that restarted has been given its token back.
REPLAY_BYTES = 64 << 10
# Concurrent streams: a command, a watch or a file transfer each holds one while it runs.
MAX_STREAMS = 4096
MAX_TENANT_STREAMS = 1024
IDLE_SECONDS = 600.0
CLIENT_DEFAULTS = frozenset({"accept", "accept-encoding", "user-agent", "connection"})
# How much one read of an agent's socket may take. httpcore's 64 KiB means a 64 MiB download
# crosses httpcore, h11, httpx and the ASGI send a thousand times: a quarter of the gateway's
# CPU on a download (BENCHMARKS.md). So a download the client keeps up with (nothing left
# unsent when the next read is due) reads this much at a time. A read is held until the client
# takes it, and a client may stop taking at any moment, so reads that large are rationed across
# all streams (LARGE_READS_BYTES); past that, or while a client lags, a stream reads
# SMALL_READ_BYTES, and no stream reads again before its client has drained what it was sent.
UPSTREAM_READ_BYTES = 1 << 20
SMALL_READ_BYTES = 64 * 1024
LARGE_READS_BYTES = 16 << 20


# httpcore's network interface takes `timeout` arguments: ASYNC109 is about APIs of our own.
class SizedStream(httpcore.AsyncNetworkStream):
    """A connection to an agent whose reads take at most `read_bytes`, as the relay sets it."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self.inner = inner
        self.read_bytes = UPSTREAM_READ_BYTES

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109  # httpcore's signature
        return await self.inner.read(min(max_bytes, self.read_bytes), timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109  # httpcore's signature
        await self.inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109  # httpcore's signature
    ) -> httpcore.AsyncNetworkStream:
        return await self.inner.start_tls(ssl_context, server_hostname, timeout)

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _SizedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109  # httpcore's signature
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self.inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return SizedStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109  # httpcore's signature
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        return SizedStream(await self.inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def client() -> httpx.AsyncClient:
    """One pool for all sandboxes; reads and writes may idle up to ten minutes.

    httpcore asks its connection for READ_NUM_BYTES, a class attribute read through `self` on
    each read, which its pinned version has no other way to set; each connection is a
    `SizedStream`, which the relay narrows. httpx gives its pool no network backend, so the
    transport's pool is made again with one. The backends' own small calls to agents share
    it, harmlessly: a read returns what has arrived, it never waits to fill.
    """
    httpcore.AsyncHTTP11Connection.READ_NUM_BYTES = UPSTREAM_READ_BYTES
    transport = httpx.AsyncHTTPTransport()
    transport._pool = httpcore.AsyncConnectionPool(  # see above
        max_connections=None, max_keepalive_connections=100, network_backend=_SizedBackend()
    )
    return httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(IDLE_SECONDS, connect=10.0),
        follow_redirects=False,
        trust_env=False,
    )


class LargeReads:
    """The large reads all streams may hold at once: LARGE_READS_BYTES, UPSTREAM_READ_BYTES each."""

    def __init__(self, budget: int = LARGE_READS_BYTES) -> None:
        self.left = budget

    def take(self) -> bool:
        if self.left < UPSTREAM_READ_BYTES:
            return False
        self.left -= UPSTREAM_READ_BYTES
        return True

    def give(self) -> None:
        self.left += UPSTREAM_READ_BYTES


class Streams:
    """The data-plane requests under way, at most `most` in all and `per_tenant` a namespace.

    One over either is answered 429 at once, E2B's shape for a limit (the SDK raises its
    RateLimitException), rather than queued: a queue would hold the very connections and
    memory the caps exist to bound, and the SDK retries nothing by itself either way.
    """

    def __init__(self, most: int = MAX_STREAMS, per_tenant: int = MAX_TENANT_STREAMS) -> None:
        self.most = most
        self.per_tenant = per_tenant
        self.total = 0
        self.by_tenant: dict[str, int] = {}
        self.large_reads = LargeReads()

    def refusal(self, tenant: str) -> str | None:
        """Why a new stream of `tenant` may not start now; None: it is admitted, and counted."""
        if self.total >= self.most:
            return f"the gateway is serving its limit of {self.most} sandbox streams; retry later"
        if self.by_tenant.get(tenant, 0) >= self.per_tenant:
            return (
                f"the namespace has {self.per_tenant} sandbox streams open, its limit; "
                "retry once one ends"
            )
        self.total += 1
        self.by_tenant[tenant] = self.by_tenant.get(tenant, 0) + 1
        return None

    def release(self, tenant: str) -> None:
        self.total -= 1
        left = self.by_tenant[tenant] - 1
        if left:
            self.by_tenant[tenant] = left
        else:
            del self.by_tenant[tenant]


def origin_form(scope: Scope) -> bool:
    """Whether the request's target is a path (`/...`), the one form the data plane takes.

    An asterisk or authority form (`*@host:port/init`, which httptools passes on as the path)
    would otherwise be glued to the agent's URL and name another host.
    """
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    return raw.startswith(b"/")


DOT_SEGMENTS = frozenset({b".", b".."})


def upstream(endpoint: str, scope: Scope) -> httpx.URL:
    """The agent's URL for this request: `endpoint`'s scheme, host and port, whatever the path.

    The path goes as the client sent it (raw, so that the agent decodes it as the gateway did);
    only its target replaces the URL's, never its authority.
    """
    base = httpx.URL(endpoint)
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string", b"")
    if DOT_SEGMENTS & set(raw.split(b"/")):
        # httpx removes them (`/contexts/../execute` becomes `/execute`): what the gateway
        # checked must be what the sandbox gets.
        raise GatewayError(400, "the request's target has . or .. segments: send it resolved")
    try:
        url = base.copy_with(raw_path=raw + (b"?" + query if query else b""))
    except httpx.InvalidURL:
        url = None
    if url is None or (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port):
        raise GatewayError(400, "the request's target is not a path")
    return url


def internal(path: str) -> bool:
    """Whether `path` is one of envd's internal routes, however spelled (`//init`, `/a/../init`)."""
    return posixpath.normpath("/" + path.lstrip("/")) in INTERNAL_PATHS


def not_found_body(sandbox_id: str) -> dict[str, Any]:
    """E2B's proxy answer; the SDK reads "was not found" as SandboxNotRunningException."""
    return {"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502}


def connection_named(raw: list[tuple[bytes, bytes]]) -> set[str]:
    """The headers the request's `Connection` names, lower-cased: hop-by-hop, never forwarded."""
    return {
        token.strip().lower()
        for name, value in raw
        if name.lower() == b"connection"
        for token in value.decode("latin-1").split(",")
    }


def forwarded_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The request's headers less hop-by-hop ones, those `Connection` names, and credentials.

    The API key goes, and any `Authorization` but envd's `Basic`, which names a user.
    """
    named = connection_named(raw)
    return [
        (name, value)
        for name, value in raw
        if (key := name.decode("latin-1").lower()) not in HOP_BY_HOP | GATEWAY_ONLY
        and key not in named
        and not (key == "authorization" and value[:6].lower() != b"basic ")
    ]


class _ClientGoneError(Exception):
    """The client left while its request body was still arriving."""


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGoneError
        chunk: bytes = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


# envd's server-streaming calls: the request is one message, which the SDK's Connect client
# sends chunked, with no Content-Length, and ends at once. So it is read whole, as a small sized
# body is, and sent again after a restart: a command is the SDK's most frequent call. Not
# StreamInput (client streaming), whose messages come as the caller sends them.
ONE_MESSAGE_STREAMS = frozenset(
    {"/process.Process/Start", "/process.Process/Connect", "/filesystem.Filesystem/WatchDir"}
)


async def _whole(receive: Receive, too_long: str) -> bytes:
    """A small body, read whole so that it can be sent twice."""
    body = bytearray()
    async for chunk in _body(receive):
        body += chunk
        if len(body) > REPLAY_BYTES:
            raise GatewayError(413, too_long)
    return bytes(body)


def _streamed(scope: Scope, receive: Receive) -> AsyncIterator[bytes] | None:
    """The request's body as it comes, if it has one: a preview's, never sent twice."""
    names = {name.lower() for name, _ in scope["headers"]}
    return _body(receive) if names & {b"content-length", b"transfer-encoding"} else None


async def _content(scope: Scope, receive: Receive) -> bytes | AsyncIterator[bytes] | None:
    """The request's body: read whole when it can be sent again, else streamed, else none."""
    raw = list(scope["headers"])
    names = {name.lower() for name, _ in raw}
    if not names & {b"content-length", b"transfer-encoding"}:
        return None
    length = next((value for name, value in raw if name.lower() == b"content-length"), b"")
    if length.isdigit() and int(length) <= REPLAY_BYTES:
        return await _whole(receive, "the body is longer than its Content-Length")
    if not length and scope["path"] in ONE_MESSAGE_STREAMS:
        return await _whole(receive, f"a request of {scope['path']} is one small message")
    return _body(receive)


async def forward(
    http: httpx.AsyncClient,
    *,
    sandbox_id: str,
    endpoint: str,
    scope: Scope,
    receive: Receive,
    send: Send,
    reinit: Callable[[], Awaitable[None]] | None,
    streams: Streams,
    tenant: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    unreachable: dict[str, Any] | None = None,
) -> None:
    """Stream this request to `endpoint` (the agent's base URL) and its answer back.

    Only as one of `tenant`'s (its namespace's) admitted `streams`. A preview (a port of the
    sandbox's own, `previews`) comes with the `headers` it sends, with no `reinit` (nothing
    there is the agent's) and with what to answer when nothing listens (`unreachable`); the
    agent's requests go with `forwarded_headers` and, unreachable, "not found".

    An agent that answers `X-Agent-Initialized: false` has restarted since the gateway's last
    `/init`: `reinit` gives it back its token and env vars, and the request is sent again.
    So that it can be, a body of at most REPLAY_BYTES (every Connect call the SDK makes, most
    uploads), or a streaming call's one message (ONE_MESSAGE_STREAMS), is read whole first; a
    bigger one streams through, and is answered 503 if the agent turned out to have restarted,
    for the caller to send again.
    """
    refused = streams.refusal(tenant)
    if refused is not None:
        await respond_json(send, 429, {"code": 429, "message": refused})
        return
    try:
        to = _Upstream(
            endpoint,
            forwarded_headers(list(scope["headers"])) if headers is None else headers,
            not_found_body(sandbox_id) if unreachable is None else unreachable,
            reinit,
        )
        await _forward(http, to, scope, receive, send, streams.large_reads)
    finally:
        streams.release(tenant)


@dataclass(frozen=True)
class _Upstream:
    endpoint: str
    headers: list[tuple[bytes, bytes]]
    unreachable: dict[str, Any]
    reinit: Callable[[], Awaitable[None]] | None


async def _forward(  # noqa: PLR0917  # forward's parts, passed on as they came
    http: httpx.AsyncClient,
    to: _Upstream,
    scope: Scope,
    receive: Receive,
    send: Send,
    reads: LargeReads | None = None,
) -> None:
    url = upstream(to.endpoint, scope)
    headers = to.headers
    incoming = {name.decode("latin-1").lower() for name, _ in headers}
    try:
        content = await _content(scope, receive) if to.reinit else _streamed(scope, receive)
    except _ClientGoneError:
        return
    for attempt in range(2):
        request = http.build_request(scope["method"], url, headers=headers, content=content)
        for name in CLIENT_DEFAULTS - incoming:  # httpx's own defaults stay out
            request.headers.pop(name, None)
        try:
            response = await http.send(request, stream=True)
        except _ClientGoneError:
            return
        except httpx.TransportError:
            await respond_json(send, 502, to.unreachable)
            return
        if to.reinit is None or attempt or response.headers.get(INITIALIZED) != "false":
            break
        await response.aclose()
        await to.reinit()
        if not isinstance(content, bytes | None):
            raise GatewayError(
                503, "the sandbox's agent restarted during this upload; send it again"
            )
    try:
        outbound = (scope.get("extensions") or {}).get(FLOW_EXTENSION)
        await _answer(response, receive, send, outbound, reads)
    finally:
        await response.aclose()


async def _answer(
    response: httpx.Response,
    receive: Receive,
    send: Send,
    outbound: Outbound | None,
    reads: LargeReads | None,
) -> None:
    headers = [
        (name, value)
        for name, value in response.headers.raw
        if name.lower() not in {b"connection", b"keep-alive", b"transfer-encoding"}
    ]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    watch = asyncio.ensure_future(_disconnected(receive))
    relay = asyncio.ensure_future(_relay(response, send, outbound, reads))
    try:
        await asyncio.wait({watch, relay}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        relay.cancel()
    if relay.done() and not relay.cancelled() and relay.exception() is None:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _relay(
    response: httpx.Response, send: Send, outbound: Outbound | None, reads: LargeReads | None
) -> None:
    """The answer's body to the client, each read sized by how the client keeps up (see above).

    Without an `Outbound` (another server) or a ration, every read may be large.
    """
    stream = response.extensions.get("network_stream")
    sized = stream if isinstance(stream, SizedStream) else None
    large = False
    chunks = response.aiter_raw()
    try:
        while True:
            if sized is not None and outbound is not None and reads is not None:
                await outbound.drained()  # then at most uvicorn's 64 KiB high-water mark is unsent
                keeps_up = outbound.buffered() == 0
                if large and not keeps_up:
                    reads.give()
                    large = False
                elif keeps_up and not large:
                    large = reads.take()
                sized.read_bytes = UPSTREAM_READ_BYTES if large else SMALL_READ_BYTES
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                return
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except httpx.TransportError:
        return
    finally:
        if large and reads is not None:
            reads.give()
        if sized is not None:
            sized.read_bytes = UPSTREAM_READ_BYTES
