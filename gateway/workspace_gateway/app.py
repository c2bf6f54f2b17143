"""One listener, two sides: a sandbox's data plane, chosen by header or Host, else the control API.

The data plane needs no API key (the sandbox's own access token guards it, checked by its agent);
the control API needs the key on every call.
"""

import hmac
import logging
import re
from dataclasses import dataclass

import httpx

from workspace_gateway import proxy
from workspace_gateway.asgi import ASGIApp, Receive, Scope, Send, header, respond_json
from workspace_gateway.backend import Backend, State
from workspace_gateway.control import Control
from workspace_gateway.errors import GatewayError

log = logging.getLogger("workspace_gateway")

HOST_ROUTE = re.compile(r"(?P<port>\d{1,5})-(?P<id>[a-z0-9]+)\.(?P<domain>.+)")
MAX_CONTROL_BODY = 1 << 20
UNAUTHORIZED = GatewayError(401, "Invalid API key, please check your X-API-Key header")


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
        return Target(sandbox_id, int(port) if port.isdigit() else -1)
    host = headers.get("host", "").rsplit(":", 1)[0] if "]" not in headers.get("host", "") else ""
    match = HOST_ROUTE.fullmatch(host.lower())
    if match and match["domain"] == domain.lower():
        return Target(match["id"], int(match["port"]))
    return None


def key_matches(given: str | None, key: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), key.encode())


def build_app(backend: Backend, http: httpx.AsyncClient, *, api_key: str, domain: str) -> ASGIApp:
    control = Control(backend, domain)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        target = route(headers, domain)
        try:
            if target is None:
                await _control(control, api_key, scope, receive, send)
            else:
                await _sandbox(backend, http, target, scope=scope, receive=receive, send=send)
        except GatewayError as e:
            await respond_json(send, e.status, e.body())

    return app


async def _control(
    control: Control, api_key: str, scope: Scope, receive: Receive, send: Send
) -> None:
    if not key_matches(header(scope, "x-api-key"), api_key):
        raise UNAUTHORIZED
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
        scope["method"], scope["path"], scope.get("query_string", b"").decode("latin-1"), body
    )
    await respond_json(send, reply.status, reply.body, reply.headers)


async def _sandbox(
    backend: Backend,
    http: httpx.AsyncClient,
    target: Target,
    *,
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    if proxy.internal(scope["path"]):
        raise GatewayError(403, f"{scope['path']} is not reachable from outside the sandbox")
    try:
        sandbox = await backend.get(target.sandbox_id)
    except GatewayError:
        sandbox = None
    if sandbox is None or sandbox.state is not State.RUNNING or sandbox.endpoint is None:
        await respond_json(send, 502, proxy.not_found_body(target.sandbox_id))
        return
    if target.port != proxy.ENVD_PORT:
        # Only the agent's port is served so far; E2B's wording, which the SDK recognises.
        body = {
            "sandboxId": target.sandbox_id,
            "message": f"The sandbox is running but port is not open: {target.port}",
            "code": 502,
        }
        await respond_json(send, 502, body)
        return
    await proxy.forward(
        http,
        sandbox_id=target.sandbox_id,
        endpoint=sandbox.endpoint,
        scope=scope,
        receive=receive,
        send=send,
    )
