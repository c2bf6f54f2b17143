"""What a connection may cost the agent before its request: uvicorn's h11 protocol, bounded.

A VM's agent is root and shares the machine with the sandbox's users, who can open as many
connections to it as they like. uvicorn alone never times out a request head that is never
finished, caps nothing, and refuses a local peer (`--remote-only`) only once its head is parsed;
at some 20 KiB a connection, a user could grow the agent until the kernel's OOM killer picks it.
So, per connection:

- with `remote_only`, a peer at one of this machine's addresses is closed at accept time,
  before a byte is read (`/health` included: the probes come from KubeVirt's masquerade
  gateway, a remote address);
- past `max_connections` open at once, a new one is closed at accept time. The gateway opens
  one connection per request in flight to this sandbox (a command's stream, a watch, a
  transfer), and the SDK's own pool stops at 200 per address: 1,024 is far beyond any real
  use, and bounds the agent's connections to some 20 MiB;
- a request head must be complete within `head_seconds` of its first byte (of the connection,
  for the first request), else the connection is closed. An idle keep-alive connection is not
  reading a head: uvicorn's keep-alive timeout governs it, as before;
- a head is at most `max_head_bytes` (h11's bound on an incomplete event): uvicorn answers 400
  and closes.
"""

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import get_remote_addr

from workspace_agent.server import is_local

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    head_seconds: float = 10.0
    max_connections: int = 1024
    max_head_bytes: int = 16 << 10
    """h11's own default, said out loud: the SDK's heads are well under 1 KiB."""


class Bounded(H11Protocol):
    limits: ClassVar[Limits] = Limits()
    remote_only: ClassVar[bool] = False
    _refused = False
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # Neither adds the connection anywhere: connection_lost below then does nothing.
        if self.remote_only and is_local(get_remote_addr(transport)):
            self._refuse(transport, "a local peer (--remote-only)")
            return
        if len(self.connections) >= self.limits.max_connections:
            self._refuse(transport, f"already {self.limits.max_connections} connections open")
            return
        super().connection_made(transport)
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._stop_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # The first byte of a head after a keep-alive pause: the head's deadline starts.
        if self.conn.their_state is h11.IDLE and self._head_timer is None:
            self._start_head_timer()
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # a whole head was read
            self._stop_head_timer()
        elif self.conn.trailing_data[0] and self._head_timer is None:
            # Part of a pipelined head, waiting since before the response that just ended.
            self._start_head_timer()

    def _refuse(self, transport: asyncio.Transport, why: str) -> None:
        self._refused = True
        log.debug("closing a connection at accept: %s", why)
        transport.abort()

    def _start_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.limits.head_seconds, self._head_too_late)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_late(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            log.debug(
                "closing a connection whose request head took over %ss", self.limits.head_seconds
            )
            self.transport.abort()


def protocol(limits: Limits, *, remote_only: bool) -> type[Bounded]:
    """`Bounded` with these settings, for `uvicorn.Config(http=...)`."""
    return type("Bounded", (Bounded,), {"limits": limits, "remote_only": remote_only})


def config_options(limits: Limits, *, remote_only: bool) -> dict[str, Any]:
    """What `uvicorn.Config` takes to apply `limits`."""
    return {
        "http": protocol(limits, remote_only=remote_only),
        "h11_max_incomplete_event_size": limits.max_head_bytes,
    }
