"""The audit log: one JSON line per request, naming who did what to which sandbox.

Only what identifies a request is logged: the key's ID (never the key), the namespace, the
sandbox ID, the route's template (never the query, which may carry file paths or signatures),
the status, the bytes each way and the time taken. Tokens, metadata and bodies never are.
A create also says whether a warm pool answered it (`pool: hit`) or it was made cold (`miss`),
so a slow create is explained on its own line.
"""

import json
import logging
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime

from workspace_gateway.asgi import Message, Receive, Send

log = logging.getLogger("workspace_gateway.audit")
MAX_ROUTE = 200
MAX_SANDBOX_ID = 64  # the data plane's comes from a header, unchecked: a line stays a line's size


@dataclass
class Entry:
    """What one request did, filled in as it runs."""

    at: datetime = field(default_factory=lambda: datetime.now(UTC))
    key_id: str | None = None
    namespace: str | None = None
    sandbox_id: str | None = None
    route: str = ""
    status: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    started: float = field(default_factory=time.monotonic)
    pool: str | None = None
    """A create's `hit` or `miss`; None for every other request."""

    def line(self, now: float | None = None) -> str:
        duration = ((time.monotonic() if now is None else now) - self.started) * 1000
        pool = {} if self.pool is None else {"pool": self.pool}
        return json.dumps(
            {
                "time": self.at.isoformat().replace("+00:00", "Z"),
                "keyId": self.key_id,
                "namespace": self.namespace,
                "sandboxId": None if self.sandbox_id is None else self.sandbox_id[:MAX_SANDBOX_ID],
                "route": self.route[:MAX_ROUTE],
                "status": self.status,
                "bytesIn": self.bytes_in,
                "bytesOut": self.bytes_out,
                "durationMs": round(duration, 1),
                **pool,
            },
            separators=(",", ":"),
        )

    def counting(self, receive: Receive, send: Send) -> tuple[Receive, Send]:
        """`receive` and `send` that count body bytes and note the status as they pass."""

        async def counted_receive() -> Message:
            message = await receive()
            self.bytes_in += len(message.get("body", b""))
            return message

        async def counted_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.status = int(message["status"])
            self.bytes_out += len(message.get("body", b""))
            await send(message)

        return counted_receive, counted_send


# The request being served, per asyncio task: the backend learns hit or miss deep inside a
# create, and the Backend protocol's create returns only the sandbox. A ContextVar is per
# request, never shared between two.
CURRENT: ContextVar[Entry | None] = ContextVar("audit_entry", default=None)


def note_pool(*, hit: bool) -> None:
    """Record on the current request's line that a create was a pool hit or a miss."""
    entry = CURRENT.get()
    if entry is not None:
        entry.pool = "hit" if hit else "miss"


def write(entry: Entry) -> None:
    log.info("%s", entry.line())
