"""Contexts: one Jupyter kernel each, started and spoken to with `jupyter_client`.

A context is what the SDK's `create_code_context` makes: a kernel of one language in one working
directory, whose state (variables, imports) lasts across `run_code` calls until it is restarted
or removed. Each language has a default context, made at its first use, which `run_code` without
a context runs in. One execution runs in a context at a time; the next waits its turn.

Kernels run as the interpreter does (the sandbox's user), with its environment. What Jupyter and
its libraries write for themselves (connection files, IPython's profile, matplotlib's cache)
goes to a private folder of the interpreter's, not to the workspace the user sees.
"""

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Any

from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from jupyter_client.manager import AsyncKernelManager

from workspace_agent.interpreter import outputs

log = logging.getLogger("workspace_agent.interpreter")

MAX_CONTEXTS = 32
START_SECONDS = 60.0
POLL_SECONDS = 1.0
"""How often an execution that hears nothing checks that its kernel is still alive."""


class Refused(Exception):  # noqa: N818  # an answer, not a failure
    """A request the interpreter answers with `status` and `message`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Language:
    name: str
    """As contexts report it."""
    kernel: str
    """The kernel spec's name."""
    set_env: Callable[[dict[str, str]], str]
    """Code that sets an execution's variables and keeps the old values."""
    restore_env: str
    """Code that puts them back."""
    settle_seconds: float = 0.0
    """How long outputs may trail the kernel's `idle`: Deno's kernel publishes some of a run's
    outputs after it (its messages leave by more than one path); IPython's never does."""


def _python_set(env: dict[str, str]) -> str:
    values = json.dumps(env)
    return (
        "import os as _e2b_os\n"
        f"_e2b_saved = {{k: _e2b_os.environ.get(k) for k in {values}}}\n"
        f"_e2b_os.environ.update({values})\n"
    )


PYTHON_RESTORE = (
    "for _e2b_k, _e2b_v in _e2b_saved.items():\n"
    "    if _e2b_v is None:\n"
    "        _e2b_os.environ.pop(_e2b_k, None)\n"
    "    else:\n"
    "        _e2b_os.environ[_e2b_k] = _e2b_v\n"
    "del _e2b_saved\n"
)


def _deno_set(env: dict[str, str]) -> str:
    values = json.dumps(env)
    return (
        f"globalThis.__e2bSaved = Object.fromEntries(Object.keys({values})"
        ".map((k) => [k, Deno.env.get(k)]));\n"
        f"for (const [k, v] of Object.entries({values})) Deno.env.set(k, v);\n"
    )


DENO_RESTORE = (
    "for (const [k, v] of Object.entries(globalThis.__e2bSaved)) "
    "v === undefined ? Deno.env.delete(k) : Deno.env.set(k, v);\n"
    "delete globalThis.__e2bSaved;\n"
)

PYTHON = Language("python", "python3", _python_set, PYTHON_RESTORE)
DENO_SETTLE_SECONDS = 0.05
"""Outputs were seen trailing Deno's `idle` by at most 1.5 ms (9 of 60 runs, on two loaded
cores): this is 30 times that."""
JAVASCRIPT = Language("javascript", "deno", _deno_set, DENO_RESTORE, DENO_SETTLE_SECONDS)
TYPESCRIPT = Language("typescript", "deno", _deno_set, DENO_RESTORE, DENO_SETTLE_SECONDS)
LANGUAGES = {
    "python": PYTHON,
    "python3": PYTHON,
    "javascript": JAVASCRIPT,
    "js": JAVASCRIPT,
    "typescript": TYPESCRIPT,
    "ts": TYPESCRIPT,
}
"""What the SDK's `language` may say, and the kernel that runs it."""


def write_spec(folder: Path, name: str, argv: list[str], language: str) -> None:
    """Write a kernel spec into `folder`'s `kernels`."""
    spec = folder / "kernels" / name
    spec.mkdir(parents=True)
    kernel = {"argv": argv, "display_name": name, "language": language}
    (spec / "kernel.json").write_text(json.dumps(kernel))


