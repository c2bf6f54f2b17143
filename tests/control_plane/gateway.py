"""The gateway against the real API server, for `test_gateway.py`.

Each gateway is a process of `workspace-sandbox-gateway --kubernetes` (run by `main` below),
talking to the plane with a token of its own ServiceAccount from deploy/gateway/ (TokenRequest),
so that the shipped RBAC is what it is allowed. The templates are the shipped ConfigMap's.

Nothing here runs pods or VMs, and no function composes: a sandbox's agent is a local process
(the stand-in platform of `tests/gateway/stand_in.py`, reading and writing the real server
through `Objects`), and `report_status` plays the controllers that would say where it is.
"""

import argparse
import asyncio
import contextlib
import copy
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from workspace_gateway import main as cli
from workspace_gateway.kubernetes import main as kubernetes_main
from workspace_gateway.kubernetes.objects import GROUP, ID_LABEL, PLURAL, VERSION
from workspace_gateway.metrics import Metrics

from tests.control_plane.install import kubectl
from tests.control_plane.server import REPO, ControlPlane
from tests.gateway import stand_in
from tests.gateway.kube_fake import Key
from tests.ports import free_port

GATEWAY_NAMESPACE, ACCOUNT = "cozy-sandbox-gateway", "sandbox-gateway"
GATEWAY = Path(sys.executable).with_name("workspace-sandbox-gateway")
STARTED_SECONDS = 60.0
"""From the process's start to `/health` answering 200 (its watch has listed)."""
STOP_SECONDS = 30.0
TOKEN_SECONDS = 3600


def token(plane: ControlPlane, namespace: str, account: str, audience: str = "") -> str:
    """A token of the ServiceAccount from the server's TokenRequest API, as a pod's projected
    token is."""
    spec: dict[str, Any] = {"expirationSeconds": TOKEN_SECONDS}
    if audience:
        spec["audiences"] = [audience]
    core = k8s.CoreV1Api(plane.client())
    made = core.create_namespaced_service_account_token(account, namespace, {"spec": spec})
    return str(made.status.token)


def account_kubeconfig(plane: ControlPlane) -> Path:
    """A kubeconfig for the gateway's own ServiceAccount: what its pod's token gives it."""
    return plane.account_kubeconfig(GATEWAY_NAMESPACE, ACCOUNT, TOKEN_SECONDS)


def namespace(plane: ControlPlane, name: str) -> str:
    k8s.CoreV1Api(plane.client()).create_namespace({"metadata": {"name": name}})
    return name


def api_key(plane: ControlPlane, tenant: str) -> str:
    """A key for `tenant`, made as an operator makes one: the CLI with their credentials."""
    made = subprocess.run(
        [
            *(str(GATEWAY), "keys", "--kubeconfig", str(plane.kubeconfig)),
            *("--gateway-namespace", GATEWAY_NAMESPACE, "create", "--namespace", tenant),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    return next(line.split()[-1] for line in made.stdout.splitlines() if "API key" in line)


def templates(folder: Path, pool: dict[str, Any] | None = None) -> Path:
    """The shipped templates (deploy/gateway/templates.yaml), `base` with `pool` if given."""
    shipped = yaml.safe_load((REPO / "deploy" / "gateway" / "templates.yaml").read_text())
    mapping = yaml.safe_load(shipped["data"]["templates.yaml"])
    if pool is not None:
        mapping["templates"]["base"]["pool"] = pool
    path = folder / ("templates-pooled.yaml" if pool else "templates.yaml")
    path.write_text(yaml.safe_dump(mapping))
    return path


# --- The platform: local agents, and the status the absent controllers would write.


def report_status(
    custom: k8s.CustomObjectsApi, namespace: str, name: str, status: dict[str, Any]
) -> None:
    """Plays what this plane has not: the function composing the sandbox's workload, its
    controller (KubeVirt, agent-sandbox) running it, and Crossplane copying what they report
    into the XR's status: its phase, its endpoint (where the stand-in agent listens) and Ready.
    The status subresource is replaced whole, at the version read, as a controller writes it.
    Nothing else in these tests writes what the platform would.
    """
    for _ in range(10):
        current = custom.get_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name
        )
        current["status"] = status
        try:
            custom.replace_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, name, current
            )
        except ApiException as e:
            if e.status == 409:  # Crossplane wrote meanwhile: read again
                continue
            raise
        return
    raise AssertionError(f"{namespace}/{name}: the status kept changing")


