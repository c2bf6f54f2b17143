"""The Backend protocol: what the control API and the proxy ask of wherever sandboxes live.

The control API never builds a URL to a sandbox nor touches a cluster: it asks a Backend, so
the local mode and a cluster differ in one module.
"""

import asyncio
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

# What an agent answers, `false` on `/health` and on every refusal, while it holds no token.
INITIALIZED = "x-agent-initialized"
INTERPRETER_TEMPLATE = "code-interpreter-v1"
"""E2B's code interpreter template, the `e2b_code_interpreter` SDKs' default."""
INTERPRETER_PORT = 49999
"""Its API's port (`run_code`), which the agent's interpreter serves."""


class State(StrEnum):
    """Exactly E2B's two states: the SDK rejects any other value."""

    RUNNING = "running"
    PAUSED = "paused"


SNAPSHOT_ID = re.compile(r"snapshot-(?P<sandbox>[a-z0-9]{1,63})-(?P<name>[a-z0-9][-a-z0-9]{0,39})")
"""What `create_snapshot` answers and `Sandbox.create` takes as a template: the sandbox and the
name of one of its `spec.snapshots`."""


@dataclass(frozen=True)
class Snapshot:
    """One of a sandbox's named filesystem snapshots (its WorkspaceSandbox's `spec.snapshots`)."""

    sandbox_id: str
    name: str
    ready: bool = True
    """Whether it can be restored yet (its VolumeSnapshot's `readyToUse`)."""
    volume: str = ""
    """On a cluster, its VolumeSnapshot's name (`status.snapshots[].volumeSnapshot`), which a
    restore names in `spec.restoreFrom`."""

    @property
    def snapshot_id(self) -> str:
        return f"snapshot-{self.sandbox_id}-{self.name}"

    @classmethod
    def of(cls, snapshot_id: str) -> "Snapshot | None":
        """The snapshot an ID names, or None: not a snapshot's ID."""
        match = SNAPSHOT_ID.fullmatch(snapshot_id)
        return cls(match["sandbox"], match["name"]) if match else None


@dataclass(frozen=True)
class NewSandbox:
    template: str
    timeout: int
    metadata: dict[str, str] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    auto_pause: bool = False
    network: dict[str, Any] | None = None
    """The WorkspaceSandbox's `spec.network` the caller's egress settings stand for; None: the
    template's (the internet)."""
    idempotency_key: str | None = None
    """The create's `Idempotency-Key` (`idempotency.py`): a retry gets the same sandbox."""
    restore: Snapshot | None = None
    """The snapshot its workspace starts from (`Sandbox.create(snapshot_id)`); `template` is
    then its sandbox's."""
    public_traffic: bool = True
    """`network.allowPublicTraffic`: False, its previews take its traffic access token."""


@dataclass(frozen=True)
class Sandbox:
    sandbox_id: str
    template: str
    metadata: dict[str, str]
    state: State
    started_at: datetime
    end_at: datetime
    cpu_count: int
    memory_mb: int
    disk_size_mb: int
    envd_version: str
    access_token: str
    auto_pause: bool
    endpoint: str | None
    """The agent's base URL while running (`http://host:port`); None while paused."""
    namespace: str = ""
    """The tenant namespace it lives in."""
    ports: frozenset[int] = frozenset()
    """Its preview ports on a cluster: the TCP ports besides the agent's that the gateway
    reaches on it (the WorkspaceSandbox's `spec.ports`, which its template names)."""
    public_traffic: bool = True
    """Whether its previews are public; else they take its traffic access token."""
    network: dict[str, Any] | None = None
    """Its egress (the WorkspaceSandbox's `spec.network`) as it was created; None: the
    template's."""

    def port_url(self, port: int) -> str | None:
        """The base URL of one of its `ports` while it runs, or None: not one of them."""
        if self.endpoint is None or port not in self.ports:
            return None
        scheme, _, rest = self.endpoint.partition("://")
        return f"{scheme}://{rest.rsplit(':', 1)[0]}:{port}"


