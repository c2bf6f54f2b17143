"""The Process service: spawn, stream, signals, stdin, re-attach.

A Start or Connect stream is `start{pid}`, then `data` as it comes, then one `end`; `keepalive`
events fill silences longer than the client's `Keepalive-Ping-Interval`. `Connect-Timeout-Ms`
on Start bounds the command's life (envd's process context): when it expires the command's
process group is killed and the stream ends with `deadline_exceeded`, which the SDK raises as
`TimeoutException`. connectrpc 0.12.1 only parses that header for the handler (`ctx.timeout_ms`)
and enforces nothing server-side, so both the kill and the stream's end happen here. On Connect
the same header bounds only the stream.
"""

import asyncio
import os
import signal
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from typing import Any

from connectrpc.code import Code
from connectrpc.request import RequestContext
from protobuf import Oneof

from workspace_agent._proto.process.process_connect import Process
from workspace_agent._proto.process.process_pb import (
    PTY,
    CloseStdinRequest,
    CloseStdinResponse,
    ConnectRequest,
    ConnectResponse,
    ListRequest,
    ListResponse,
    ProcessConfig,
    ProcessEvent,
    ProcessInfo,
    ProcessInput,
    ProcessSelector,
    SendInputRequest,
    SendInputResponse,
    SendSignalRequest,
    SendSignalResponse,
    Signal,
    StartRequest,
    StartResponse,
    StreamInputRequest,
    StreamInputResponse,
    UpdateRequest,
    UpdateResponse,
)
from workspace_agent.errors import AgentError
from workspace_agent.events import KEEPALIVE, Feed, ended, is_end, started
from workspace_agent.http import number
from workspace_agent.launch import Launch, environment, spawn, working_directory
from workspace_agent.running import Command, Table, reap_orphans
from workspace_agent.state import Agent
from workspace_agent.users import basic_user

DEFAULT_KEEPALIVE = 90.0  # envd's, when the client names none
SIGNALS = {Signal.SIGKILL: signal.SIGKILL, Signal.SIGTERM: signal.SIGTERM}
CLOSE_WAIT = 5.0
"""On shutdown, how long killed commands get to be reaped."""


class ProcessService(Process):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.table = Table()
        self._reaper = (
            asyncio.get_running_loop().create_task(reap_orphans(self.table))
            if os.getpid() == 1
            else None
        )

    async def start(
        self, request: StartRequest, ctx: RequestContext[StartRequest, StartResponse]
    ) -> AsyncIterator[StartResponse]:
        deadline = _deadline(ctx)
        command = self._spawn(request, ctx, deadline)

        def expired() -> AgentError:
            command.expire()
            return AgentError(
                Code.DEADLINE_EXCEEDED, f"process {command.pid} ran past its timeout and was killed"
            )

        feed = command.attach()
        try:
            yield StartResponse(event=started(command.pid))
            async with aclosing(_follow(feed, ctx, deadline, expired)) as events:
                async for event in events:
                    yield StartResponse(event=event)
        finally:
            command.detach(feed)

    async def connect(
        self, request: ConnectRequest, ctx: RequestContext[ConnectRequest, ConnectResponse]
    ) -> AsyncIterator[ConnectResponse]:
        deadline = _deadline(ctx)
        found = self.table.find_any(_selector(request.process))

        def expired() -> AgentError:
            return AgentError(
                Code.DEADLINE_EXCEEDED,
                f"the connection to process {found.pid} reached its timeout; the process goes on",
            )

        yield ConnectResponse(event=started(found.pid))
        if not isinstance(found, Command):
            yield ConnectResponse(event=ended(found.end))
            return
        feed = found.attach()
        try:
            async with aclosing(_follow(feed, ctx, deadline, expired)) as events:
                async for event in events:
                    yield ConnectResponse(event=event)
        finally:
            found.detach(feed)

    async def list(
        self, request: ListRequest, ctx: RequestContext[ListRequest, ListResponse]
    ) -> ListResponse:
        del request, ctx
        return ListResponse(
            processes=[
                ProcessInfo(config=c.config, pid=c.pid, tag=c.tag)
                for c in self.table.running.values()
            ]
        )

    async def send_signal(
        self, request: SendSignalRequest, ctx: RequestContext[SendSignalRequest, SendSignalResponse]
    ) -> SendSignalResponse:
        del ctx
        command = self.table.find(_selector(request.process))
        number = SIGNALS.get(request.signal)
        if number is None:
            name = f"SIGNAL_{request.signal.name}" if request.signal.name else request.signal.value
            raise AgentError(
                Code.UNIMPLEMENTED,
                f"invalid signal: {name}; only SIGNAL_SIGKILL and SIGNAL_SIGTERM are supported",
            )
        command.signal(number)
        return SendSignalResponse()

    async def send_input(
        self, request: SendInputRequest, ctx: RequestContext[SendInputRequest, SendInputResponse]
    ) -> SendInputResponse:
        command = self.table.find(_selector(request.process))
        async with _within(ctx):
            await _write(command, request.input)
        return SendInputResponse()

    async def stream_input(
        self,
        request: AsyncIterator[StreamInputRequest],
        ctx: RequestContext[StreamInputRequest, StreamInputResponse],
    ) -> StreamInputResponse:
        command: Command | None = None
        async with _within(ctx):
            async for message in request:
                match message.event:
                    case Oneof(field="start", value=StreamInputRequest.StartEvent() as start):
                        command = self.table.find(_selector(start.process))
                    case Oneof(field="data", value=StreamInputRequest.DataEvent() as data):
                        if command is None:
                            raise AgentError(
                                Code.INVALID_ARGUMENT,
                                "the first StreamInput message must be start, naming the process",
                            )
                        await _write(command, data.input)
                    case Oneof(field="keepalive"):
                        pass
                    case _:
                        raise AgentError(Code.INVALID_ARGUMENT, "empty StreamInput message")
        return StreamInputResponse()

    async def close_stdin(
        self, request: CloseStdinRequest, ctx: RequestContext[CloseStdinRequest, CloseStdinResponse]
    ) -> CloseStdinResponse:
        command = self.table.find(_selector(request.process))
        async with _within(ctx):
            await command.close_stdin()
        return CloseStdinResponse()

    async def update(
        self, request: UpdateRequest, ctx: RequestContext[UpdateRequest, UpdateResponse]
    ) -> UpdateResponse:
        del ctx
        command = self.table.find(_selector(request.process))
        if request.pty is not None:
            size = request.pty.size or PTY.Size()
            command.resize(size.rows, size.cols)
        return UpdateResponse()

    async def close(self) -> None:
        """Kill what is still running when the agent stops."""
        if self._reaper is not None:
            self._reaper.cancel()
        commands = list(self.table.running.values())
        for command in commands:
            command.expire()
        if commands:
            await asyncio.wait([c.task for c in commands], timeout=CLOSE_WAIT)

    def _spawn(
        self,
        request: StartRequest,
        ctx: RequestContext[StartRequest, StartResponse],
        deadline: float | None,
    ) -> Command:
        user = self.agent.users.resolve(basic_user(ctx.request_headers.get("authorization")))
        config = request.process or ProcessConfig()
        terminal = None
        if request.pty is not None:
            size = request.pty.size or PTY.Size()
            terminal = (size.rows, size.cols)
        launch = Launch(
            argv=(config.cmd, *config.args),
            env=environment(
                user, self.agent.session.env, dict(config.envs), terminal=terminal is not None
            ),
            cwd=working_directory(
                self.agent.workdir, user.home, config.cwd if config.has_field("cwd") else None
            ),
            user=user,
            stdin=request.stdin if request.has_field("stdin") else True,
            terminal=terminal,
        )
        if deadline is not None and _now() >= deadline:
            raise AgentError(Code.DEADLINE_EXCEEDED, "the timeout expired before the start")
        child = spawn(launch, privileged=self.agent.users.privileged)
        return self.table.add(
            child, config, request.tag if request.has_field("tag") else None, deadline
        )


