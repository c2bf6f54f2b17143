"""The stand-in platform and a gateway over the fake API server, shared by the gateway's tests:
in process (`world`), or on a loopback port for the SDK (`serving`).

A small controller stands in for the platform: it marks a Running WorkspaceSandbox Ready with
`status.endpoint` at a real local agent, and a Suspended one Suspended, so create and connect
wait, `/health` and `/init` happen for real, and the SDK's token then opens the agent.
"""

import asyncio
import contextlib
import gc
import getpass
import os
import pwd
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml
from kubernetes import client, config
from workspace_gateway import proxy
from workspace_gateway.app import build_app
from workspace_gateway.keys import StaticKeys, new_key
from workspace_gateway.kubernetes.backend import KubernetesBackend
from workspace_gateway.kubernetes.objects import PLURAL, Settings
from workspace_gateway.kubernetes.templates import Template

from tests.gateway import kube_fake
from tests.ports import free_port
from tests.schemas import validate_xrd_object

ROOT = Path(__file__).resolve().parents[2]
AGENT = Path(sys.executable).with_name("workspace-sandbox-agent")
KEY_A, KEY_B = new_key(), new_key()
SEED = b"a test seed"
BASE = Template(
    image="ubuntu-24.04",
    preset="standard",
    resources={"cpu": "1500m", "memory": "4Gi", "disk": "20Gi"},
)


@cache
def xrd() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "deploy/xrd.yaml").read_text())  # type: ignore[no-any-return]


USER = "nobody" if os.geteuid() == 0 else getpass.getuser()