class Objects:
    """The real server's WorkspaceSandboxes in `namespaces`, as the stand-in platform reads them
    (`objects`, refreshed by `refresh`) and writes their status (`update`), in the shape of
    `kube_fake.Cluster`'s."""

    def __init__(self, api: k8s.ApiClient, namespaces: set[str]) -> None:
        self.custom = k8s.CustomObjectsApi(api)
        self.namespaces = namespaces
        self.objects: dict[Key, dict[str, Any]] = {}

    def refresh(self) -> None:
        listed = self.custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, label_selector=ID_LABEL
        )
        self.objects = {
            (PLURAL, o["metadata"]["namespace"], o["metadata"]["name"]): o
            for o in listed["items"]
            if o["metadata"]["namespace"] in self.namespaces
        }

    def update(self, key: Key, change: Any) -> None:
        obj = copy.deepcopy(self.objects[key])
        change(obj)
        try:
            report_status(self.custom, key[1], key[2], obj.get("status") or {})
        except ApiException as e:
            if e.status == 404:
                raise KeyError(key) from None  # deleted meanwhile, as the stand-in expects
            raise


class Platform(stand_in.Platform):
    """The stand-in platform over the real server: polled, as it has no watch of its own."""

    async def run(self) -> None:
        while True:
            await asyncio.to_thread(self.cluster.refresh)
            for key, obj in list(self.cluster.objects.items()):
                await self.observe(key, obj)
            await asyncio.sleep(0.1)


@contextlib.contextmanager
def platform(plane: ControlPlane, folder: Path, namespaces: set[str]) -> Iterator[Platform]:
    """The stand-in platform on a thread and event loop of its own, for the block's length."""
    api = plane.client()
    made: list[Platform] = []
    stop = threading.Event()

    async def serve() -> None:
        running = Platform(Objects(api, namespaces), folder)  # type: ignore[arg-type]
        made.append(running)
        task = asyncio.create_task(running.run())
        await asyncio.to_thread(stop.wait)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await running.close()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), name="platform")
    thread.start()
    deadline = time.monotonic() + 10
    while not made:
        assert time.monotonic() < deadline, "the platform did not start"
        time.sleep(0.05)
    try:
        yield made[0]
    finally:
        stop.set()
        thread.join(STOP_SECONDS)
        api.close()


# --- Gateway processes.


@dataclass
class Gateway:
    url: str
    process: "subprocess.Popen[bytes]"
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_SECONDS)


def start_gateway(  # the command line's parts
    folder: Path,
    kubeconfig: Path,
    mapping: Path,
    agent_port: int,
    *extra: str,
    name: str = "gateway",
) -> Gateway:
    """A gateway process on a loopback port, once its `/health` answers 200."""
    seed = folder / "seed"
    if not seed.exists():
        seed.write_bytes(os.urandom(48).hex().encode())
    log = folder / f"{name}.log"
    for _ in range(3):  # a port taken between choosing and binding it: another one
        port = free_port()
        argv = [
            *(sys.executable, "-m", "tests.control_plane.gateway", "--kubernetes"),
            *("--address", f"127.0.0.1:{port}", "--templates", str(mapping)),
            *("--token-seed-file", str(seed), "--agent-port", str(agent_port)),
            *("--gateway-namespace", GATEWAY_NAMESPACE, "--kubeconfig", str(kubeconfig), *extra),
        ]
        with log.open("ab") as out:
            process = subprocess.Popen(
                argv,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "POD_NAME": name},
            )
        gateway = Gateway(f"http://127.0.0.1:{port}", process, log)
        if _ready(gateway):
            return gateway
        gateway.stop()
        if "address already in use" not in gateway.output():
            break
    raise AssertionError(f"the gateway did not start:\n{gateway.output()[-4000:]}")


def _ready(gateway: Gateway) -> bool:
    deadline = time.monotonic() + STARTED_SECONDS
    while time.monotonic() < deadline:
        if gateway.process.poll() is not None:
            return False
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(gateway.url + "/health", timeout=2).status_code == 200:
                return True
        time.sleep(0.2)
    return False


def crd_storage_reset(plane: ControlPlane) -> None:
    """Change the WorkspaceSandbox CRD's spec (a printer column), as an upgrade of the XRD
    does: the API server makes that resource's storage and watch cache anew, and ends every
    watch of it. Crossplane, whose CRD it is, puts its own spec back: a second reset."""
    column = {"name": "Reset", "type": "string", "jsonPath": ".metadata.name"}
    patch = [{"op": "add", "path": "/spec/versions/0/additionalPrinterColumns/-", "value": column}]
    kubectl(
        plane, "patch", "crd", f"{PLURAL}.{GROUP}", "--type=json", f"--patch={json.dumps(patch)}"
    )


def main(argv: list[str]) -> None:
    """`workspace-sandbox-gateway --kubernetes`, run as its `main` runs it, but for one setting:
    each sandbox's working directory is its agent's root (the stand-in agents are local
    processes, each in a folder of its own), not `/workspace` as in a pod or a VM."""
    args: argparse.Namespace = cli.parser().parse_args(argv)
    cli.setup_logging(args.log_level)
    metrics = Metrics()
    backend, keys, elector = kubernetes_main.open_cluster(args, metrics)
    backend.settings = dataclasses.replace(backend.settings, workdir=".")
    asyncio.run(cli.serve(backend, args, keys, elector, metrics=metrics))


if __name__ == "__main__":
    main(sys.argv[1:])