def _selector(selector: ProcessSelector | None) -> int | str:
    match selector.selector if selector is not None else None:
        case Oneof(field="pid", value=int() as pid):
            return pid
        case Oneof(field="tag", value=str() as tag):
            return tag
        case _:
            raise AgentError(Code.INVALID_ARGUMENT, "process: give a pid or a tag")


async def _write(command: Command, given: ProcessInput | None) -> None:
    match given.input if given is not None else None:
        case Oneof(field="stdin", value=bytes() as data):
            await command.write(data, terminal=False)
        case Oneof(field="pty", value=bytes() as data):
            await command.write(data, terminal=True)
        case _:
            raise AgentError(Code.INVALID_ARGUMENT, "input: give stdin or pty bytes")


async def _follow(
    feed: Feed,
    ctx: RequestContext[Any, Any],
    deadline: float | None,
    expired: Callable[[], AgentError],
) -> AsyncGenerator[ProcessEvent]:
    """A stream's events after `start`: the feed's, keepalives in silences, then the end."""
    keepalive = _keepalive(ctx)
    while True:
        if deadline is not None and _now() >= deadline:
            raise expired()
        wake = _now() + keepalive
        try:
            async with asyncio.timeout_at(wake if deadline is None else min(wake, deadline)):
                event = await feed.get()
        except TimeoutError:
            if deadline is None or _now() < deadline:
                yield KEEPALIVE
            continue
        yield event
        if is_end(event):
            return


def _now() -> float:
    return asyncio.get_running_loop().time()


def _deadline(ctx: RequestContext[Any, Any]) -> float | None:
    """`Connect-Timeout-Ms` as a loop time; 0, negative or absent mean none, as in envd."""
    given = number(ctx.request_headers.get("connect-timeout-ms"), digits=10)
    remaining = ctx.timeout_ms
    if remaining is None or not given:
        return None
    return _now() + remaining / 1000


@asynccontextmanager
async def _within(ctx: RequestContext[Any, Any]) -> AsyncGenerator[None]:
    """The request's deadline over input that may wait on a command that does not read it."""
    try:
        async with asyncio.timeout_at(_deadline(ctx)):
            yield
    except TimeoutError:
        raise AgentError(
            Code.DEADLINE_EXCEEDED, "the process did not take its input before the timeout"
        ) from None


def _keepalive(ctx: RequestContext[Any, Any]) -> float:
    seconds = number(ctx.request_headers.get("keepalive-ping-interval"), digits=9)
    return float(seconds) if seconds else DEFAULT_KEEPALIVE
