"""The ASGI app: the two Connect services, `/files`, `/health` and `/init` on one listener.

Authority is decided here, once, before any route runs: after `/init` has set an access token,
every request but `/health`, `/init` (which checks the token itself) and `/files` (which also
takes a signed URL) must present it in `X-Access-Token`.

In a VM the agent is root, and the sandbox's users can reach it on the loopback or the VM's own
address, where no network policy stands. Until the gateway's `/init` sets a token (after every
boot and every restart of the agent) anyone may act as root, and may even set the token first.
So with `remote_only` a peer whose address belongs to this machine gets only `/health`. A local
user can't impersonate another peer: a connection from a borrowed address never completes, as
the answers are routed away to that address.
"""

import errno
import socket
from typing import cast

from connectrpc.code import Code

from workspace_agent import ENVD_VERSION, auth, files
from workspace_agent._proto.filesystem.filesystem_connect import FilesystemASGIApplication
from workspace_agent._proto.process.process_connect import ProcessASGIApplication
from workspace_agent.errors import AgentError
from workspace_agent.filesystem import FilesystemService
from workspace_agent.http import (
    ASGIApp,
    Receive,
    Scope,
    Send,
    header,
    respond,
    respond_connect_error,
    respond_error,
)
from workspace_agent.identity import Identity
from workspace_agent.process import ProcessService
from workspace_agent.state import Agent

UNAUTHORIZED = AgentError(Code.UNAUTHENTICATED, "invalid or missing access token")
LOCAL = AgentError(Code.PERMISSION_DENIED, "the agent answers only the gateway")
MAX_PROCESS_MESSAGE = 64 << 20
"""The largest Process message, after inflating: stdin sent in one call may be big, but a bound
is what stops a gzip bomb or a length prefix of 4 GiB from taking the agent's memory. The
Filesystem service keeps the library's 4 MiB: its messages hold a path or two."""


def build_app(agent: Agent, processes: ProcessService) -> ASGIApp:
    identity = Identity(privileged=agent.users.privileged)
    rpc: dict[str, ASGIApp] = {
        "/process.Process/": cast(
            "ASGIApp", ProcessASGIApplication(processes, read_max_bytes=MAX_PROCESS_MESSAGE)
        ),
        "/filesystem.Filesystem/": cast(
            "ASGIApp", FilesystemASGIApplication(FilesystemService(agent, identity))
        ),
    }

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        local = agent.remote_only and path != "/health" and is_local(scope.get("client"))
        for prefix, service in rpc.items():
            if path.startswith(prefix):
                if local:
                    await respond_connect_error(send, LOCAL)
                    return
                if not agent.session.token_matches(header(scope, "x-access-token")):
                    await respond_connect_error(send, UNAUTHORIZED)
                    return
                await service(scope, receive, send)
                return
        if local:
            await respond_error(send, LOCAL)
            return
        await _http(agent, identity, scope, receive, send)

    return app


def is_local(client: tuple[str, int] | None) -> bool:
    """Whether a peer's address is one of this machine's: the kernel lets us bind only those.

    Any other failure counts as local: refusing is the safe answer, and the gateway's address
    is always a plain remote one.
    """
    if client is None:  # not over IP
        return True
    host = client[0]
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.bind((host, 0))
    except OSError as e:
        return e.errno != errno.EADDRNOTAVAIL
    return True


async def _http(
    agent: Agent, identity: Identity, scope: Scope, receive: Receive, send: Send
) -> None:
    path: str = scope["path"]
    method: str = scope["method"]
    if path == "/health" and method == "GET":
        await respond(send, 204, headers=((b"x-envd-version", ENVD_VERSION.encode()),))
    elif path == "/init" and method == "POST":
        await auth.init(agent, scope, receive, send)
    elif path == "/files" and method in {"GET", "POST"}:
        await files.handle(agent, identity, scope, receive, send)
    elif path in {"/health", "/init", "/files"}:
        await respond_error(send, AgentError(Code.INVALID_ARGUMENT, f"{method} not allowed"))
    elif not agent.session.token_matches(header(scope, "x-access-token")):
        await respond_error(send, UNAUTHORIZED)
    else:
        await respond_error(send, AgentError(Code.NOT_FOUND, f"no route {path}"))
