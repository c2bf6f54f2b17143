"""Commands while they run and a while after: output fanned out to streams, exit, deadline.

A command outlives the streams that watch it, as in envd: each Start or Connect stream attaches
a `Feed`, and output read while none is attached is dropped. Output is read in 32 KiB chunks
as it comes and handed to every feed in order; a feed that falls behind makes the reader wait,
so a slow client slows the command as a full pipe would, and memory stays bounded.

After the command exits, what is left in its pipes is still delivered; but a background child
(`sleep 1000 &`) may hold them open for ever, so once the pipes go quiet, or at the latest
after a short limit, the end is sent anyway. Envd does the same by closing the pipes on exit.
"""

import asyncio
import contextlib
import errno
import logging
import os
import signal
from collections import OrderedDict
from collections.abc import Callable, Container
from dataclasses import dataclass
from pathlib import Path

from connectrpc.code import Code

from workspace_agent import pty
from workspace_agent._proto.process.process_pb import ProcessConfig
from workspace_agent.errors import AgentError
from workspace_agent.events import EndEvent, Feed, Output, data_event, end_event, ended
from workspace_agent.launch import Child

log = logging.getLogger(__name__)

CHUNK = 32 * 1024
QUIET = 0.2
"""After exit, pipes with nothing to read for this long are held by a background child."""
DRAIN_LIMIT = 2.0
"""After exit, the longest the end waits for the pipes, however chatty a background child."""
POLL = 0.05
"""Exit polling interval where pidfds are missing (old kernels, some sandboxed runtimes)."""
REAP_EVERY = 1.0
"""As PID 1, how often to look for orphans that ended."""
KEEP_ENDED = 256
KEEP_ENDED_SECONDS = 600.0
"""Ended commands are remembered, for a late Connect, only this many and this long."""


@dataclass(frozen=True)
class Ended:
    pid: int
    tag: str | None
    end: EndEvent
    at: float