class Backend(Protocol):
    """Sandboxes by tenant namespace: every call but `locate` names the caller's namespace.

    A sandbox of another namespace is answered exactly as an unknown one. Every method raises
    `GatewayError` (404 for an unknown sandbox, 409 for a conflict).
    """

    def templates(self) -> frozenset[str]: ...

    def figures(self, template: str) -> tuple[int, int, int]:
        """cpuCount, memoryMB and diskSizeMB of one of its templates; 0 where a preset decides."""
        ...

    async def ready(self) -> bool:
        """Whether this replica can serve: what the unauthenticated `GET /health` says."""
        ...

    async def create(self, namespace: str, request: NewSandbox) -> Sandbox: ...

    async def get(self, namespace: str, sandbox_id: str) -> Sandbox: ...

    async def list(self, namespace: str) -> list[Sandbox]: ...

    async def suspend(self, namespace: str, sandbox_id: str) -> None:
        """Pause; 409 when already paused."""

    async def resume(
        self, namespace: str, sandbox_id: str, end_at: datetime
    ) -> tuple[Sandbox, bool]:
        """Run it (if paused) with at least this end time; True when it was resumed."""

    async def delete(self, namespace: str, sandbox_id: str) -> None: ...

    async def set_end(self, namespace: str, sandbox_id: str, end_at: datetime) -> None: ...

    async def snapshot(self, namespace: str, sandbox_id: str, name: str) -> Snapshot:
        """Take a filesystem snapshot of this name; 409 when it has one by that name."""
        ...

    async def snapshots(self, namespace: str) -> tuple[Snapshot, ...]:
        """Every snapshot of the namespace's sandboxes."""
        ...

    async def delete_snapshot(self, namespace: str, snapshot: Snapshot) -> None:
        """Delete it; 404 when there is none such."""

    def preview(self, sandbox: Sandbox, port: int) -> str | None:
        """The base URL of `sandbox`'s preview `port`, or None: not open to the gateway.

        Never the agent's port.
        """

    async def locate(self, sandbox_id: str) -> tuple[Sandbox, ...]:
        """Every sandbox of this ID the gateway made, in whichever namespace.

        The data plane carries no API key: the sandbox's access token is its authority, checked
        by the gateway (`choose`) and again by the agent. Two namespaces hold a sandbox of one
        ID only if a tenant made a look-alike by hand after seeing another's ID; the gateway's
        mark (`kubernetes.objects.mark`) keeps such objects out, and should one pass, only the
        sandbox whose token the caller's credential opens is chosen.
        """

    async def reinit(self, sandbox: Sandbox) -> None:
        """Give a running sandbox's agent its token and env vars again: it has restarted.

        An agent holds its token in memory only, so after a crash, a reboot inside the guest
        or a restart by the platform it refuses everything but `/health` and `/init` until
        this runs. Raises `GatewayError` when the agent can't be reached or refuses.
        """


def choose(candidates: Sequence[Sandbox], opens: Callable[[str], bool]) -> Sandbox | None:
    """The one candidate whose access token the request's credential opens, or None.

    Each sandbox has its own token (its namespace is part of it), so at most one matches.
    """
    opened = [s for s in candidates if opens(s.access_token)]
    return opened[0] if len(opened) == 1 else None


class Reaping(Protocol):
    REAP_EVERY: float
    """Seconds between two rounds."""

    async def reap(self, now: datetime, leading: Callable[[], bool]) -> None:
        """Kill, or with auto-pause pause, the sandboxes whose end time has come.

        `leading` is asked before each one: a replica that loses the lead mid-round stops there.
        """


def always() -> bool:
    return True


async def reap_forever(backend: Reaping, leading: Callable[[], bool] = always) -> None:
    """Reap for as long as the gateway serves, even when no client calls.

    With several replicas only the one `leading` says leads reaps, so no two delete at once;
    it is asked before every round and every sandbox, so a replica that has lost the lead stops
    at once.
    """
    while True:
        try:
            if leading():
                await backend.reap(datetime.now(UTC), leading)
        except Exception:  # one bad round must not end reaping for good
            logging.getLogger(__name__).exception("reaping expired sandboxes failed")
        await asyncio.sleep(backend.REAP_EVERY)


class Refilling(Protocol):
    REFILL_EVERY: float
    """Seconds between two top-ups."""

    async def refill(self, leading: Callable[[], bool]) -> None:
        """Make pool members until every pool holds its size.

        `leading` is asked before each member made: with several replicas only the leader
        tops up, so that pools are not filled once per replica.
        """


class ServedBackend(Backend, Reaping, Refilling, Protocol):
    """What the gateway serves from: a Backend that it also reaps, refills and closes."""

    async def close(self) -> None:
        """Stop every sandbox it started here, and whatever it holds open."""


async def refill_forever(backend: Refilling, leading: Callable[[], bool] = always) -> None:
    """Keep the warm pools full for as long as the gateway serves, as `reap_forever` reaps.

    A create takes a member and returns at once; the member is replaced here, in the
    background, so that no caller waits for a top-up.
    """
    while True:
        try:
            if leading():
                await backend.refill(leading)
        except Exception:  # one bad round must not end the top-ups for good
            logging.getLogger(__name__).exception("topping up the warm pools failed")
        await asyncio.sleep(backend.REFILL_EVERY)
