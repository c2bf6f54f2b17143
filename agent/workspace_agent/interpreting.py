"""The code interpreter as the agent's child: started at `/init`, as the sandbox's user.

With `--interpreter HOST:PORT` the agent runs `workspace_agent.interpreter` there (E2B's port is
49999). It starts at the first `/init`, so that its kernels have the sandbox's variables as
commands do, and `/init` answers once it listens: the SDK's first `run_code` follows the create
at once. A later `/init` that changes the variables or the default user starts it again; one
that changes neither (the gateway's, after the agent restarted) leaves it be. Should it exit,
it is started again after a pause that grows to `MAX_BACKOFF_SECONDS`.

The interpreter runs in a session of its own, and the agent's shutdown ends the whole of it,
kernels included.
"""

import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

from workspace_agent.launch import as_user, environment
from workspace_agent.users import User

log = logging.getLogger("workspace_agent")

READY_SECONDS = 30.0
MAX_BACKOFF_SECONDS = 30.0
STOP_SECONDS = 3.0


def available() -> str | None:
    """Why the interpreter cannot run here, or None: its libraries are installed."""
    import importlib.util  # noqa: PLC0415  # asked once, at start

    missing = [m for m in ("jupyter_client", "ipykernel") if importlib.util.find_spec(m) is None]
    if missing:
        return (
            f"{', '.join(missing)} not installed: install the agent with its `interpreter` extra "
            "(pip install 'workspace-sandbox-agent[interpreter]')"
        )
    return None


class Interpreter:
    def __init__(self, where: tuple[str, int], root: Path, *, privileged: bool) -> None:
        self.where = where
        self.root = root
        self.privileged = privileged
        self.missing = available()
        """Why it cannot run here, or None."""
        self.wanted: tuple[User, tuple[tuple[str, str], ...]] | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.runner: asyncio.Task[None] | None = None

    @classmethod
    def absent(cls) -> "Interpreter":
        """One that never runs: an agent's without `--interpreter` (the tests')."""
        interpreter = cls(("127.0.0.1", 0), Path("/"), privileged=False)
        interpreter.missing = "the agent was started without a code interpreter"
        return interpreter

    async def configure(self, user: User, env: dict[str, str]) -> None:
        """Run it as `user` with `env` (`/init`'s), and return once it listens."""
        wanted = (user, tuple(sorted(env.items())))
        if wanted != self.wanted or self.runner is None or self.runner.done():
            await self.close()
            self.wanted = wanted
            self.runner = asyncio.ensure_future(self._run(user, env))
        await self._listening()

    async def close(self) -> None:
        runner, self.runner = self.runner, None
        if runner is not None:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
        await self._end()

    async def _run(self, user: User, env: dict[str, str]) -> None:
        backoff = 1.0
        host, port = self.where
        argv = [
            sys.executable,
            "-I",
            "-m",
            "workspace_agent.interpreter",
            "--address",
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
            "--root",
            str(self.root),
            "--log-level",
            "warning",
        ]
        while True:
            try:
                self.process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    cwd=self.root,
                    env=environment(user, env, {}, terminal=False),
                    start_new_session=True,
                    preexec_fn=as_user(user if self.privileged else None),
                )
                code = await self.process.wait()
            finally:
                await self._end()
            log.warning("the code interpreter exited with %s; starting it again", code)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    async def _listening(self) -> None:
        host, port = self.where
        host = "127.0.0.1" if host in {"0.0.0.0", ""} else "::1" if host == "::" else host  # noqa: S104
        deadline = asyncio.get_running_loop().time() + READY_SECONDS
        while asyncio.get_running_loop().time() < deadline:
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection(host, port)
                writer.close()
                return
            await asyncio.sleep(0.05)
        log.warning("the code interpreter is not listening after %.0f s", READY_SECONDS)

    async def _end(self) -> None:
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), STOP_SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