class Platform:
    """The platform's part: an agent of its own for each Running sandbox.

    Each agent listens on its own loopback address at `port`, and the sandbox is marked Ready
    with that address as `status.endpoint`; a Suspended one loses its agent, so a resume boots
    a fresh one, as a VM's cold boot does. As root, each agent acts as `nobody` by default, as a
    VM's agent acts as its unprivileged user: commands then never run root's login profile,
    which on this project's CI machines runs `pyenv rehash` and can wait on its lock.
    """

    def __init__(self, cluster: kube_fake.Cluster, folder: Path) -> None:
        self.cluster = cluster
        self.folder = folder
        self.port = free_port()
        self.agents: dict[tuple[str, str], asyncio.subprocess.Process] = {}
        self.roots: dict[tuple[str, str], Path] = {}
        self.hosts = iter(range(2, 250))
        self.hosts_of: dict[tuple[str, str], str] = {}
        self.delay = 0.0
        self.judge: Callable[[dict[str, Any]], str | None] = lambda _: None
        """What the function says of a sandbox it refuses (its FATAL message); None: nothing."""
        """Seconds a sandbox waits, from when it is first seen, before it is marked Ready."""
        self.seen: dict[tuple[str, str], float] = {}
        self.volumes: dict[tuple[str, str], Path] = {}
        """The snapshots taken, by namespace and VolumeSnapshot name: copies of workspaces, as
        the function's VolumeSnapshots and a CSI driver would keep them."""

    async def run(self) -> None:
        while True:
            for key, obj in list(self.cluster.objects.items()):
                if key[0] == PLURAL:
                    await self.observe(key, obj)
            await asyncio.sleep(0.05)

    async def observe(self, key: kube_fake.Key, obj: dict[str, Any]) -> None:
        self._snapshots(key, obj)
        running = obj["spec"].get("power", "Running") == "Running"
        phase = (obj.get("status") or {}).get("phase")
        where = (key[1], key[2])
        first = self.seen.setdefault(where, asyncio.get_running_loop().time())
        if asyncio.get_running_loop().time() - first < self.delay:
            return
        refused = self.judge(obj)
        if refused is not None:
            # As Crossplane reports a FATAL result: Synced False, nothing composed, no phase.
            if not (obj.get("status") or {}).get("conditions"):
                synced = {
                    "type": "Synced",
                    "status": "False",
                    "reason": "ReconcileError",
                    "message": "cannot compose resources: pipeline step "
                    f'"workspace-sandbox" returned a fatal result: {refused}',
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
                self._status(key, {"conditions": [synced]})
            return
        if running and phase != "Running":
            # A status lost to a whole-object write must not leave the old agent running.
            await self.stop(where)
            host = f"127.0.0.{next(self.hosts)}"
            self.hosts_of[where] = host
            await self.start(where)
            ready = {
                "type": "Ready",
                "status": "True",
                "reason": "Available",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
            # `start` may move it: a pod's agent is at the pod's own address.
            status = {"phase": "Running", "endpoint": self.hosts_of[where], "conditions": [ready]}
            self._status(key, status)
        elif not running and phase != "Suspended":
            await self.stop(where)
            self._status(key, {"phase": "Suspended"})

    def _snapshots(self, key: kube_fake.Key, obj: dict[str, Any]) -> None:
        """Each `spec.snapshots` entry a copy of the workspace, reported ready in its status;
        one no longer named, deleted."""
        namespace, name = key[1], key[2]
        named = [s["name"] for s in obj["spec"].get("snapshots") or []]
        reported = {s["name"]: s for s in (obj.get("status") or {}).get("snapshots") or []}
        if set(named) == set(reported):
            return
        for gone in set(reported) - set(named):
            copy = self.volumes.pop((namespace, reported[gone]["volumeSnapshot"]), None)
            if copy is not None:
                shutil.rmtree(copy, ignore_errors=True)
        kept = []
        for snapshot in named:
            if snapshot not in reported:
                volume = f"{name}-{snapshot}-vs"
                copy = Path(tempfile.mkdtemp(prefix=f"{volume}-")) / "w"
                root = self.roots.get((namespace, name))
                if root is not None:
                    shutil.copytree(root, copy, symlinks=True)
                else:
                    copy.mkdir()
                self.volumes[namespace, volume] = copy
                reported[snapshot] = {
                    "name": snapshot,
                    "volumeSnapshot": volume,
                    "readyToUse": True,
                }
            kept.append(reported[snapshot])
        with contextlib.suppress(KeyError):
            self.cluster.update(key, lambda o: o.setdefault("status", {}).update(snapshots=kept))

    def _status(self, key: kube_fake.Key, status: dict[str, Any]) -> None:
        # Deleted while its agent started or stopped (a kill, a pool member removed): the
        # platform has nothing left to report on; its agent stops with the others in `close`.
        # What it reports of snapshots stays.
        def write(obj: dict[str, Any]) -> None:
            taken = (obj.get("status") or {}).get("snapshots")
            obj["status"] = {**status, **({"snapshots": taken} if taken else {})}

        with contextlib.suppress(KeyError):
            self.cluster.update(key, write)

    def _workspace(self, where: tuple[str, str]) -> Path:
        # Outside pytest's root-only temporary folders, so that `nobody` can reach it.
        root = Path(tempfile.mkdtemp(prefix=f"{where[0]}-{where[1]}-"))
        obj = self.cluster.objects.get((PLURAL, *where)) or {}
        restore = (obj.get("spec") or {}).get("restoreFrom", {}).get("snapshot")
        if restore is not None:
            shutil.copytree(
                self.volumes[where[0], restore], root, symlinks=True, dirs_exist_ok=True
            )
            if os.geteuid() == 0:
                for path in [root, *root.rglob("*")]:
                    os.lchown(path, pwd.getpwnam(USER).pw_uid, pwd.getpwnam(USER).pw_gid)
        if os.geteuid() == 0:
            os.chown(root, pwd.getpwnam(USER).pw_uid, pwd.getpwnam(USER).pw_gid)
        self.roots[where] = root
        return root

    async def start(self, where: tuple[str, str]) -> None:
        root = self.roots.get(where) or self._workspace(where)
        self.agents[where] = await asyncio.create_subprocess_exec(
            AGENT,
            *("--address", f"{self.hosts_of[where]}:{self.port}", "--root", str(root)),
            *("--user", USER, "--log-level", "warning"),
        )

    async def restart(self, where: tuple[str, str]) -> None:
        """The agent alone restarts on its address (a crash, an OOM kill, a reboot inside the
        guest) while the platform still reports the sandbox Running and Ready."""
        await self.stop(where)
        await self.start(where)

    async def stop(self, where: tuple[str, str]) -> None:
        # Forgotten only once it has exited: a stop cancelled half-way is finished by `close`.
        process = self.agents.get(where)
        if process is not None:
            if process.returncode is None:
                process.terminate()
            await process.wait()
            del self.agents[where]

    async def close(self) -> None:
        for where in list(self.agents):
            await self.stop(where)
        for root in self.roots.values():
            shutil.rmtree(root, ignore_errors=True)
        for copy in self.volumes.values():
            shutil.rmtree(copy.parent, ignore_errors=True)


@dataclass
class World:
    cluster: kube_fake.Cluster
    backend: KubernetesBackend
    http: httpx.AsyncClient
    platform: Platform

    async def call(self, method: str, path: str, key: str, **kwargs: Any) -> httpx.Response:
        return await self.http.request(method, path, headers={"X-API-Key": key}, **kwargs)

    def xr(self, namespace: str, sandbox_id: str) -> dict[str, Any]:
        return self.cluster.objects[(PLURAL, namespace, sandbox_id)]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    with kube_fake.serve() as (cluster, url):
        api = config.new_client_from_config(config_file=str(kube_fake.kubeconfig(url, tmp_path)))
        platform = Platform(cluster, tmp_path)
        settings = Settings(
            templates={"base": BASE},
            seed=SEED,
            agent_port=platform.port,
            workdir=".",  # each agent's own root
            ready_seconds=15,
        )
        backend = KubernetesBackend(client.CustomObjectsApi(api), settings, httpx.AsyncClient())
        controller = asyncio.create_task(platform.run())
        async with httpx.AsyncClient(timeout=30) as upstream:
            keys = StaticKeys({KEY_A: "team-a", KEY_B: "team-b"})
            app = build_app(backend, upstream, keys=keys, domain="sbx.example.com")
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://api.sbx.example.com", timeout=30
            ) as http:
                yield World(cluster, backend, http, platform)
        controller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await controller
        await platform.close()
        # Every agent is gone now: a leaked one would warn here, in this test, not later.
        gc.collect()
        await backend.close()
        api.close()
        assert not [t for t in threading.enumerate() if t.name == "sandbox-watch"]
        for obj in cluster.written:
            if obj["kind"] == "WorkspaceSandbox":
                assert validate_xrd_object(xrd(), obj) == [], obj


async def eventually(check: Callable[[], bool], seconds: float = 10) -> None:
    """Wait for `check` to hold, failing the test after `seconds`."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        await asyncio.sleep(0.01)


Judge = Callable[[dict[str, Any]], str | None]


@contextlib.contextmanager
def serving(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    templates: dict[str, Template] | None = None,
    judge: Judge | None = None,
    platform_of: Callable[[kube_fake.Cluster, Path], Platform] = Platform,
) -> Iterator[kube_fake.Cluster]:
    """The gateway on a loopback port, the SDK pointed at it; `judge` stands for the function,
    and `platform_of` makes the platform, whose `start` and `stop` are what a sandbox runs on
    (local agents here; a booted VM or a pod under a real runtime in `tests/boot`)."""
    port = free_port()
    servers: list[uvicorn.Server] = []

    async def serve(cluster: kube_fake.Cluster, kubeconfig: Path) -> None:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        platform = platform_of(cluster, tmp_path)
        if judge is not None:
            platform.judge = judge
        settings = Settings(
            templates=templates or {"base": BASE},
            seed=SEED,
            agent_port=platform.port,
            workdir=".",
        )
        backend = KubernetesBackend(client.CustomObjectsApi(api), settings, httpx.AsyncClient())
        http = proxy.client()
        keys = StaticKeys({KEY_A: "team-a", KEY_B: "team-b"})
        app = build_app(backend, http, keys=keys, domain="e2b.localhost")
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
        )
        servers.append(server)
        controller = asyncio.create_task(platform.run())
        try:
            await server.serve()
        finally:
            controller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await controller
            await platform.close()
            await backend.close()
            await http.aclose()
            api.close()

    with kube_fake.serve() as (cluster, url):
        kubeconfig = kube_fake.kubeconfig(url, tmp_path)
        thread = threading.Thread(target=lambda: asyncio.run(serve(cluster, kubeconfig)))
        thread.start()
        deadline = time.monotonic() + 15
        while not (servers and servers[0].started):
            assert time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.05)
        for name in ("E2B_DOMAIN", "E2B_ACCESS_TOKEN", "E2B_DEBUG"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("E2B_API_KEY", KEY_A)
        monkeypatch.setenv("E2B_API_URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("E2B_SANDBOX_URL", f"http://127.0.0.1:{port}")
        try:
            yield cluster
        finally:
            servers[0].should_exit = True
            thread.join(timeout=30)
