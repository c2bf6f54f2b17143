"""An in-memory Backend and the sandboxes in it, for tests of the gateway's edge."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from workspace_gateway.backend import NewSandbox, Sandbox, State
from workspace_gateway.errors import GatewayError, not_found

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY = "e2b_" + "0123abcd" * 5
OTHER_KEY = "e2b_" + "4567cdef" * 5
TOKEN = "a-sandbox-token"  # noqa: S105  # a test value


def sandbox(n: int, **changes: object) -> Sandbox:
    record = Sandbox(
        sandbox_id=f"sbx{n:017d}",
        template="base",
        metadata={"n": str(n)},
        state=State.RUNNING,
        started_at=T0 + timedelta(seconds=n),
        end_at=T0 + timedelta(seconds=n + 300),
        cpu_count=2,
        memory_mb=1024,
        disk_size_mb=2048,
        envd_version="0.6.4",
        access_token=TOKEN,
        auto_pause=False,
        endpoint="http://127.0.0.1:1",
    )
    return replace(record, **changes)  # type: ignore[arg-type]


ONE = "sbx00000000000000001"


class Sandboxes:
    """An in-memory Backend: one sandbox in namespace `a`, for the edge's error shapes."""

    def __init__(self) -> None:
        self.all = [sandbox(1, namespace="a")]
        self.is_ready = True
        self.reinits: list[str] = []

    def templates(self) -> frozenset[str]:
        return frozenset({"base"})

    def figures(self, template: str) -> tuple[int, int, int]:  # noqa: ARG002  # one template
        return 2, 1024, 2048

    async def ready(self) -> bool:
        return self.is_ready

    async def create(self, namespace: str, request: NewSandbox) -> Sandbox:
        return replace(self.all[0], template=request.template, namespace=namespace)

    async def get(self, namespace: str, sandbox_id: str) -> Sandbox:
        for one in self.all:
            if (one.namespace, one.sandbox_id) == (namespace, sandbox_id):
                return one
        raise not_found(sandbox_id)

    async def list(self, namespace: str) -> list[Sandbox]:
        return [s for s in self.all if s.namespace == namespace]

    async def suspend(self, namespace: str, sandbox_id: str) -> None:
        await self.get(namespace, sandbox_id)
        raise GatewayError(409, "already paused")

    async def resume(
        self, namespace: str, sandbox_id: str, end_at: datetime
    ) -> tuple[Sandbox, bool]:
        return replace(await self.get(namespace, sandbox_id), end_at=end_at), False

    async def delete(self, namespace: str, sandbox_id: str) -> None:
        await self.get(namespace, sandbox_id)

    async def set_end(self, namespace: str, sandbox_id: str, end_at: datetime) -> None:
        one = await self.get(namespace, sandbox_id)
        self.all[self.all.index(one)] = replace(one, end_at=end_at)

    def preview(self, sandbox: Sandbox, port: int) -> str | None:
        return sandbox.port_url(port)

    async def locate(self, sandbox_id: str) -> tuple[Sandbox, ...]:
        return tuple(s for s in self.all if s.sandbox_id == sandbox_id)

    async def reinit(self, sandbox: Sandbox) -> None:
        self.reinits.append(sandbox.sandbox_id)