def python_argv() -> list[str]:
    """IPython's kernel on this interpreter's Python, its tracebacks in plain text.

    An agent reads them, and terminal colours are noise to it.
    """
    return [
        sys.executable,
        "-m",
        "ipykernel_launcher",
        "-f",
        "{connection_file}",
        "--InteractiveShell.colors=nocolor",
    ]


def deno_argv(deno: str) -> list[str]:
    """Deno's own Jupyter kernel (`deno jupyter`)."""
    return [deno, "jupyter", "--kernel", "--conn", "{connection_file}"]


@dataclass
class Context:
    id: str
    language: Language
    cwd: Path
    manager: AsyncKernelManager
    client: Any
    """The kernel's `AsyncKernelClient` (untyped upstream)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def json(self) -> dict[str, str]:
        return {"id": self.id, "language": self.language.name, "cwd": str(self.cwd)}


class Contexts:
    """The interpreter's kernels, by context ID; `close` stops them all."""

    def __init__(self, root: Path, deno: str | None = None) -> None:
        self.root = root
        self.private = Path(tempfile.mkdtemp(prefix="workspace-sandbox-interpreter-"))
        (self.private / "runtime").mkdir()
        self.env = {
            **os.environ,
            "JUPYTER_RUNTIME_DIR": str(self.private / "runtime"),
            "IPYTHONDIR": str(self.private / "ipython"),
            "MPLCONFIGDIR": str(self.private / "matplotlib"),
            "DENO_DIR": str(self.private / "deno"),
        }
        os.environ["JUPYTER_RUNTIME_DIR"] = self.env["JUPYTER_RUNTIME_DIR"]
        write_spec(self.private, PYTHON.kernel, python_argv(), "python")
        if deno is not None:
            write_spec(self.private, JAVASCRIPT.kernel, deno_argv(deno), "typescript")
        # Only these: never a kernel spec of the user's (~/.local/share/jupyter is the
        # workspace's) nor the system's, which could name another interpreter.
        self.specs = KernelSpecManager(
            kernel_dirs=[str(self.private / "kernels")], ensure_native_kernel=False
        )
        self.contexts: dict[str, Context] = {}
        self.defaults: dict[str, str] = {}
        self.making = asyncio.Lock()

    def languages(self) -> list[str]:
        """The languages whose kernel this sandbox has."""
        known = set(self.specs.find_kernel_specs())
        return sorted(name for name, lang in LANGUAGES.items() if lang.kernel in known)

    def language(self, name: str | None) -> Language:
        if name is None:
            return PYTHON
        language = LANGUAGES.get(name.lower())
        if language is None or language.kernel not in self.specs.find_kernel_specs():
            offered = ", ".join(self.languages())
            raise Refused(400, f"language {name!r} has no kernel in this sandbox; it has {offered}")
        return language

    def cwd(self, asked: str | None) -> Path:
        if not asked:
            return self.root
        path = Path(os.path.normpath(self.root / asked))
        if not path.is_dir():
            raise Refused(400, f"cwd {str(path)!r} is not a directory")
        return path

    async def create(self, language: str | None, cwd: str | None) -> Context:
        lang, where = self.language(language), self.cwd(cwd)
        async with self.making:
            if len(self.contexts) >= MAX_CONTEXTS:
                raise Refused(
                    409, f"this sandbox holds {MAX_CONTEXTS} contexts already: remove one first"
                )
            context = await self._start(lang, where)
            self.contexts[context.id] = context
            return context

    async def default(self, language: str | None) -> Context:
        """The language's default context, made the first time it is asked for."""
        lang = self.language(language)
        async with self.making:
            known = self.contexts.get(self.defaults.get(lang.name, ""))
            if known is not None:
                return known
            context = await self._start(lang, self.root)
            self.contexts[context.id] = context
            self.defaults[lang.name] = context.id
            return context

    def get(self, context_id: str) -> Context:
        context = self.contexts.get(context_id)
        if context is None:
            raise Refused(404, f"context {context_id!r} not found")
        return context

    async def restart(self, context_id: str) -> None:
        context = self.get(context_id)
        async with context.lock:
            context.client.stop_channels()
            await context.manager.restart_kernel(now=True)
            context.client = await _ready_client(context.manager)

    async def remove(self, context_id: str) -> None:
        context = self.get(context_id)
        del self.contexts[context_id]
        for language, known in list(self.defaults.items()):
            if known == context_id:
                del self.defaults[language]
        await _stop(context)

    async def close(self) -> None:
        contexts, self.contexts = list(self.contexts.values()), {}
        await asyncio.gather(*(_stop(c) for c in contexts), return_exceptions=True)
        shutil.rmtree(self.private, ignore_errors=True)

    async def _start(self, language: Language, cwd: Path) -> Context:
        context_id = uuid.uuid4().hex
        # IPython's kernel over Unix sockets in the private folder, not TCP ports any local
        # process could reach (the messages are signed, not encrypted) or a user's server could
        # want. Deno's kernel listens on TCP only (loopback); it colours what it prints unless
        # told not to.
        deno = language.kernel == "deno"
        manager = AsyncKernelManager(
            kernel_name=language.kernel,
            kernel_spec_manager=self.specs,
            transport="tcp" if deno else "ipc",
            ip="127.0.0.1" if deno else str(self.private / "runtime" / context_id[:12]),
        )
        env = {**self.env, "NO_COLOR": "1"} if deno else self.env
        try:
            await manager.start_kernel(cwd=str(cwd), env=dict(env))
            client = await _ready_client(manager)
        except (NoSuchKernel, OSError, RuntimeError, TimeoutError) as e:
            await _abandon(manager)
            raise Refused(503, f"the {language.name} kernel did not start: {e}") from None
        except BaseException:  # cancelled (the interpreter is stopping): no kernel left behind
            await _abandon(manager)
            raise
        return Context(context_id, language, cwd, manager, client)


