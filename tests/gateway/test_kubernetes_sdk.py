"""The unmodified SDK's cycle through the gateway's Kubernetes backend.

The gateway serves on a loopback port from a thread of its own, over the fake API server, with
the stand-in platform starting a real agent for each running sandbox.
"""

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from e2b import Sandbox
from kubernetes import client, config
from workspace_gateway import proxy
from workspace_gateway.app import build_app
from workspace_gateway.keys import StaticKeys
from workspace_gateway.kubernetes_backend import PLURAL, KubernetesBackend, Settings
from workspace_gateway.templates import Template

from tests.gateway import kube_fake
from tests.gateway.stand_in import BASE, KEY_A, KEY_B, SEED, Platform, free_port

Judge = Callable[[dict[str, Any]], str | None]


@contextlib.contextmanager
def serving(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    templates: dict[str, Template] | None = None,
    judge: Judge | None = None,
) -> Iterator[kube_fake.Cluster]:
    """The gateway on a loopback port, the SDK pointed at it; `judge` stands for the function."""
    port = free_port()
    servers: list[uvicorn.Server] = []

    async def serve(cluster: kube_fake.Cluster, kubeconfig: Path) -> None:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        platform = Platform(cluster, tmp_path)
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


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[kube_fake.Cluster]:
    with serving(tmp_path, monkeypatch) as cluster:
        yield cluster


def test_the_sdk_cycle_on_workspace_sandboxes(gateway: kube_fake.Cluster) -> None:
    sandbox = Sandbox.create(envs={"GREETING": "hello"}, metadata={"who": "sdk"})
    sandbox_id = sandbox.sandbox_id
    assert (PLURAL, "team-a", sandbox_id) in gateway.objects
    # The env vars are on the XR, for a resume, but sealed: not in clear text.
    assert "hello" not in str(gateway.objects[PLURAL, "team-a", sandbox_id])
    assert sandbox.commands.run("echo $GREETING").stdout == "hello\n"
    sandbox.files.write("kept.txt", "kept")
    assert [s.sandbox_id for s in Sandbox.list().next_items()] == [sandbox_id]
    assert Sandbox.list(api_key=KEY_B).next_items() == []

    assert sandbox.pause() is True
    assert sandbox.pause() is False
    assert gateway.objects[PLURAL, "team-a", sandbox_id]["spec"]["power"] == "Suspended"
    resumed = Sandbox.connect(sandbox_id)
    assert resumed.files.read("kept.txt") == "kept"
    assert resumed.commands.run("echo $GREETING").stdout == "hello\n"

    assert resumed.kill() is True
    assert (PLURAL, "team-a", sandbox_id) not in gateway.objects
