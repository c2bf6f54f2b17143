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
from typing import Any

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
    named = {
        token.strip().lower()
        for name, value in raw
        if name.lower() == b"connection"
        for token in value.decode("latin-1").split(",")
    }
    gone = (HOP_BY_HOP - {"host"}) | GATEWAY_HEADERS | named | drop
    return [(name, value) for name, value in raw if name.decode("latin-1").lower() not in gone]


def ws_url(base: str, scope: Scope) -> str:
    """The port's WebSocket URL for this request: `base` (`http://host:port`) and its target.

    Only its target replaces the URL's (`proxy.upstream`): never its host or port.
    """
    url = proxy.upstream(base, scope)
    return str(url.copy_with(scheme="ws"))


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
    try:
        url = ws_url(base, scope)
    except GatewayError as e:
        await refuse(scope, send, e.status, e.body())
        return
    try:
        upstream = await connect(
            url,
            additional_headers=extra,
            subprotocols=scope.get("subprotocols") or None,
            open_timeout=OPEN_SECONDS,
            max_size=MAX_MESSAGE_BYTES,
            compression=None,
            ping_interval=None,  # the client's pings pass through as theirs
            user_agent_header=None,
            proxy=None,
        )
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI):
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
            # The sandbox's side closed: the client gets its code.
            code = upstream.close_code or CloseCode.NORMAL_CLOSURE
            with contextlib.suppress(Exception):
                await send(
                    {"type": "websocket.close", "code": code, "reason": upstream.close_reason or ""}
                )


async def _down(upstream: ClientConnection, send: Send) -> None:
    with contextlib.suppress(ConnectionClosed):
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
