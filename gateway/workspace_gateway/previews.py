"""Previews: a sandbox's own ports, through the gateway, over HTTP and WebSocket.

A dev server, a notebook or an MCP endpoint in the sandbox is reached as `<port>-<id>.<domain>`
or with `E2b-Sandbox-Port`.

A preview is public, as on E2B: it needs no API key and no access token, and neither goes
into the sandbox (code there may read what it is sent). What reaches the port is the client's
request as it was, its `Host` and `Authorization` included (an app in the sandbox may have
users of its own), less hop-by-hop headers and the gateway's own (`GATEWAY_HEADERS`).

Which ports are previews is the backend's answer (`Backend.preview`): on a cluster, the ports
the WorkspaceSandbox names in `spec.ports`, which its Service and its policies open to the
gateway and to nothing else; in the local mode, any port of this host's loopback but the
agents' and the gateway's own. The agent's port is never one: it is envd, behind its token.
"""

import asyncio
import contextlib
import re
import socket
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.frames import CloseCode

from workspace_gateway import proxy
from workspace_gateway.asgi import Receive, Scope, Send, respond_json
from workspace_gateway.errors import GatewayError
from workspace_gateway.proxy import HOP_BY_HOP, Streams

GATEWAY_HEADERS = frozenset(
    {
        "x-api-key",
        "x-access-token",
        "e2b-traffic-access-token",
        "e2b-sandbox-id",
        "e2b-sandbox-port",
    }
)
"""The gateway's and the sandbox's credentials and E2B's routing headers: never the app's."""
HANDSHAKE = frozenset(
    {
        "host",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
        "sec-websocket-accept",
    }
)
"""What the gateway's own WebSocket client writes for the handshake with the sandbox's port."""
MAX_MESSAGE_BYTES = 16 << 20
"""One WebSocket message, either way: uvicorn's default for what a client sends."""
OPEN_SECONDS = 10.0


def not_open(sandbox_id: str, port: int) -> dict[str, Any]:
    """E2B's answer for a port nothing serves, which the SDK recognises."""
    return {
        "sandboxId": sandbox_id,
        "message": f"The sandbox is running but port is not open: {port}",
        "code": 502,
    }


def headers(
    raw: list[tuple[bytes, bytes]], *, drop: frozenset[str] = frozenset()
) -> list[tuple[bytes, bytes]]:
    """The client's headers as the sandbox's port gets them.

    Less hop-by-hop ones (`Host` stays), those `Connection` names, the gateway's own, and
    `drop`.
    """
    gone = (HOP_BY_HOP - {"host"}) | GATEWAY_HEADERS | proxy.connection_named(raw) | drop
    return [(name, value) for name, value in raw if name.decode("latin-1").lower() not in gone]


HOST = re.compile(r"[A-Za-z0-9.\-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")
"""A `Host` the handshake may carry on: a name or an address, and a port."""


def ws_url(base: str, scope: Scope, host: str | None = None) -> str:
    """The WebSocket URL the handshake names: the client's `host`, and the request's target.

    The client's `host` where it is one (Jupyter and others compare `Origin` with it), else
    `base`'s. Only its target replaces the URL's (`proxy.upstream`), and the connection
    itself is made to `base` (`_dial`): the URL names what the handshake says, never where it
    goes.
    """
    url = proxy.upstream(base, scope).copy_with(scheme="ws")
    if host is not None and HOST.fullmatch(host):
        return f"ws://{host}{url.raw_path.decode('ascii')}"
    return str(url)


async def _dial(base: str) -> socket.socket:
    """A TCP connection to `base`'s host and port, which the handshake then runs on.

    Made here, so that no redirect the sandbox answers the handshake with is followed: a
    client given its socket follows none (it raises ValueError instead).
    """
    url = httpx.URL(base)
    loop = asyncio.get_running_loop()
    found = await loop.getaddrinfo(url.host, url.port, type=socket.SOCK_STREAM)
    error: OSError = OSError(f"{url.host} has no address")
    for family, kind, protocol, _, address in found:
        sock = socket.socket(family, kind, protocol)
        sock.setblocking(False)  # noqa: FBT003  # socket's own signature
        try:
            await loop.sock_connect(sock, address)
        except OSError as e:
            sock.close()
            error = e
            continue
        return sock
    raise error


