"""`Idempotency-Key` on create: a retried create gets the sandbox the first one made.

The SDK sends the key it is given (`Sandbox.create(idempotency_key=...)`) on every retry of
one create. Within a namespace and for `WINDOW` after that sandbox started, the same key with
the same request answers with the same sandbox (once it is usable, as any create); the same key
with another request is a 409, never a second sandbox or someone else's settings. A killed
sandbox frees its key. Each backend keeps the key with the sandbox (`Keyed`); this module holds
what they share: the check of the header, the request's fingerprint, and one lock per key in
this replica, so that two retries that arrive together are answered one after the other.
Across replicas the key is found where the backend keeps it, which a retry (sent after the
first attempt failed or timed out, when its sandbox is stored) finds.
"""

import asyncio
import contextlib
import hashlib
import hmac
import json
import re
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta

from workspace_gateway.backend import NewSandbox
from workspace_gateway.errors import GatewayError

HEADER = "idempotency-key"
WINDOW = timedelta(hours=24)
"""How long after its sandbox started a key still names it."""
_FORM = re.compile(r"[a-z0-9-]{1,255}")


def key_of(header: str | None) -> str | None:
    """The header's key, checked as the SDK checks it; None without one."""
    if header is None:
        return None
    if not _FORM.fullmatch(header):
        raise GatewayError(
            400, "Idempotency-Key must be 1 to 255 lowercase ASCII letters, digits or hyphens"
        )
    return header


LATER_FIELDS: dict[str, object] = {"restore": None, "public_traffic": True}
"""Fields NewSandbox gained after fingerprints were first kept: left out while at their default,
so a retry across an upgrade still finds the sandbox its first try made."""


def fingerprint(seed: bytes, namespace: str, request: NewSandbox) -> str:
    """What the request asked for, keyed with `seed`: it includes env vars, which may be secret."""
    asked = asdict(replace(request, idempotency_key=None))
    for name, default in LATER_FIELDS.items():
        if asked.get(name) == default:
            del asked[name]
    text = json.dumps([namespace, asked], sort_keys=True, separators=(",", ":"))
    return hmac.new(seed, text.encode(), hashlib.sha256).hexdigest()


def label_of(seed: bytes, namespace: str, key: str) -> str:
    """The key as a label value (at most 63 characters), not readable back."""
    return hmac.new(seed, f"{namespace}\0{key}".encode(), hashlib.sha256).hexdigest()[:40]


@dataclass(frozen=True)
class Keyed:
    """What a sandbox made with a key keeps of it."""

    label: str
    fingerprint: str

    @classmethod
    def of(cls, seed: bytes, namespace: str, key: str, request: NewSandbox) -> "Keyed":
        """What a create with `key` asks to find."""
        return cls(label_of(seed, namespace, key), fingerprint(seed, namespace, request))


def replayed(keyed: Keyed, asked: Keyed, started_at: datetime, now: datetime) -> bool:
    """Whether a sandbox made with `keyed` is the answer to a create that asks with `asked`."""
    if keyed.label != asked.label or now - started_at > WINDOW:
        return False
    if keyed.fingerprint != asked.fingerprint:
        raise GatewayError(
            409,
            "this Idempotency-Key was sent with another request less than 24 h ago: a retry "
            "sends the same request, and a new request takes a new key",
        )
    return True


class Locks:
    """One lock per key while someone holds or waits for it; none are kept after."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, namespace: str, key: str) -> AsyncIterator[None]:
        where = (namespace, key)
        lock, users = self._held.get(where, (asyncio.Lock(), 0))
        self._held[where] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._held[where]
            if users == 1:
                del self._held[where]
            else:
                self._held[where] = (lock, users - 1)
