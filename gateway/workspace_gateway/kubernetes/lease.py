"""Which replica reaps: leader election over one `coordination.k8s.io/v1` Lease.

Every replica sees the same sandboxes, so without a single reaper two replicas would delete
the same expired sandbox at once. The election follows client-go's `leaderelection`: read the
Lease, take it only when it is free or its holder let it lapse, write at the resourceVersion
read (a 409 means another replica won), renew while leading, and stop leading the moment a
renewal is overdue, which is sooner than anyone else may take over.

Expiry is judged twice: by the holder's `renewTime` and by when this replica itself saw the
Lease last change, as client-go does, so a replica whose clock runs ahead cannot cut a live
holder's term short. The kubernetes client is synchronous: each call runs in a thread.
"""

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

NAME = "workspace-sandbox-gateway-reaper"
LEASE_SECONDS = 15
RENEW_DEADLINE = 10.0
"""A leader that has not renewed for this long stops, five seconds before others may take over."""
RENEW_EVERY = 5.0
RETRY_EVERY = 2.0
"""After a failed renewal: two more tries fit before the deadline."""
CALL_TIMEOUT = 3.0

log = logging.getLogger("workspace_gateway.lease")
Clock = Callable[[], datetime]


def now_utc() -> datetime:
    return datetime.now(UTC)


def identity() -> str:
    """This replica's name on the Lease: its pod, and a suffix in case a pod name comes back."""
    pod = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{pod}_{secrets.token_hex(4)}"


class MicroTime(datetime):
    """A moment that the client writes as client-go writes a `MicroTime`: six digits, then `Z`.

    The client checks a body against its models, turning times into datetimes it writes with
    `isoformat`, which drops the fraction when it is zero: a MicroTime the API server refuses.
    """

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:  # noqa: ARG002  # datetime's signature
        return self.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def micro_time(moment: datetime) -> MicroTime:
    utc = moment.astimezone(UTC)
    return MicroTime(*utc.timetuple()[:6], utc.microsecond, tzinfo=UTC)


@dataclass(frozen=True)
class Record:
    """The Lease as read: who holds it, until when, and at which resourceVersion."""

    version: str
    holder: str
    seconds: int
    acquired: datetime | None
    renewed: datetime | None
    transitions: int


def record_of(lease: Any) -> Record:
    spec = lease.spec
    return Record(
        version=lease.metadata.resource_version,
        holder=(spec and spec.holder_identity) or "",
        seconds=(spec and spec.lease_duration_seconds) or LEASE_SECONDS,
        acquired=spec and spec.acquire_time,
        renewed=spec and spec.renew_time,
        transitions=(spec and spec.lease_transitions) or 0,
    )


class Elector:
    """One replica's side of the election; `api` is the client's `CoordinationV1Api`."""

    def __init__(
        self, api: Any, namespace: str, holder: str | None = None, clock: Clock = now_utc
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.holder = holder or identity()
        self.clock = clock
        self.renewed: datetime | None = None
        """The renewTime of this replica's last successful write as holder."""
        self.seen: tuple[str, datetime] | None = None
        """The last resourceVersion read, and when this replica first saw it."""
        self.announced = False
        self.task: asyncio.Task[None] | None = None

    def leading(self) -> bool:
        """True only while the last renewal is younger than the deadline, even mid-call."""
        return self.renewed is not None and self.clock() < self.renewed + timedelta(
            seconds=RENEW_DEADLINE
        )

    def attempt(self) -> bool:
        """One round of acquire-or-renew, synchronously; whether this replica now leads."""
        now = self.clock()
        try:
            current = self.api.read_namespaced_lease(
                NAME, self.namespace, _request_timeout=CALL_TIMEOUT
            )
        except ApiException as e:
            if e.status != 404:  # noqa: PLR2004  # HTTP Not Found
                raise
            body = self._lease(now, None)
            return self._write(lambda: self._create(body), now)
        record = record_of(current)
        if self.seen is None or self.seen[0] != record.version:
            self.seen = (record.version, now)
        if record.holder not in ("", self.holder) and not self._lapsed(record, now):
            self.renewed = None  # another replica holds it: whatever this one thought is over
            return False
        body = self._lease(now, record)
        return self._write(lambda: self._replace(body), now)

    def release(self) -> None:
        """Give the Lease up at once, so a successor need not wait for it to lapse."""
        if not self.leading():
            return
        self.renewed = None
        current = record_of(
            self.api.read_namespaced_lease(NAME, self.namespace, _request_timeout=CALL_TIMEOUT)
        )
        if current.holder != self.holder:
            return
        now = self.clock()
        spec = {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": current.transitions,
        }
        self._replace(self._body(spec, current.version))

    async def run(self) -> None:
        """Acquire or renew for as long as the gateway serves; log each change of leadership."""
        while True:
            try:
                await asyncio.to_thread(self.attempt)
            except Exception as e:  # a failed round is retried; the deadline decides
                log.warning("the reaper's Lease could not be read or written: %s", e)
            self._announce()
            await asyncio.sleep(RENEW_EVERY if self.leading() else RETRY_EVERY)

    def start(self) -> None:
        self.task = asyncio.create_task(self.run())

    async def stop(self) -> None:
        """Stop campaigning and hand the Lease over; idempotent, quiet when the API is gone."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None
        try:
            await asyncio.to_thread(self.release)
        except Exception as e:  # then the successor waits for the Lease to lapse
            log.warning("the reaper's Lease could not be released: %s", e)
        self._announce()

    def _announce(self) -> None:
        leading = self.leading()
        if leading != self.announced:
            self.announced = leading
            if leading:
                log.info("this replica (%s) now reaps expired sandboxes", self.holder)
            else:
                log.info("this replica (%s) no longer reaps expired sandboxes", self.holder)

    def _lapsed(self, record: Record, now: datetime) -> bool:
        term = timedelta(seconds=record.seconds)
        by_holder = record.renewed is None or record.renewed + term <= now
        by_us = self.seen is None or self.seen[1] + term <= now
        return by_holder and by_us

    def _lease(self, now: datetime, before: Record | None) -> dict[str, Any]:
        """This replica as holder: a renewal keeps acquireTime, a takeover counts a transition."""
        acquired, transitions = now, 0
        if before is not None and before.holder == self.holder:
            acquired, transitions = before.acquired or now, before.transitions
        elif before is not None:
            transitions = before.transitions + 1
        spec = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": LEASE_SECONDS,
            "acquireTime": micro_time(acquired),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        }
        return self._body(spec, before.version if before else None)

    def _body(self, spec: dict[str, Any], version: str | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": NAME, "namespace": self.namespace}
        if version is not None:
            metadata["resourceVersion"] = version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    def _replace(self, body: dict[str, Any]) -> Any:
        return self.api.replace_namespaced_lease(
            NAME, self.namespace, body, _request_timeout=CALL_TIMEOUT
        )

    def _create(self, body: dict[str, Any]) -> Any:
        return self.api.create_namespaced_lease(self.namespace, body, _request_timeout=CALL_TIMEOUT)

    def _write(self, call: Callable[[], Any], now: datetime) -> bool:
        """Write this replica in as holder; the write's renewTime starts its term."""
        try:
            call()
        except ApiException as e:
            if e.status != 409:  # noqa: PLR2004  # HTTP Conflict
                raise
            return self.leading()  # another replica wrote first; a leader's term still runs out
        self.renewed = now
        return True
