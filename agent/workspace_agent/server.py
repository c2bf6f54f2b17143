"""The ASGI app: the two Connect services and envd's plain routes on one listener.

Authority is decided here, once, before any route runs. The agent fails closed: until `/init`
has set an access token (after every boot and every restart) it answers nothing but `GET
/health` and `POST /init`, and refuses the rest with 401 and `X-Agent-Initialized: false`, the
header `/health` also carries, so that the gateway knows to run `/init` again. The first `/init`
is taken on trust, as only the gateway can reach the agent; after it, every request but
`/health`, `/init` (which checks the token itself) and `/files` (which also takes a signed URL)
must present the token in `X-Access-Token`.

In a VM the agent is root, and the sandbox's users can reach it on the loopback or the VM's own
address, where no network policy stands; before the gateway's `/init` they could set the token
first. So with `remote_only` a peer whose address belongs to this machine is refused: at accept
time, before a byte is read (`connections.py`), and here again, where it gets only `/health`. A
local user can't impersonate another peer: a connection from a borrowed address never
completes, as the answers are routed away to that address.
"""

import errno
import ipaddress
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
    respond_json,
)
from workspace_agent.identity import Identity
from workspace_agent.metrics import Sampler
from workspace_agent.process import ProcessService
from workspace_agent.state import Agent

UNAUTHORIZED = AgentError(Code.UNAUTHENTICATED, "invalid or missing access token")
UNINITIALISED = AgentError(Code.UNAUTHENTICATED, "the sandbox's agent has not been initialised")
OPEN_BEFORE_INIT = {("GET", "/health"), ("POST", "/init")}
"""All an agent answers before `/init`: the probe, and `/init` itself."""
INITIALIZED = b"x-agent-initialized"
"""`true` or `false` on `/health` and on every refusal for want of `/init`: the gateway's cue."""
LOCAL = AgentError(Code.PERMISSION_DENIED, "the agent answers only the gateway")
MAX_PROCESS_MESSAGE = 64 << 20
"""The largest Process message, after inflating: stdin sent in one call may be big, but a bound
is what stops a gzip bomb or a length prefix of 4 GiB from taking the agent's memory. The
Filesystem service keeps the library's 4 MiB: its messages hold a path or two."""


def build_app(agent: Agent, processes: ProcessService) -> ASGIApp:
    identity = Identity(privileged=agent.users.privileged)
    sampler = Sampler(agent.root)
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
        service = next((s for prefix, s in rpc.items() if path.startswith(prefix)), None)
        refused = _refusal(agent, scope, rpc=service is not None)
        if refused is not None:
            answer = respond_error if service is None else respond_connect_error
            await answer(send, *refused)
        elif service is not None:
            await service(scope, receive, send)
        else:
            await _http(agent, identity, scope, receive, send, sampler=sampler)

    return app


def _refusal(
    agent: Agent, scope: Scope, *, rpc: bool
) -> tuple[AgentError, tuple[tuple[bytes, bytes], ...]] | None:
    """Why a request is refused before its route runs, with the headers to add; or None.

    The plain routes check the token themselves, as `/init` and `/files` each do it their way.
    """
    path: str = scope["path"]
    if agent.remote_only and path != "/health" and is_local(scope.get("client")):
        return LOCAL, ()
    if not agent.session.initialised and (scope["method"], path) not in OPEN_BEFORE_INIT:
        return UNINITIALISED, _initialized(agent)
    if rpc and not agent.session.token_matches(header(scope, "x-access-token")):
        return UNAUTHORIZED, ()
    return None


def is_local(client: tuple[str, int] | None) -> bool:
    """Whether a peer's address is one of this machine's: the kernel lets us bind only those.

    Any other failure counts as local: refusing is the safe answer, and the gateway's address
    is always a plain remote one.
    """
    if client is None:  # not over IP
        return True
    host = client[0]
    try:
        mapped = ipaddress.IPv6Address(host).ipv4_mapped if ":" in host else None
    except ValueError:
        return True
    if mapped is not None:
        # A dual-stack listener's IPv4 peer: probed as IPv4, which works whatever the
        # machine's default for IPv6 sockets (`bindv6only`).
        host = str(mapped)
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.bind((host, 0))
    except OSError as e:
        return e.errno != errno.EADDRNOTAVAIL
    return True


async def _http(
    agent: Agent,
    identity: Identity,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    sampler: Sampler,
) -> None:
    path: str = scope["path"]
    method: str = scope["method"]
    if path == "/health" and method == "GET":
        version = (b"x-envd-version", ENVD_VERSION.encode())
        await respond(send, 204, headers=(version, *_initialized(agent)))
    elif path == "/init" and method == "POST":
        await auth.init(agent, scope, receive, send)
    elif path == "/files" and method in {"GET", "POST"}:
        await files.handle(agent, identity, scope, receive, send)
    elif path in {"/health", "/init", "/files"}:
        await respond_error(send, AgentError(Code.INVALID_ARGUMENT, f"{method} not allowed"))
    elif not agent.session.token_matches(header(scope, "x-access-token")):
        await respond_error(send, UNAUTHORIZED)
    elif path == "/metrics" and method == "GET":
        await respond_json(send, 200, await sampler.sample())
    else:
        await respond_error(send, AgentError(Code.NOT_FOUND, f"no route {path}"))


def _initialized(agent: Agent) -> tuple[tuple[bytes, bytes]]:
    return ((INITIALIZED, b"true" if agent.session.initialised else b"false"),)
