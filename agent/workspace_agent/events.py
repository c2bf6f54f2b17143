"""The events of a Start or Connect stream, and the queue each stream reads them from."""

import asyncio
import os
import signal
from collections import deque
from typing import TYPE_CHECKING, Literal, cast

from protobuf import Oneof

from workspace_agent._proto.process.process_pb import ProcessEvent

FEED_CHUNKS = 16
"""How many chunks one stream may lag behind before the command waits for it."""

EndEvent = ProcessEvent.EndEvent
if TYPE_CHECKING:
    _OutputOneof = (
        Oneof[Literal["stdout"], bytes]
        | Oneof[Literal["stderr"], bytes]
        | Oneof[Literal["pty"], bytes]
    )


def end_event(status: int | None) -> EndEvent:
    """The end as envd reports it, from Go's `ProcessState`: `ExitCode()`, `String()`."""
    if status is None:
        text = "wait: no child processes"
        return EndEvent(exit_code=-1, exited=False, status=text, error=text)
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        text = f"exit status {code}"
        return EndEvent(exit_code=code, exited=True, status=text, error=text if code else None)
    number = os.WTERMSIG(status)
    name = signal.strsignal(number)
    text = f"signal: {name[0].lower() + name[1:]}" if name else f"signal: {number}"
    if os.WCOREDUMP(status):
        text += " (core dumped)"
    return EndEvent(exit_code=-1, exited=False, status=text, error=text)


# Oneof's field must be typed as its literal for the message constructors to accept it.
Output = Literal["stdout", "stderr", "pty"]
_START: Literal["start"] = "start"
_DATA: Literal["data"] = "data"
_END: Literal["end"] = "end"
_KEEPALIVE: Literal["keepalive"] = "keepalive"
KEEPALIVE = ProcessEvent(event=Oneof(_KEEPALIVE, ProcessEvent.KeepAlive()))


def started(pid: int) -> ProcessEvent:
    return ProcessEvent(event=Oneof(_START, ProcessEvent.StartEvent(pid=pid)))


def ended(end: EndEvent) -> ProcessEvent:
    return ProcessEvent(event=Oneof(_END, end))


def data_event(kind: Output, chunk: bytes) -> ProcessEvent:
    output = cast("_OutputOneof", Oneof(kind, chunk))
    return ProcessEvent(event=Oneof(_DATA, ProcessEvent.DataEvent(output=output)))


def is_end(event: ProcessEvent) -> bool:
    return event.event is not None and event.event.field == _END


class Feed:
    """One stream's view of a command: data in order, then the end."""

    def __init__(self) -> None:
        self._items: deque[ProcessEvent] = deque()
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self.closed = False

    async def put(self, event: ProcessEvent) -> None:
        while len(self._items) >= FEED_CHUNKS and not self.closed:
            self._writable.clear()
            await self._writable.wait()
        if not self.closed:
            self._items.append(event)
            self._readable.set()

    def put_end(self, event: ProcessEvent) -> None:
        """The end never waits: it must not hang on a client that stopped reading."""
        self._items.append(event)
        self._readable.set()

    async def get(self) -> ProcessEvent:
        while not self._items:
            self._readable.clear()
            await self._readable.wait()
        event = self._items.popleft()
        if len(self._items) < FEED_CHUNKS:
            self._writable.set()
        return event

    def close(self) -> None:
        self.closed = True
        self._items.clear()
        self._writable.set()
