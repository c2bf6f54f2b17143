"""`--local`: each sandbox is a `workspace-sandbox-agent` process on this machine.

No isolation at all: every agent runs as this user over a temporary folder of its own. For
development and tests. Pause stops the agent and keeps its folder; connect starts it again and
re-runs `/init`, as after a VM's cold boot.

Warm pools (`--pool-size`) stand in for a cluster's: a *running* member is an agent started and
healthy but never `/init`ed; a *suspended* member had its folder made and its agent started
once, then stopped (first boot, then suspend). A member has never run anyone's command and
carries no token or env vars until a create takes it.
"""

import asyncio
import logging
import os
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path

import httpx

from workspace_gateway import agent_client, audit
from workspace_gateway.backend import (
    INTERPRETER_PORT,
    INTERPRETER_TEMPLATE,
    NewSandbox,
    Sandbox,
    Snapshot,
    State,
    always,
)
from workspace_gateway.errors import GatewayError, not_found
from workspace_gateway.idempotency import Keyed, replayed
from workspace_gateway.metrics import Metrics
from workspace_gateway.sandbox_ids import new_id

TEMPLATES = frozenset({"base", INTERPRETER_TEMPLATE})
"""`base`, and E2B's code interpreter: `base` with the agent's interpreter (its extra)."""
START_SECONDS = 15.0
MAX_SNAPSHOTS = 32  # spec.snapshots' maxItems
STOP_SECONDS = 5.0

log = logging.getLogger("workspace_gateway")


def hold_port() -> socket.socket:
    """A loopback port held until its agent binds it: bound with `SO_REUSEADDR`, never listening.

    The kernel then gives it to no other `bind(:0)` nor outgoing connection, and a
    plain bind of it fails, while the agent (uvicorn sets `SO_REUSEADDR`) binds and listens on
    it as if it were free: no one can take it between choosing and binding.
    """
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind(("127.0.0.1", 0))
    return held


def machine_figures() -> tuple[int, int, int]:
    """cpuCount, memoryMB and diskSizeMB: the machine's, as every local sandbox shares it."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    disk = shutil.disk_usage(tempfile.gettempdir()).total // (1 << 20)
    return os.cpu_count() or 1, memory, disk


class Temperature(StrEnum):
    RUNNING = "running"
    SUSPENDED = "suspended"


@dataclass(frozen=True)
class Pool:
    """How many members one namespace's template keeps ready, and how warm."""

    size: int
    temperature: Temperature = Temperature.RUNNING


PoolKey = tuple[str, str]
"""Namespace and template."""


@dataclass
class _Entry:
    sandbox: Sandbox
    workspace: Path
    env_vars: dict[str, str]
    process: asyncio.subprocess.Process | None
    lock: asyncio.Lock
    keyed: Keyed | None = None
    """The `Idempotency-Key` it was made with (`idempotency.py`)."""
    interpreter: int | None = None
    """The loopback port its code interpreter serves E2B's 49999 on, while its agent runs."""
    snapshots: dict[str, Path] = field(default_factory=dict)
    """Its snapshots by name: copies of its workspace, which go with it, as a cluster's
    VolumeSnapshots go with their WorkspaceSandbox."""


