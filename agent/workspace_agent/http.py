"""The few ASGI helpers the plain HTTP routes share: JSON answers, envd's error body, headers."""

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from connectrpc.code import Code

from workspace_agent.errors import AgentError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

JSON = b"application/json; charset=utf-8"


def header(scope: Scope, name: str) -> str | None:
    """The first value of a request header, by lower-case name."""
    key = name.encode()
    for k, v in scope["headers"]:
        if k == key:
            return bytes(v).decode("latin-1")
    return None


def number(text: str | None, digits: int = 18) -> int | None:
    """A header's whole number: ASCII digits only, and not absurdly long; else None.

    `str.isdigit` also accepts digits such as '²' that `int` refuses, and `int` refuses
    strings of more than 4,300 digits: both would fail a request with a traceback.
    """
    if not text or len(text) > digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def query(scope: Scope) -> dict[str, str]:
    """The query parameters, first value of each."""
    raw = scope.get("query_string", b"").decode("latin-1")
    return {k: v[0] for k, v in parse_qs(raw, keep_blank_values=True).items()}


async def respond(
    send: Send,
    status: int,
    body: bytes = b"",
    content_type: bytes | None = None,
    headers: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    out = list(headers)
    if content_type is not None:
        out.append((b"content-type", content_type))
    out.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body})


async def respond_json(send: Send, status: int, value: object) -> None:
    await respond(send, status, json.dumps(value).encode(), JSON)


async def respond_error(
    send: Send, error: AgentError, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    """The error body envd sends: the HTTP status as `code`, mapped by the SDK to exceptions."""
    body = json.dumps({"code": error.status, "message": error.message}).encode()
    await respond(send, error.status, body, JSON, headers)


async def respond_connect_error(
    send: Send, error: AgentError, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    """A Connect error before any RPC handling: the unary error shape, which streams accept too."""
    code = Code(error.code).name.lower()
    await respond(
        send,
        error.status if error.code != Code.RESOURCE_EXHAUSTED else 429,
        json.dumps({"code": code, "message": error.message}).encode(),
        b"application/json",
        headers,
    )