async def refuse(scope: Scope, send: Send, status: int, body: dict[str, Any]) -> None:
    """Answer a WebSocket handshake with an HTTP error.

    Where the server can (ASGI's `websocket.http.response`); else by closing it, which the
    server answers 403.
    """
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await respond_json(send, status, body, prefix="websocket.")
    else:
        await send({"type": "websocket.close", "code": CloseCode.POLICY_VIOLATION})


async def websocket(
    base: str, *, sandbox_id: str, port: int, scope: Scope, receive: Receive, send: Send,
    streams: Streams, tenant: str,
) -> None:  # fmt: skip
    """Relay one WebSocket between the client and the sandbox's port, message by message.

    As one of `tenant`'s admitted `streams`, until either side closes.
    """
    refused = streams.refusal(tenant)
    if refused is not None:
        await refuse(scope, send, 429, {"code": 429, "message": refused})
        return
    try:
        await _websocket(base, sandbox_id, port, scope, receive, send)
    finally:
        streams.release(tenant)


async def _websocket(  # noqa: PLR0917  # websocket's parts
    base: str, sandbox_id: str, port: int, scope: Scope, receive: Receive, send: Send
) -> None:
    if (await receive())["type"] != "websocket.connect":
        return
    extra = [
        (k.decode("latin-1"), v.decode("latin-1"))
        for k, v in headers(list(scope["headers"]), drop=HANDSHAKE)
    ]
    given = dict(scope["headers"]).get(b"host")
    try:
        url = ws_url(base, scope, given.decode("latin-1") if given else None)
    except GatewayError as e:
        await refuse(scope, send, e.status, e.body())
        return
    try:
        sock = await asyncio.wait_for(_dial(base), OPEN_SECONDS)
    except (OSError, TimeoutError):
        await refuse(scope, send, 502, not_open(sandbox_id, port))
        return
    try:
        upstream = await connect(
            url,
            sock=sock,
            additional_headers=extra,
            subprotocols=scope.get("subprotocols") or None,
            open_timeout=OPEN_SECONDS,
            max_size=MAX_MESSAGE_BYTES,
            max_queue=1,  # one message held for a client that reads slowly, not sixteen
            compression=None,
            ping_interval=None,  # the client's pings pass through as theirs
            user_agent_header=None,
            proxy=None,
        )
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI, ValueError):
        # ValueError: a redirect, which is never followed (`_dial`).
        sock.close()
        await refuse(scope, send, 502, not_open(sandbox_id, port))
        return
    async with upstream:
        await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
        down = asyncio.ensure_future(_down(upstream, send))
        up = asyncio.ensure_future(_up(upstream, receive))
        try:
            await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            down.cancel()
            up.cancel()
        if down.done() and not down.cancelled():
            # The sandbox's side closed: the client gets its code, or one a close frame can
            # carry where there was none (1005) or the connection just dropped (1006).
            code = CLOSE_CODES.get(upstream.close_code, upstream.close_code)
            with contextlib.suppress(Exception):
                await send(
                    {"type": "websocket.close", "code": code, "reason": upstream.close_reason or ""}
                )


CLOSE_CODES: dict[int | None, int] = {
    None: CloseCode.NORMAL_CLOSURE,
    CloseCode.NO_STATUS_RCVD: CloseCode.NORMAL_CLOSURE,
    CloseCode.ABNORMAL_CLOSURE: CloseCode.INTERNAL_ERROR,
}


async def _down(upstream: ClientConnection, send: Send) -> None:
    # OSError: the client went (uvicorn's ClientDisconnected), which `_up` hears too.
    with contextlib.suppress(ConnectionClosed, OSError):
        async for message in upstream:
            key = "bytes" if isinstance(message, bytes) else "text"
            await send({"type": "websocket.send", key: message})


async def _up(upstream: ClientConnection, receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            code = message.get("code", CloseCode.NORMAL_CLOSURE)
            sendable = code not in {CloseCode.NO_STATUS_RCVD, CloseCode.ABNORMAL_CLOSURE}
            await upstream.close(code if sendable else CloseCode.NORMAL_CLOSURE)
            return
        if message["type"] == "websocket.receive":
            data = message.get("bytes")
            try:
                await upstream.send(data if data is not None else message.get("text") or "")
            except ConnectionClosed:
                return
