"""The Backend protocol: what the control API and the proxy ask of wherever sandboxes live.

The control API never builds a URL to a sandbox nor touches a cluster: it asks a Backend, so
the local mode and a cluster differ in one module.
"""

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol


class State(StrEnum):
    """Exactly E2B's two states: the SDK rejects any other value."""

    RUNNING = "running"
    PAUSED = "paused"


@dataclass(frozen=True)
class NewSandbox:
    template: str
    timeout: int
    metadata: dict[str, str] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    auto_pause: bool = False


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


class Backend(Protocol):
    """Every method raises `GatewayError` (404 for an unknown sandbox, 409 for a conflict)."""

    def templates(self) -> frozenset[str]: ...

    async def create(self, request: NewSandbox) -> Sandbox: ...

    async def get(self, sandbox_id: str) -> Sandbox: ...

    async def list(self) -> list[Sandbox]: ...

    async def suspend(self, sandbox_id: str) -> None:
        """Pause; 409 when already paused."""

    async def resume(self, sandbox_id: str, end_at: datetime) -> tuple[Sandbox, bool]:
        """Run it (if paused) with at least this end time; True when it was resumed."""

    async def delete(self, sandbox_id: str) -> None: ...

    async def set_end(self, sandbox_id: str, end_at: datetime) -> None: ...
