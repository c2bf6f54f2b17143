"""`workspace-sandbox-agent`: serve envd's protocol on one address, over one workspace root.

Started by systemd's socket activation (a VM's agent), it serves on the listening socket systemd
holds and passes as fd 3 (sd_listen_fds(3)), so that the port stays systemd's while the agent
restarts and no local user can take it in between; else it binds `--address` itself.
"""

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from pathlib import Path

import uvicorn

from workspace_agent import ENVD_VERSION, __version__, interpreting
from workspace_agent.connections import Limits, config_options
from workspace_agent.errors import AgentError
from workspace_agent.process import ProcessService
from workspace_agent.server import build_app
from workspace_agent.state import Agent
from workspace_agent.users import Users

DEFAULT_PORT = 49983
INTERPRETER_PORT = 49999
# envd's own idle timeout; far above the SDK's 50 s keepalive events and its 300 s idle pool.
KEEP_ALIVE_SECONDS = 640
# On shutdown, streams still open after this long (a watcher, a slow client) are cancelled.
SHUTDOWN_GRACE_SECONDS = 3
# sd_listen_fds(3): the first socket systemd passes.
SD_LISTEN_FDS_START = 3
LISTEN_VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")

log = logging.getLogger("workspace_agent")


def address(text: str) -> tuple[str, int]:
    """HOST:PORT, with IPv6 hosts in brackets (`[::]:49983`)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:  # noqa: PLR2004  # the port range
        msg = f"{text!r} is not HOST:PORT"
        raise argparse.ArgumentTypeError(msg)
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104  # the pod's or VM's own address


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="workspace-sandbox-agent",
        description="Serve E2B's envd protocol: files and commands over one workspace root.",
    )
    p.add_argument(
        "--address",
        type=address,
        default=("0.0.0.0", DEFAULT_PORT),  # noqa: S104  # the pod's or VM's own address
        help=f"HOST:PORT to listen on (default 0.0.0.0:{DEFAULT_PORT}), unless started by "
        "systemd's socket activation, which passes the socket to serve on",
    )
    p.add_argument(
        "--root",
        type=Path,
        default=Path("/workspace"),
        help="the workspace root: relative paths, default cwd and HOME (default /workspace)",
    )
    p.add_argument(
        "--user",
        default="user",
        help="the default user (default `user`; when not running as root, the agent's own)",
    )
    p.add_argument(
        "--remote-only",
        action="store_true",
        help="close every connection from this machine's own addresses at accept, /health "
        "included: a VM's root agent, which the sandbox's users must not reach",
    )
    p.add_argument(
        "--interpreter",
        type=address,
        default=("0.0.0.0", INTERPRETER_PORT),  # noqa: S104  # the pod's or VM's own address
        metavar="HOST:PORT",
        help="where the code interpreter (E2B's `run_code`) listens when /init asks for it, as "
        f"the default user (default 0.0.0.0:{INTERPRETER_PORT}); it needs the `interpreter` "
        "extra",
    )
    p.add_argument(
        "--head-timeout",
        type=float,
        default=Limits.head_seconds,
        metavar="SECONDS",
        help="close a connection whose request head is not complete this long after its first "
        f"byte (default {Limits.head_seconds:g})",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=Limits.max_connections,
        metavar="N",
        help=f"close new connections at accept while N are open (default {Limits.max_connections})",
    )
    p.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    p.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__} (envd {ENVD_VERSION})"
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    # A parent that ignores SIGCHLD hands that on through exec, and then the kernel reaps every
    # command itself and its exit status is lost: commands must be ours to wait for.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    root: Path = args.root
    if not root.is_dir():
        sys.exit(f"workspace-sandbox-agent: --root {root} is not a directory")
    try:
        users = Users(root.resolve(), args.user)
    except AgentError as e:
        sys.exit(f"workspace-sandbox-agent: --user: {e.message}")
    interpreter = interpreting.Interpreter(
        args.interpreter, root.resolve(), privileged=users.privileged
    )
    agent = Agent(
        root=root.resolve(), users=users, remote_only=args.remote_only, interpreter=interpreter
    )
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    limits = Limits(head_seconds=args.head_timeout, max_connections=args.max_connections)
    asyncio.run(serve(agent, args.address, args.log_level, limits, inherited_socket()))


def inherited_socket() -> socket.socket | None:
    """The listening socket systemd passed to this process, if it did; None otherwise.

    The variables are removed either way, and the socket is not inherited by commands: neither
    is theirs to see.
    """
    pid, count = (os.environ.pop(name, None) for name in LISTEN_VARIABLES[:2])
    os.environ.pop(LISTEN_VARIABLES[2], None)
    if pid is None or count is None or pid != str(os.getpid()):  # none, or not meant for us
        return None
    if count != "1":
        sys.exit(f"workspace-sandbox-agent: systemd passed {count} sockets, not 1")
    try:
        sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    except OSError as e:
        sys.exit(f"workspace-sandbox-agent: systemd's socket (fd 3): {e.strerror}")
    sock.set_inheritable(False)
    if sock.type != socket.SOCK_STREAM or not sock.getsockopt(
        socket.SOL_SOCKET, socket.SO_ACCEPTCONN
    ):
        sys.exit("workspace-sandbox-agent: systemd's fd 3 is not a listening stream socket")
    return sock


async def serve(
    agent: Agent,
    where: tuple[str, int],
    log_level: str,
    limits: Limits,
    inherited: socket.socket | None = None,
) -> None:
    processes = ProcessService(agent)
    host, port = where
    config = uvicorn.Config(
        build_app(agent, processes),
        host=host,
        port=port,
        **config_options(limits, remote_only=agent.remote_only),
        lifespan="off",
        log_level=log_level,
        access_log=log_level == "debug",
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        server_header=False,
        # The peer is the socket's, never a header's: `is_local` judges who is calling.
        proxy_headers=False,
    )
    if inherited is not None:
        host, port = inherited.getsockname()[:2]
    log.info("serving envd %s on %s:%d over %s", ENVD_VERSION, host, port, agent.root)
    server = Server(config, processes, agent.interpreter)
    try:
        await server.serve(None if inherited is None else [inherited])
    finally:
        await server.close()


class Server(uvicorn.Server):
    """uvicorn's server, which kills the commands and the interpreter first when it shuts down.

    Their streams then end with their commands rather than holding the shutdown open; and after
    a signal uvicorn re-raises it once `serve` returns, so a `finally` there never runs.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        processes: ProcessService,
        interpreter: interpreting.Interpreter,
    ) -> None:
        super().__init__(config)
        self.processes = processes
        self.interpreter = interpreter

    async def close(self) -> None:
        await self.processes.close()
        await self.interpreter.close()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.close()
        await super().shutdown(sockets)
