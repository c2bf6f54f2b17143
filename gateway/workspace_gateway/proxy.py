"""The data plane: one request, streamed both ways to one sandbox's agent and back.

Nothing is buffered: command output reaches the client as the agent writes it, and uploads of
any size pass through in chunks. Timeouts sit far above the SDK's 50 s keepalive pings.
"""

import asyncio
import posixpath
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpcore
import httpx

from workspace_gateway.asgi import Receive, Scope, Send, respond_json
from workspace_gateway.backend import INITIALIZED
from workspace_gateway.errors import GatewayError

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
# The control API's key, or a Kubernetes token in its place, is never the sandbox's business:
# code in a sandbox may read its traffic.
GATEWAY_ONLY = frozenset({"x-api-key", "authorization"})
# A request body up to this size is read whole before it is sent, so that it can be sent again
# after an agent that restarted has been given its token back.
REPLAY_BYTES = 64 << 10
RESTARTED = GatewayError(503, "the sandbox's agent restarted during this upload; send it again")
IDLE_SECONDS = 600.0
CLIENT_DEFAULTS = frozenset({"accept", "accept-encoding", "user-agent", "connection"})
# How much one read of an agent's socket may take. httpcore's 64 KiB means a 64 MiB download
# crosses httpcore, h11, httpx and the ASGI send a thousand times: a quarter of the gateway's
# CPU on a download (BENCHMARKS.md). Memory stays bounded: each read is forwarded, and waits
# for the client to drain, before the next.
UPSTREAM_READ_BYTES = 1 << 20


def client() -> httpx.AsyncClient:
    """One pool for all sandboxes; reads and writes may idle up to ten minutes.

    The read size is a class attribute of httpcore's HTTP/1.1 connection, read through `self`
    on each read; its pinned version has no other way to set it. The backends' own small calls
    to agents share it, harmlessly: a read returns what has arrived, it never waits to fill.
    """
    httpcore.AsyncHTTP11Connection.READ_NUM_BYTES = UPSTREAM_READ_BYTES
    return httpx.AsyncClient(
        timeout=httpx.Timeout(IDLE_SECONDS, connect=10.0),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=100),
        follow_redirects=False,
        trust_env=False,
    )


def internal(path: str) -> bool:
    """Whether `path` is one of envd's internal routes, however spelled (`//init`, `/a/../init`)."""
    return posixpath.normpath("/" + path.lstrip("/")) in INTERNAL_PATHS


def not_found_body(sandbox_id: str) -> dict[str, Any]:
    """E2B's proxy answer; the SDK reads "was not found" as SandboxNotRunningException."""
    return {"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502}


def forwarded_headers(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The request's headers less hop-by-hop ones (also those `Connection` names) and the key."""
    named = {
        token.strip().lower()
        for name, value in raw
        if name.lower() == b"connection"
        for token in value.decode("latin-1").split(",")
    }
    return [
        (name, value)
        for name, value in raw
        if (key := name.decode("latin-1").lower()) not in HOP_BY_HOP | GATEWAY_ONLY
        and key not in named
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


async def _whole(receive: Receive) -> bytes:
    """A small body, read whole so that it can be sent twice."""
    body = bytearray()
    async for chunk in _body(receive):
        body += chunk
        if len(body) > REPLAY_BYTES:
            raise GatewayError(413, "the body is longer than its Content-Length")
    return bytes(body)


async def _content(scope: Scope, receive: Receive) -> bytes | AsyncIterator[bytes] | None:
    """The request's body: read whole when it can be sent again, else streamed, else none."""
    raw = list(scope["headers"])
    names = {name.lower() for name, _ in raw}
    if not names & {b"content-length", b"transfer-encoding"}:
        return None
    length = next((value for name, value in raw if name.lower() == b"content-length"), b"")
    if length.isdigit() and int(length) <= REPLAY_BYTES:
        return await _whole(receive)
    return _body(receive)


async def forward(
    http: httpx.AsyncClient,
    *,
    sandbox_id: str,
    endpoint: str,
    scope: Scope,
    receive: Receive,
    send: Send,
    reinit: Callable[[], Awaitable[None]],
) -> None:
    """Stream this request to `endpoint` (the agent's base URL) and its answer back.

    An agent that answers `X-Agent-Initialized: false` has restarted since the gateway's last
    `/init`: `reinit` gives it back its token and env vars, and the request is sent again.
    So that it can be, a body of at most REPLAY_BYTES (every Connect call the SDK makes, most
    uploads) is read whole first; a bigger one streams through, and is answered 503 if the
    agent turned out to have restarted, for the caller to send again.
    """
    path: str = scope["path"]
    query: bytes = scope.get("query_string", b"")
    url = endpoint + (scope.get("raw_path") or path.encode()).decode("latin-1")
    if query:
        url += "?" + query.decode("latin-1")
    headers = forwarded_headers(list(scope["headers"]))
    incoming = {name.decode("latin-1").lower() for name, _ in headers}
    try:
        content = await _content(scope, receive)
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
            await respond_json(send, 502, not_found_body(sandbox_id))
            return
        if attempt or response.headers.get(INITIALIZED) != "false":
            break
        await response.aclose()
        await reinit()
        if not isinstance(content, bytes | None):
            raise RESTARTED
    try:
        await _answer(response, receive, send)
    finally:
        await response.aclose()


async def _answer(response: httpx.Response, receive: Receive, send: Send) -> None:
    headers = [
        (name, value)
        for name, value in response.headers.raw
        if name.lower() not in {b"connection", b"keep-alive", b"transfer-encoding"}
    ]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    watch = asyncio.ensure_future(_disconnected(receive))
    relay = asyncio.ensure_future(_relay(response, send))
    try:
        await asyncio.wait({watch, relay}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        relay.cancel()
    if relay.done() and not relay.cancelled() and relay.exception() is None:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _relay(response: httpx.Response, send: Send) -> None:
    try:
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except httpx.TransportError:
        return
