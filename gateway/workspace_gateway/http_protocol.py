"""The listener's HTTP/1.1: uvicorn's httptools protocol, request heads bounded in size and time.

httptools keeps a head's URL and headers in memory until the head is complete and has no limit
on either, and uvicorn arms no timer before a connection's first response: reached directly (as
`--tls-cert` invites), sixteen connections sending endless headers held 643 MiB within seconds,
before any key was asked for. So a head may take MAX_HEAD_BYTES (answered 431 past it) and
HEAD_SECONDS: from the connection, for its first head, and from its first byte for the next
ones (answered 408), so that an idle keep-alive connection waits as uvicorn lets it, up to
`timeout_keep_alive`, holding no head at all. Bodies need no such bound here: uvicorn stops
reading a connection once 64 KiB of its body wait for the app.

The protocol also hands the app its connection's `Outbound` (FLOW_EXTENSION), which the proxy
waits on before it reads more of a download than a stalled client has taken.
"""

import asyncio
import json
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024
HEAD_SECONDS = 15.0
FLOW_EXTENSION = "workspace_gateway.flow"


class Outbound:
    """What the app may know of its connection's writes: what the client has not yet taken."""

    def __init__(self, transport: asyncio.Transport, flow: FlowControl) -> None:
        self.transport = transport
        self.flow = flow

    def buffered(self) -> int:
        return self.transport.get_write_buffer_size()

    async def drained(self) -> None:
        """Once the buffer is below its low-water mark; at once when it is not above its high."""
        await self.flow.drain()


class _HeadTooLargeError(Exception):
    pass


def bounded(head_seconds: float = HEAD_SECONDS) -> type["BoundedHeadProtocol"]:
    """The protocol class, with this head deadline, for `uvicorn.Config(http=...)`."""
    return type("BoundedHeadProtocol", (BoundedHeadProtocol,), {"head_seconds": head_seconds})


class BoundedHeadProtocol(HttpToolsProtocol):
    """uvicorn's protocol for `uvicorn.Config(http=...)`, with the bounds above."""

    max_head_bytes = MAX_HEAD_BYTES
    head_seconds = HEAD_SECONDS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvicorn's own narrowing
        super().connection_made(transport)
        self.in_head = True
        self.head_bytes = 0
        self.head_done_in_feed = False
        self.head_timer: asyncio.TimerHandle | None = None
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """uvicorn's, counting what arrives while a head is incomplete, and refusing past it."""
        self._unset_keepalive_if_required()
        if self.in_head:
            self._arm_head_timer()  # the next head's first byte: its clock starts
            self.head_bytes += len(data)
        self.head_done_in_feed = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as e:
            if isinstance(e.__context__, _HeadTooLargeError):
                self._refuse(431, f"the request head is larger than {self.max_head_bytes} bytes")
                return
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserError:
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        # A message that ended in this data: what followed it is uncounted (at most one read).
        if self.in_head and not self.head_done_in_feed and self.head_bytes > self.max_head_bytes:
            self._refuse(431, f"the request head is larger than {self.max_head_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # ASGI's extensions are the server's to add; uvicorn's types know only its own.
        outbound = Outbound(self.transport, self.flow)
        self.scope["extensions"] = {FLOW_EXTENSION: outbound}  # type: ignore[dict-item]

    def on_headers_complete(self) -> None:
        self.in_head = False
        self._disarm_head_timer()
        size = len(self.url) + sum(len(k) + len(v) + 4 for k, v in self.headers)
        if size > self.max_head_bytes:
            raise _HeadTooLargeError
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.in_head = True
        self.head_bytes = 0
        self.head_done_in_feed = True

    def _arm_head_timer(self) -> None:
        if self.head_timer is None:
            self.head_timer = self.loop.call_later(self.head_seconds, self._head_late)

    def _disarm_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_late(self) -> None:
        self.head_timer = None
        if self.in_head and not self.transport.is_closing():
            self._refuse(408, f"the request head did not arrive within {self.head_seconds:.0f} s")

    def _refuse(self, status: int, message: str) -> None:
        """An E2B-shaped answer and the connection closed; only the close mid-response."""
        self._disarm_head_timer()
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:
            body = json.dumps({"code": status, "message": message}).encode()
            head: list[Any] = [STATUS_LINE[status]]
            head += [
                b"content-type: application/json; charset=utf-8\r\n",
                b"content-length: %d\r\n" % len(body),
                b"connection: close\r\n\r\n",
            ]
            self.transport.write(b"".join(head) + body)
        self.transport.close()
