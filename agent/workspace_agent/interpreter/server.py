"""The code interpreter's HTTP API, as the `e2b_code_interpreter` SDKs call it on port 49999.

    POST   /execute                 {code, context_id?, language?, env_vars?}: the run, streamed
                                    as JSON lines (`outputs`), ending with `end_of_execution`
    POST   /contexts                {language?, cwd?}: a new context, `{id, language, cwd}`
    GET    /contexts                every context
    POST   /contexts/{id}/restart   a fresh kernel in its place: its state is gone
    DELETE /contexts/{id}           its kernel stopped
    GET    /health                  200 once serving

It trusts its network: the gateway lets no request here that does not carry the sandbox's
access token or its traffic token, and strips both before forwarding. Errors are
`{"error": ..., "message": ...}` with their status; the SDK shows the body as it comes.
"""

import asyncio
import contextlib
import json
import logging
import re
from typing import Any

from workspace_agent.http import ASGIApp, Receive, Scope, Send, respond_json
from workspace_agent.interpreter import kernels
from workspace_agent.interpreter.kernels import Contexts, Refused

log = logging.getLogger("workspace_agent.interpreter")

MAX_BODY = 16 << 20
CONTEXT = re.compile(r"/contexts/(?P<id>[^/]+)(?P<restart>/restart)?")
NDJSON = b"application/x-ndjson"


def build_app(contexts: Contexts) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        try:
            if (method, path) == ("GET", "/health"):
                await respond_json(send, 200, {"languages": contexts.languages()})
            elif (method, path) == ("POST", "/execute"):
                await _execute(contexts, await _body(receive), receive, send)
            elif (method, path) == ("POST", "/contexts"):
                body = await _body(receive)
                made = await contexts.create(_text(body, "language"), _text(body, "cwd"))
                await respond_json(send, 200, made.json())
            elif (method, path) == ("GET", "/contexts"):
                await respond_json(send, 200, [c.json() for c in contexts.contexts.values()])
            elif (match := CONTEXT.fullmatch(path)) and method == "POST" and match["restart"]:
                await contexts.restart(match["id"])
                await respond_json(send, 200, {})
            elif (match := CONTEXT.fullmatch(path)) and method == "DELETE" and not match["restart"]:
                await contexts.remove(match["id"])
                await respond_json(send, 200, {})
            else:
                raise Refused(404, f"{method} {path} is not part of the code interpreter's API")
        except Refused as e:
            await respond_json(send, e.status, {"error": e.status, "message": e.message})

    return app


async def _body(receive: Receive) -> dict[str, Any]:
    raw = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Refused(400, "the request ended before its body")
        raw += message.get("body", b"")
        if len(raw) > MAX_BODY:
            raise Refused(413, f"the request body is larger than {MAX_BODY >> 20} MiB")
        if not message.get("more_body", False):
            break
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise Refused(400, "the request body is not JSON") from None
    if not isinstance(value, dict):
        raise Refused(400, "the request body must be a JSON object")
    return value


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise Refused(400, f"{name} must be a string")
    return value


def _env(body: dict[str, Any]) -> dict[str, str]:
    value = body.get("env_vars") or {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
        for k, v in value.items()
    ):
        raise Refused(400, "env_vars must map variable names to strings")
    return value


async def _execute(contexts: Contexts, body: dict[str, Any], receive: Receive, send: Send) -> None:
    code = body.get("code")
    if not isinstance(code, str):
        raise Refused(400, "code must be a string")
    context_id, language = _text(body, "context_id"), _text(body, "language")
    if context_id and language:
        raise Refused(400, "give context_id or language, not both")
    env = _env(body)
    context = contexts.get(context_id) if context_id else await contexts.default(language)
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", NDJSON)]}
    )
    left = asyncio.Event()
    watcher = asyncio.ensure_future(_watch(receive, left, context))
    try:
        async for chunk in kernels.execute(context, code, env):
            if left.is_set():
                continue
            try:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except OSError:  # uvicorn's ClientDisconnected
                left.set()
        if not left.is_set():
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b""})
    finally:
        watcher.cancel()


async def _watch(receive: Receive, left: asyncio.Event, context: kernels.Context) -> None:
    """When the caller leaves (the SDK's `timeout` closes its connection), stop its run.

    The kernel is interrupted, as Jupyter's stop button does: the run ends with a
    `KeyboardInterrupt` and the context keeps its state.
    """
    while (await receive())["type"] != "http.disconnect":
        pass
    left.set()
    await kernels.interrupt(context)