class Command:
    """A started command: who watches it, how it may be written to, signalled and resized."""

    def __init__(
        self,
        child: Child,
        config: ProcessConfig,
        tag: str | None,
        deadline: float | None,
        on_end: Callable[["Command"], None],
    ) -> None:
        loop = asyncio.get_running_loop()
        self.pid = child.popen.pid
        self.config = config
        self.tag = tag
        self.terminal = child.stderr is None
        self.feeds: set[Feed] = set()
        self.end: EndEvent | None = None
        self._child = child
        self._fds = child.fds
        """The agent's ends still open; each closed exactly once."""
        self._stdin = child.stdin
        self._stdin_lock = asyncio.Lock()
        self._exited = loop.create_future()
        self._read = 0
        self._delivering = 0
        self._on_end = on_end
        self._expiry = None if deadline is None else loop.call_at(deadline, self.expire)
        self.task = asyncio.create_task(self._supervise(), name=f"command {self.pid}")

    def attach(self) -> Feed:
        feed = Feed()
        if self.end is not None:
            feed.put_end(ended(self.end))
        else:
            self.feeds.add(feed)
        return feed

    def detach(self, feed: Feed) -> None:
        feed.close()
        self.feeds.discard(feed)

    def signal(self, number: int) -> None:
        """To the whole process group, so what the command started goes too."""
        if self.end is not None:
            return
        try:
            os.killpg(self.pid, number)
        except ProcessLookupError:
            if not self._exited.done():  # it left its group; its pid is still ours until reaped
                os.kill(self.pid, number)
        except PermissionError:  # only members the agent may not signal (setuid programs) left
            raise AgentError(
                Code.PERMISSION_DENIED, f"not permitted to signal process {self.pid}"
            ) from None

    def expire(self) -> None:
        """SIGKILL to the group, at the deadline or on shutdown: nobody is there to tell."""
        log.debug("killing command %d", self.pid)
        try:
            self.signal(signal.SIGKILL)
        except AgentError as e:
            log.warning("command %d: %s", self.pid, e.message)

    async def write(self, data: bytes, *, terminal: bool) -> None:
        if terminal != self.terminal:
            wanted = "pty" if self.terminal else "stdin"
            raise AgentError(
                Code.FAILED_PRECONDITION,
                f"process {self.pid} {'runs under' if self.terminal else 'has no'} a pty: "
                f"send its input as {wanted}",
            )
        async with self._stdin_lock:
            if self._stdin is None:
                raise AgentError(
                    Code.FAILED_PRECONDITION,
                    f"process {self.pid} has no open stdin: it was started without one, "
                    "or it was closed",
                )
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(self._stdin, view) :]
                except BlockingIOError:
                    await self._writable(self._stdin)
                except OSError as e:  # EPIPE: it closed its stdin; EIO: its terminal is gone
                    raise AgentError(
                        Code.FAILED_PRECONDITION,
                        f"process {self.pid} no longer reads its input: {e.strerror}",
                    ) from None

    async def close_stdin(self) -> None:
        if self.terminal:
            raise AgentError(
                Code.FAILED_PRECONDITION,
                f"process {self.pid} runs under a pty: send ^D (0x04) as pty input instead",
            )
        async with self._stdin_lock:
            if self._stdin is not None:
                self._fds.discard(self._stdin)
                os.close(self._stdin)
                self._stdin = None

    def resize(self, rows: int, cols: int) -> None:
        if not self.terminal or self._stdin is None:
            raise AgentError(Code.FAILED_PRECONDITION, f"process {self.pid} has no pty")
        pty.resize(self._stdin, rows, cols)

    async def _writable(self, fd: int) -> None:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_writer(fd, _settle, ready)
        try:
            await asyncio.wait([ready, self._exited], return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop.remove_writer(fd)
        if not ready.done():
            raise AgentError(
                Code.FAILED_PRECONDITION, f"process {self.pid} exited before reading its input"
            )

    async def _supervise(self) -> None:
        child = self._child
        pumps = [
            asyncio.create_task(self._pump(child.stdout, "pty" if self.terminal else "stdout"))
        ]
        if child.stderr is not None:
            pumps.append(asyncio.create_task(self._pump(child.stderr, "stderr")))
        status: int | None = None
        try:
            status = await _wait_exit(self.pid)
            child.popen.returncode = -1 if status is None else os.waitstatus_to_exitcode(status)
            self._exited.set_result(None)
            await self._drain(pumps)
        finally:
            try:
                await self._release(pumps)
            finally:
                self._finish(status)

    async def _release(self, pumps: list["asyncio.Task[None]"]) -> None:
        """Stop reading and close every fd, once no reader or writer can be waiting on one."""
        if not self._exited.done():
            self._exited.set_result(None)
        for pump in pumps:
            pump.cancel()
        for failure in await asyncio.gather(*pumps, return_exceptions=True):
            if failure is not None and not isinstance(failure, asyncio.CancelledError):
                log.error("command %d: reading its output failed: %s", self.pid, failure)
        async with self._stdin_lock:
            self._stdin = None
            while self._fds:
                os.close(self._fds.pop())

    def _finish(self, status: int | None) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        self.end = end_event(status)
        for feed in self.feeds:
            feed.put_end(ended(self.end))
        self.feeds.clear()
        log.debug("command %d ended: %s", self.pid, self.end.status)
        self._on_end(self)

    async def _pump(self, fd: int, kind: Output) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                await _readable(loop, fd)
                continue
            except OSError as e:
                if e.errno == errno.EIO:  # a terminal whose every slave end is closed
                    return
                raise
            if not chunk:
                return
            self._read += len(chunk)
            event = data_event(kind, chunk)
            self._delivering += 1
            try:
                for feed in list(self.feeds):
                    await feed.put(event)
            finally:
                self._delivering -= 1

    async def _drain(self, pumps: list["asyncio.Task[None]"]) -> None:
        loop = asyncio.get_running_loop()
        exited_at = loop.time()
        pending = set(pumps)
        while pending:
            before = self._read
            _, pending = await asyncio.wait(pending, timeout=QUIET)
            quiet = self._read == before and not self._delivering
            if pending and (quiet or loop.time() - exited_at >= DRAIN_LIMIT):
                log.debug("command %d: a background child holds its output open", self.pid)
                return


def _settle(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)


async def _readable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    ready = loop.create_future()
    loop.add_reader(fd, _settle, ready)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def _wait_exit(pid: int) -> int | None:
    """Reap the child and return its wait status; None if someone else reaped it."""
    loop = asyncio.get_running_loop()
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except OSError:
        pidfd = None
    try:
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222  # WNOHANG: no wait
            except ChildProcessError:
                return None
            if done:
                return status
            if pidfd is None:
                await asyncio.sleep(POLL)
            else:
                await _readable(loop, pidfd)
    finally:
        if pidfd is not None:
            os.close(pidfd)


class Table:
    """Running commands by pid, and a bounded memory of ended ones."""

    def __init__(self) -> None:
        self.running: dict[int, Command] = {}
        self._ended: OrderedDict[int, Ended] = OrderedDict()

    def add(
        self, child: Child, config: ProcessConfig, tag: str | None, deadline: float | None
    ) -> Command:
        command = Command(child, config, tag, deadline, self._finished)
        self._ended.pop(command.pid, None)
        self.running[command.pid] = command
        return command

    def find(self, selector: int | str) -> Command:
        """A running command, by pid or tag."""
        if isinstance(selector, int):
            command = self.running.get(selector)
        else:
            command = next((c for c in self.running.values() if c.tag == selector), None)
        if command is None:
            raise _not_found(selector)
        return command

    def find_any(self, selector: int | str) -> Command | Ended:
        """A running command, else one that ended a short while ago."""
        try:
            return self.find(selector)
        except AgentError:
            self._forget()
            if isinstance(selector, int) and selector in self._ended:
                return self._ended[selector]
            for ended in reversed(self._ended.values()):
                if ended.tag is not None and ended.tag == selector:
                    return ended
            raise

    def _finished(self, command: Command) -> None:
        assert command.end is not None  # noqa: S101  # called only once the end is known
        if self.running.get(command.pid) is command:
            del self.running[command.pid]
        loop = asyncio.get_running_loop()
        self._ended[command.pid] = Ended(command.pid, command.tag, command.end, loop.time())
        self._forget()

    def _forget(self) -> None:
        oldest = asyncio.get_running_loop().time() - KEEP_ENDED_SECONDS
        while self._ended and (
            len(self._ended) > KEEP_ENDED or next(iter(self._ended.values())).at < oldest
        ):
            self._ended.popitem(last=False)


def _not_found(selector: int | str) -> AgentError:
    if isinstance(selector, int):
        return AgentError(Code.NOT_FOUND, f"process with pid {selector} not found")
    return AgentError(Code.NOT_FOUND, f"process with tag {selector} not found")


def orphans(ours: Container[int]) -> list[int]:
    """Ended children of this process that are no command of ours: what a PID 1 inherits."""
    me = os.getpid()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in ours:
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # it went away
            continue
        # The command name may hold spaces and parentheses; the fields follow the last ')'.
        state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
        if state == "Z" and int(parent) == me:
            found.append(int(entry.name))
    return found


async def reap_orphans(table: Table) -> None:
    """Reap the children that commands leave behind, for as long as the agent serves.

    In a pod the agent is the container's first process, so what a command started and left
    running (`cmd &`) becomes the agent's child when the command ends, and stays a zombie
    unless the agent waits for it. Commands of our own are left to their supervisors, which
    read their exit status; spawning and registering a command happen without a pause in
    between, so no command is ever mistaken for an orphan.
    """
    while True:
        await asyncio.sleep(REAP_EVERY)
        for pid in orphans(table.running):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222  # WNOHANG: no wait