async def _abandon(manager: AsyncKernelManager) -> None:
    with contextlib.suppress(Exception):
        await manager.shutdown_kernel(now=True)


async def _ready_client(manager: AsyncKernelManager) -> Any:
    client = manager.client()
    client.start_channels()
    await client.wait_for_ready(timeout=START_SECONDS)
    return client


async def _stop(context: Context) -> None:
    context.client.stop_channels()
    await context.manager.shutdown_kernel(now=True)


async def execute(context: Context, code: str, env: dict[str, str]) -> AsyncIterator[bytes]:
    """Run `code` in `context`: the SDK's lines, as the kernel says them, then the end.

    Whoever stops reading should `interrupt` the context: the execution then ends as the kernel
    stops it, and the context is free for the next.
    """
    async with context.lock:
        if env:
            await _quietly(context, context.language.set_env(env))
        try:
            msg_id = context.client.execute(code, store_history=True, allow_stdin=False)
            async for message in _replies(context, msg_id):
                out = outputs.translate(message)
                if out is not None:
                    yield outputs.line(out)
        finally:
            if env:
                await _quietly(context, context.language.restore_env)
    yield outputs.line({"type": "end_of_execution"})


async def interrupt(context: Context) -> None:
    with contextlib.suppress(Exception):
        await context.manager.interrupt_kernel()


async def _quietly(context: Context, code: str) -> None:
    msg_id = context.client.execute(code, silent=True, store_history=False, allow_stdin=False)
    async for _ in _replies(context, msg_id):
        pass


async def _replies(context: Context, msg_id: str) -> AsyncIterator[dict[str, Any]]:
    """The iopub messages of one execution until its kernel is idle again, or dies.

    After `idle`, what trails it within the language's `settle_seconds` of quiet is the run's
    too.
    """
    settle = context.language.settle_seconds
    idle = False
    while True:
        try:
            message = await context.client.get_iopub_msg(timeout=settle if idle else POLL_SECONDS)
        except Empty:
            if idle:
                return
            if not await context.manager.is_alive():
                yield _died()
                return
            continue
        if message.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        content = message["content"]
        if message["msg_type"] == "status" and content.get("execution_state") == "idle":
            if not settle:
                return
            idle = True
            continue
        if message["msg_type"] != "status":
            yield message


def _died() -> dict[str, Any]:
    return {
        "msg_type": "error",
        "content": {
            "ename": "KernelDied",
            "evalue": "the kernel exited (out of memory, or it was killed): restart the context",
            "traceback": [],
        },
    }
