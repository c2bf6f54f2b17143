"""The few ASGI types and helpers the gateway's edge uses."""

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def header(scope: Scope, name: str) -> str | None:
    wanted = name.lower().encode()
    for key, value in scope["headers"]:
        if key.lower() == wanted:
            return str(value.decode("latin-1"))
    return None


async def respond_json(
    send: Send,
    status: int,
    body: object,
    headers: tuple[tuple[str, str], ...] = (),
    *,
    prefix: str = "",
) -> None:
    """A JSON answer; with `prefix` "websocket.", to a WebSocket handshake.

    That is ASGI's `websocket.http.response` extension.
    """
    data = b"" if body is None else json.dumps(body).encode()
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    if body is not None:
        raw.append((b"content-type", b"application/json; charset=utf-8"))
    raw.append((b"content-length", str(len(data)).encode()))
    await send({"type": f"{prefix}http.response.start", "status": status, "headers": raw})
    await send({"type": f"{prefix}http.response.body", "body": data})
