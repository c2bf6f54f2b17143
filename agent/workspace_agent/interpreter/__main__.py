"""`python -m workspace_agent.interpreter`: serve the code interpreter on one address."""

import argparse
import asyncio
import logging
import shutil
import socket
from pathlib import Path
from typing import Any

import uvicorn

from workspace_agent.interpreter.kernels import Contexts, Refused
from workspace_agent.interpreter.server import build_app
from workspace_agent.main import address

log = logging.getLogger("workspace_agent.interpreter")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="workspace-sandbox-interpreter",
        description="Serve E2B's code interpreter API, backed by Jupyter kernels.",
    )
    p.add_argument("--address", type=address, required=True, help="HOST:PORT to listen on")
    p.add_argument("--root", type=Path, required=True, help="the default working directory")
    p.add_argument(
        "--deno",
        default=shutil.which("deno"),
        help="Deno, whose kernel runs JavaScript and TypeScript (default: deno on PATH)",
    )
    p.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(args.address, args.root.resolve(), args.deno, args.log_level))


async def serve(where: tuple[str, int], root: Path, deno: str | None, log_level: str) -> None:
    contexts = Contexts(root, deno)
    host, port = where
    config = uvicorn.Config(
        build_app(contexts),
        host=host,
        port=port,
        lifespan="off",
        log_level=log_level,
        access_log=log_level == "debug",
        server_header=False,
    )
    # The default Python context starts at once, so the first `run_code` finds it warm.
    warm = asyncio.ensure_future(contexts.default(None))
    warm.add_done_callback(_warmed)
    log.info(
        "serving the code interpreter on %s:%d (%s)", host, port, ", ".join(contexts.languages())
    )
    await Server(config, contexts, warm).serve()


class Server(uvicorn.Server):
    """uvicorn's server, which stops the kernels when it shuts down.

    In `shutdown`, not after `serve`: after a signal uvicorn re-raises it once `serve` returns.
    """

    def __init__(
        self, config: uvicorn.Config, contexts: Contexts, warm: "asyncio.Future[Any]"
    ) -> None:
        super().__init__(config)
        self.contexts = contexts
        self.warm = warm

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.warm.cancel()
        await asyncio.gather(self.warm, return_exceptions=True)
        await self.contexts.close()
        await super().shutdown(sockets)


def _warmed(task: "asyncio.Future[Any]") -> None:
    if not task.cancelled() and isinstance(task.exception(), Refused):
        log.warning("the default Python context did not start: %s", task.exception())


if __name__ == "__main__":
    main()