class LocalBackend:
    """Sandboxes as local agent processes; all of them go when `close` is called."""

    REAP_EVERY = 1.0
    REFILL_EVERY = 0.25
    """Seconds between two top-ups: a taken member is replaced about that soon after."""

    def __init__(
        self,
        agent: Path,
        user: str,
        metrics: Metrics | None = None,
        pools: Mapping[PoolKey, Pool] | None = None,
    ) -> None:
        self.agent = agent
        self.user = user
        self.metrics = metrics
        self.pools = dict(pools or {})
        for (_, template), pool in self.pools.items():
            if template not in TEMPLATES or pool.size < 0:
                raise GatewayError(500, f"no pool of {pool.size} for template {template!r}")
        # Members ready to hand out, oldest first; never in `entries`, so neither listed nor
        # reachable through the proxy until taken. `making` counts those being made.
        self.members: dict[PoolKey, list[_Entry]] = {key: [] for key in self.pools}
        self.making: dict[PoolKey, int] = dict.fromkeys(self.pools, 0)
        self.closed = False
        self.figures_of_machine = machine_figures()
        self.entries: dict[str, _Entry] = {}
        # Every agent process, and its ports (its own, its interpreter's), until it has been
        # waited for, whatever cancelled its stop; and every port handed out until then, held
        # (`hold_port`), so none is handed out twice nor taken by anyone else.
        self.processes: dict[asyncio.subprocess.Process, tuple[int, ...]] = {}
        self.held: dict[int, socket.socket] = {}
        # The gateway's own ports on this host, which a preview must never reach (a request
        # there would come back to the gateway, or read its metrics): `main` sets them.
        self.reserved: set[int] = set()
        self.http = httpx.AsyncClient(timeout=10.0, trust_env=False)
        self.seed = secrets.token_bytes(32)
        """Keys the idempotency fingerprints of this process's sandboxes."""

    def templates(self) -> frozenset[str]:
        return TEMPLATES

    def figures(self, template: str) -> tuple[int, int, int]:  # noqa: ARG002  # all alike here
        return self.figures_of_machine

    async def ready(self) -> bool:
        return True

    async def create(self, namespace: str, request: NewSandbox) -> Sandbox:
        """From the pool when it has a healthy member, else cold.

        Where a pool is kept, hit or miss goes to the audit line and the metrics.
        """
        if request.network is not None:
            # Local sandboxes are processes on this machine: nothing here limits their egress.
            raise GatewayError(
                400, "egress restrictions (network, allow_internet_access) need --kubernetes"
            )
        asked = self._keyed(namespace, request)
        if asked is not None and (earlier := self._made_with(namespace, asked)) is not None:
            return earlier
        arrived = time.monotonic()
        key = (namespace, request.template)
        sandbox = None
        # Taking a member is synchronous (no await between looking and popping), so two
        # creates at once never take the same one.
        # A restore starts from its snapshot's files, never from a member's fresh folder.
        while request.restore is None and sandbox is None and (member := self._take(key)):
            try:
                sandbox = await self._hand_out(member, namespace, request)
            except GatewayError as e:
                log.warning("pool member %s dropped: %s", member.sandbox.sandbox_id, e.message)
        hit = sandbox is not None
        if sandbox is None:
            sandbox = await self._cold(namespace, request)
        if key in self.pools:  # hit or miss means something only where a pool is kept
            audit.note_pool(hit=hit)
            if self.metrics is not None:
                seconds = time.monotonic() - arrived
                self.metrics.served(namespace, request.template, hit=hit, seconds=seconds)
        if asked is not None and (made := self.entries.get(sandbox.sandbox_id)) is not None:
            made.keyed = asked
        return sandbox

    def _keyed(self, namespace: str, request: NewSandbox) -> Keyed | None:
        if request.idempotency_key is None:
            return None
        return Keyed.of(self.seed, namespace, request.idempotency_key, request)

    def _made_with(self, namespace: str, asked: Keyed) -> Sandbox | None:
        """The sandbox a create with the same key made, if it is still here."""
        now = datetime.now(UTC)
        for entry in self.entries.values():
            sandbox = entry.sandbox
            if sandbox.namespace != namespace or entry.keyed is None:
                continue
            if replayed(entry.keyed, asked, sandbox.started_at, now):
                return sandbox
        return None

    async def _cold(self, namespace: str, request: NewSandbox) -> Sandbox:
        entry = self._new_entry(namespace, request.template)
        entry.sandbox = self._assigned(entry.sandbox, namespace, request)
        entry.env_vars = dict(request.env_vars)
        try:
            if request.restore is not None:
                copy = self._snapshot_of(namespace, request.restore)
                await asyncio.to_thread(
                    shutil.copytree, copy, entry.workspace, symlinks=True, dirs_exist_ok=True
                )
            await self._start(entry)
        except BaseException:
            await self._remove(entry)
            raise
        # Listed only once usable; a shutdown meanwhile cancels this request, which removes it.
        self.entries[entry.sandbox.sandbox_id] = entry
        return entry.sandbox

    def _new_entry(self, namespace: str, template: str) -> _Entry:
        sandbox_id = new_id()
        workspace = Path(tempfile.mkdtemp(prefix=f"sandbox-{sandbox_id}-"))
        now = datetime.now(UTC)
        cpu, memory, disk = self.figures_of_machine
        sandbox = Sandbox(
            sandbox_id=sandbox_id,
            template=template,
            metadata={},
            state=State.PAUSED,
            started_at=now,
            end_at=now,
            cpu_count=cpu,
            memory_mb=memory,
            disk_size_mb=disk,
            envd_version="",
            access_token="",
            auto_pause=False,
            endpoint=None,
            namespace=namespace,
        )
        return _Entry(sandbox, workspace, {}, None, asyncio.Lock())

    @staticmethod
    def _assigned(sandbox: Sandbox, namespace: str, request: NewSandbox) -> Sandbox:
        """What a create gives a sandbox, member or not: its caller's, and a fresh token."""
        now = datetime.now(UTC)
        return replace(
            sandbox,
            namespace=namespace,
            template=request.template,
            metadata=dict(request.metadata),
            started_at=now,
            end_at=now + timedelta(seconds=request.timeout),
            access_token=secrets.token_hex(32),
            auto_pause=request.auto_pause,
            public_traffic=request.public_traffic,
        )

    def _take(self, key: PoolKey) -> _Entry | None:
        members = self.members.get(key)
        if not members:
            return None
        member = members.pop(0)
        self._count(key)
        return member

    async def _hand_out(self, member: _Entry, namespace: str, request: NewSandbox) -> Sandbox:
        """The caller's settings and token on a member, checked healthy; else it is removed."""
        try:
            member.sandbox = self._assigned(member.sandbox, namespace, request)
            member.env_vars = dict(request.env_vars)
            if member.process is None:  # suspended: resume, which runs /init
                await self._start(member)
            else:
                await self._check_health(member)
                await self._init(member)
        except BaseException:
            await self._remove(member)
            raise
        self.entries[member.sandbox.sandbox_id] = member
        return member.sandbox

    async def _check_health(self, member: _Entry) -> None:
        process, endpoint = member.process, member.sandbox.endpoint
        if process is None or process.returncode is not None or endpoint is None:
            raise GatewayError(503, "its agent is not running")
        if await agent_client.health(self.http, endpoint, 1.0) is None:
            raise GatewayError(503, "it failed its health check")

    async def refill(self, leading: Callable[[], bool] = always) -> None:
        """Make members until every pool holds its size; those that fail are logged, not kept."""
        keys = []
        for key, pool in self.pools.items():
            for _ in range(pool.size - len(self.members[key]) - self.making[key]):
                if self.closed or not leading():
                    break
                self.making[key] += 1
                keys.append(key)
        # Counted down here, not in each job: a job cancelled before it ran has no `finally`.
        try:
            jobs = [self._top_up(key, self.pools[key]) for key in keys]
            for failed in await asyncio.gather(*jobs, return_exceptions=True):
                if isinstance(failed, BaseException):
                    log.warning("making a pool member failed: %s", failed)
        finally:
            for key in keys:
                self.making[key] -= 1

    async def _top_up(self, key: PoolKey, pool: Pool) -> None:
        began = time.monotonic()
        member = self._new_entry(*key)
        try:
            await self._launch(member)
            if pool.temperature is Temperature.SUSPENDED:
                await self._stop(member)
        except BaseException:
            await self._remove(member)
            raise
        if self.closed:
            await self._remove(member)
            return
        self.members[key].append(member)
        self._count(key)
        if self.metrics is not None:
            self.metrics.topped_up(*key, time.monotonic() - began)

    def _count(self, key: PoolKey) -> None:
        if self.metrics is not None:
            temperature = self.pools[key].temperature.value
            self.metrics.members(*key, temperature, len(self.members[key]))

    async def get(self, namespace: str, sandbox_id: str) -> Sandbox:
        return self._entry(namespace, sandbox_id).sandbox

    async def list(self, namespace: str) -> list[Sandbox]:
        return [e.sandbox for e in self.entries.values() if e.sandbox.namespace == namespace]

    async def snapshot(self, namespace: str, sandbox_id: str, name: str) -> Snapshot:
        """A copy of its workspace as it is now, running or paused."""
        entry = self._entry(namespace, sandbox_id)
        async with entry.lock:
            self._check(entry)
            if name in entry.snapshots:
                raise GatewayError(409, f"sandbox {sandbox_id!r} has a snapshot {name!r} already")
            if len(entry.snapshots) >= MAX_SNAPSHOTS:
                raise GatewayError(
                    409, f"sandbox {sandbox_id!r} has {MAX_SNAPSHOTS} snapshots: delete one first"
                )
            folder = Path(tempfile.mkdtemp(prefix=f"snapshot-{sandbox_id}-{name}-"))
            try:
                await asyncio.to_thread(
                    shutil.copytree, entry.workspace, folder / "w", symlinks=True
                )
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            entry.snapshots[name] = folder / "w"
        return Snapshot(sandbox_id, name)

    async def snapshots(self, namespace: str) -> tuple[Snapshot, ...]:
        return tuple(
            Snapshot(e.sandbox.sandbox_id, name)
            for e in self.entries.values()
            if e.sandbox.namespace == namespace
            for name in e.snapshots
        )

    async def delete_snapshot(self, namespace: str, snapshot: Snapshot) -> None:
        copy = self._snapshot_of(namespace, snapshot)
        self.entries[snapshot.sandbox_id].snapshots.pop(snapshot.name, None)
        shutil.rmtree(copy.parent, ignore_errors=True)

    def _snapshot_of(self, namespace: str, snapshot: Snapshot) -> Path:
        entry = self.entries.get(snapshot.sandbox_id)
        copy = entry.snapshots.get(snapshot.name) if entry else None
        if entry is None or entry.sandbox.namespace != namespace or copy is None:
            raise GatewayError(404, f"snapshot {snapshot.snapshot_id!r} not found")
        return copy

    def preview(self, sandbox: Sandbox, port: int) -> str | None:
        """Any port of this host's loopback but an agent's or the gateway's own.

        The local mode's sandboxes all listen there; the gateway warns of it at start. E2B's
        49999 is the sandbox's own interpreter, on the port its agent was given.
        """
        if port == INTERPRETER_PORT:
            entry = self.entries.get(sandbox.sandbox_id)
            if entry is None or entry.sandbox.endpoint is None or entry.interpreter is None:
                return None
            return f"http://127.0.0.1:{entry.interpreter}"
        if sandbox.endpoint is None or port in self.ports or port in self.reserved:
            return None
        return f"http://127.0.0.1:{port}"

    async def locate(self, sandbox_id: str) -> tuple[Sandbox, ...]:
        entry = self.entries.get(sandbox_id)
        return (entry.sandbox,) if entry else ()

    async def reinit(self, sandbox: Sandbox) -> None:
        entry = self._entry(sandbox.namespace, sandbox.sandbox_id)
        async with entry.lock:
            self._check(entry)
            await self._init(entry)

    async def suspend(self, namespace: str, sandbox_id: str) -> None:
        entry = self._entry(namespace, sandbox_id)
        async with entry.lock:
            if entry.sandbox.state is State.PAUSED:
                raise GatewayError(409, f"sandbox {sandbox_id!r} is already paused")
            await self._stop(entry)

    async def resume(
        self, namespace: str, sandbox_id: str, end_at: datetime
    ) -> tuple[Sandbox, bool]:
        entry = self._entry(namespace, sandbox_id)
        async with entry.lock:
            self._check(entry)
            # Connect only ever extends the end time.
            entry.sandbox = replace(entry.sandbox, end_at=max(end_at, entry.sandbox.end_at))
            resumed = entry.sandbox.state is State.PAUSED
            if resumed:
                try:
                    await self._start(entry)
                except BaseException:
                    await self._stop(entry)
                    raise
            elif not await self._initialized(entry):
                await self._init(entry)  # its agent restarted since: back to the caller's
            return entry.sandbox, resumed

    async def delete(self, namespace: str, sandbox_id: str) -> None:
        entry = self._entry(namespace, sandbox_id)
        async with entry.lock:
            self._check(entry)
            await self._remove(entry)

    async def set_end(self, namespace: str, sandbox_id: str, end_at: datetime) -> None:
        entry = self._entry(namespace, sandbox_id)
        async with entry.lock:
            self._check(entry)
            entry.sandbox = replace(entry.sandbox, end_at=end_at)

    async def reap(self, now: datetime, leading: Callable[[], bool] = always) -> None:
        """Kill running sandboxes past their end time, or pause those that asked for it."""
        for entry in list(self.entries.values()):
            if leading() and entry.sandbox.state is State.RUNNING and entry.sandbox.end_at <= now:
                async with entry.lock:
                    if self._live(entry) and entry.sandbox.end_at <= now:
                        if entry.sandbox.auto_pause:
                            await self._stop(entry)
                        else:
                            await self._remove(entry)

    async def close(self) -> None:
        self.closed = True
        for key, members in self.members.items():
            while members:
                await self._remove(members.pop())
            self._count(key)
        for entry in list(self.entries.values()):
            await self._remove(entry)
        for process in list(self.processes):
            await self._end(process)
        await self.http.aclose()

    def _entry(self, namespace: str, sandbox_id: str) -> _Entry:
        entry = self.entries.get(sandbox_id)
        # Another namespace's sandbox is answered exactly as one that does not exist.
        if entry is None or entry.sandbox.namespace != namespace:
            raise not_found(sandbox_id)
        return entry

    def _live(self, entry: _Entry) -> bool:
        return self.entries.get(entry.sandbox.sandbox_id) is entry

    def _check(self, entry: _Entry) -> None:
        """Still there once the lock is held: a kill may have gone first."""
        if not self._live(entry):
            raise not_found(entry.sandbox.sandbox_id)

    @property
    def ports(self) -> set[int]:
        """The ports handed out to agents not yet waited for."""
        return set(self.held)

    def _free_port(self) -> int:
        """A port held for an agent about to start, and not any running agent's.

        Two creates at once must never be given one port, or the second would initialise the
        first's agent (refused: it has a token by then).
        """
        while (port := (held := hold_port()).getsockname()[1]) in self.held:
            held.close()
        self.held[port] = held
        return int(port)

    def _release(self, ports: tuple[int, ...]) -> None:
        for port in ports:
            if (held := self.held.pop(port, None)) is not None:
                held.close()

    async def _start(self, entry: _Entry) -> None:
        await self._launch(entry)
        await self._init(entry)

    async def _launch(self, entry: _Entry) -> None:
        """Start its agent and wait until healthy: running, but not `/init`ed."""
        port = self._free_port()
        endpoint = f"http://127.0.0.1:{port}"
        interpreter = self._free_port() if entry.sandbox.template == INTERPRETER_TEMPLATE else None
        ports = (port,) if interpreter is None else (port, interpreter)
        try:
            entry.process = await asyncio.create_subprocess_exec(
                str(self.agent),
                "--address",
                f"127.0.0.1:{port}",
                "--root",
                str(entry.workspace),
                "--user",
                self.user,
                "--log-level",
                "warning",
                *(() if interpreter is None else ("--interpreter", f"127.0.0.1:{interpreter}")),
                stdin=asyncio.subprocess.DEVNULL,
            )
        except BaseException:
            self._release(ports)
            raise
        self.processes[entry.process] = ports
        entry.interpreter = interpreter
        process = entry.process
        health = await agent_client.wait_healthy(
            self.http, endpoint, START_SECONDS, lambda: process.returncode
        )
        entry.sandbox = replace(
            entry.sandbox, state=State.RUNNING, endpoint=endpoint, envd_version=health.version
        )

    async def _init(self, entry: _Entry) -> None:
        """Give a started agent its caller's env vars, token and folder."""
        endpoint = entry.sandbox.endpoint
        if endpoint is None:
            raise GatewayError(500, "the sandbox's agent is not running")
        settings = agent_client.Init(
            entry.sandbox.access_token,
            entry.env_vars,
            str(entry.workspace),
            code_interpreter=entry.interpreter is not None,
        )
        await agent_client.init(self.http, endpoint, settings, present_token=False)

    async def _initialized(self, entry: _Entry) -> bool:
        """Whether a running agent still holds its token: what its `/health` says."""
        endpoint = entry.sandbox.endpoint
        if endpoint is None:
            raise GatewayError(500, "the sandbox's agent is not running")
        return await agent_client.initialized(self.http, endpoint)

    async def _stop(self, entry: _Entry) -> None:
        process, entry.process, entry.interpreter = entry.process, None, None
        entry.sandbox = replace(entry.sandbox, state=State.PAUSED, endpoint=None)
        if process is not None:
            await self._end(process)

    async def _end(self, process: asyncio.subprocess.Process) -> None:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), STOP_SECONDS)
            except TimeoutError:
                process.kill()
                await process.wait()
        self._release(self.processes.pop(process, ()))

    async def _remove(self, entry: _Entry) -> None:
        self.entries.pop(entry.sandbox.sandbox_id, None)
        await self._stop(entry)
        shutil.rmtree(entry.workspace, ignore_errors=True)
        for copy in entry.snapshots.values():
            shutil.rmtree(copy.parent, ignore_errors=True)
        entry.snapshots.clear()
