"""Start `workspace-sandbox serve`, drive it with realistic requests, and check every answer.

Answers are checked byte for byte against the same request run in-process: rendering is
deterministic, so any difference is a bug (or a leak of state between calls).
"""

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1

from function.fn import FunctionRunner
from tests.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
COMPOSITION = ROOT / "function" / "compositions" / "workspacesandbox.yaml"
RUN_FUNCTION = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"
RUN_FUNCTION_BETA = "/apiextensions.fn.proto.v1beta1.FunctionRunnerService/RunFunction"


def _platform_input() -> dict[str, Any]:
    step: dict[str, Any] = yaml.safe_load(COMPOSITION.read_text())["spec"]["pipeline"][0]["input"]
    return step


def _xr(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": name, "namespace": "tenant-acme", "uid": f"uid-{name}"},
        "spec": {"image": "ubuntu-24.04", **spec},
    }


def request(xr: dict[str, Any], observed: dict[str, dict[str, Any]] | None = None) -> bytes:
    req = fnv1.RunFunctionRequest(
        meta=fnv1.RequestMeta(tag=f"tag-{xr['metadata']['name']}"),
        input=resource.dict_to_struct(_platform_input()),
        observed=fnv1.State(composite=fnv1.Resource(resource=resource.dict_to_struct(xr))),
    )
    for key, obj in (observed or {}).items():
        req.observed.resources[key].resource.update(obj)
    return req.SerializeToString()


def _observed(xr: dict[str, Any], desired: fnv1.RunFunctionResponse) -> dict[str, dict[str, Any]]:
    """Every desired resource as the cluster reports it once everything is up.

    With the metadata Crossplane adds: the XR's controller reference, its label and the
    composition-resource name.
    """
    meta = xr["metadata"]
    owner = {
        "apiVersion": xr["apiVersion"],
        "kind": xr["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    out = {}
    for key, r in desired.desired.resources.items():
        obj = resource.struct_to_dict(r.resource)
        obj["metadata"] |= {
            "namespace": meta["namespace"],
            "uid": f"uid-{meta['name']}-{key}",
            "annotations": {
                **obj["metadata"].get("annotations", {}),
                "crossplane.io/composition-resource-name": key,
            },
            "labels": {
                **obj["metadata"].get("labels", {}),
                "crossplane.io/composite": meta["name"],
            },
            "ownerReferences": [owner],
        }
        kind = obj["kind"]
        if kind == "DataVolume":
            obj["status"] = {"phase": "Succeeded", "progress": "100.0%"}
        elif kind == "VirtualMachine":
            obj["status"] = {"printableStatus": "Running", "ready": True}
        elif kind == "VolumeSnapshot":
            obj["status"] = {"readyToUse": True, "restoreSize": "20Gi"}
        elif kind == "Sandbox":
            obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        out[key] = obj
    return out


@dataclass(frozen=True)
class Case:
    name: str
    request: bytes
    expected: bytes
    """The in-process answer, serialized deterministically."""
    fatal: bool


def _answer(raw: bytes) -> fnv1.RunFunctionResponse:
    req = fnv1.RunFunctionRequest()
    req.ParseFromString(raw)
    return asyncio.run(FunctionRunner().RunFunction(req, None))


def cases() -> list[Case]:
    """A new sandbox, a steady-state one, a large one, a pod sandbox and a bad one."""
    large_spec = {
        "snapshots": [{"name": f"snap-{i}"} for i in range(32)],
        "ports": [{"name": f"p{i}", "port": 3000 + i} for i in range(16)],
        "network": {
            "egress": "Allowlist",
            "allow": [{"cidr": f"151.{i}.0.0/16", "ports": [443, 80]} for i in range(1, 65)],
        },
    }
    specs = {
        "new": ("alice-api", {}),
        "steady": (
            "bob-frontend",
            {"ports": [{"name": "preview", "port": 3000}], "snapshots": [{"name": "nightly"}]},
        ),
        "large": ("carol-ml", large_spec),
        "kata": ("dave-docs", {"preset": "kata"}),
        "bad": ("mallory", {"resources": {"cpu": "64"}}),
    }
    out = []
    for case, (name, spec) in specs.items():
        xr = _xr(name, spec)
        raw = request(xr)
        if case in ("steady", "large", "kata"):
            # Render once, then ask again with everything observed: Crossplane's steady state.
            raw = request(xr, _observed(xr, _answer(raw)))
        rsp = _answer(raw)
        fatal = any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results)
        out.append(Case(case, raw, rsp.SerializeToString(deterministic=True), fatal))
    return out


@dataclass
class Server:
    address: str
    process: subprocess.Popen[bytes]
    started: float
    ready_after: float = 0.0
    exit_after: float | None = None
    log: list[str] = field(default_factory=list)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0


def _wait_ready(address: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Until the first RunFunction call is answered, not just until the port is open."""
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        stub = channel.unary_unary(RUN_FUNCTION)
        while True:
            try:
                stub(b"", timeout=0.5, wait_for_ready=True)
                return
            except grpc.RpcError as err:
                waiting = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
                if err.code() not in waiting:
                    return  # answered, if with an error: the server is up
                if process.poll() is not None or time.monotonic() > deadline:
                    msg = "the server did not start"
                    raise RuntimeError(msg) from None


@contextmanager
def server(*extra: str, timeout: float = 30.0, echo: Path | None = None) -> Iterator[Server]:
    """`workspace-sandbox serve`, or with `echo`, the floor function answering that file."""
    address = f"127.0.0.1:{free_port()}"
    exe = Path(sys.executable).parent / "workspace-sandbox"
    command = [str(exe), "serve", "--insecure", "--address", address, *extra]
    if echo is not None:
        command = [
            sys.executable,
            "-m",
            "bench.echo",
            "--address",
            address,
            "--response",
            str(echo),
        ]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=ROOT,
    )
    srv = Server(address, process, started)
    try:
        _wait_ready(address, process, timeout)
        srv.ready_after = time.monotonic() - started
        yield srv
    finally:
        stopping = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
            srv.exit_after = time.monotonic() - stopping
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Run:
    calls: int = 0
    wrong: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0


async def drive(
    address: str,
    mix: list[Case],
    calls: int,
    concurrency: int,
    *,
    beta: bool = True,
    on_progress: Callable[[int], None] | None = None,
) -> Run:
    """`calls` RunFunction calls over `concurrency` clients; with `beta`, every other is v1beta1."""
    run = Run()
    counter = iter(range(calls))

    async def client(channel: grpc.aio.Channel) -> None:
        v1 = grpcv1.FunctionRunnerServiceStub(channel)
        v1beta1 = grpcv1beta1.FunctionRunnerServiceStub(channel)
        for i in counter:
            case = mix[i % len(mix)]
            t = time.perf_counter()
            if beta and i % 2:
                req = fnv1beta1.RunFunctionRequest()
                req.ParseFromString(case.request)
                got = (await v1beta1.RunFunction(req, timeout=30)).SerializeToString()
                answer = fnv1.RunFunctionResponse()
                answer.ParseFromString(got)
            else:
                req1 = fnv1.RunFunctionRequest()
                req1.ParseFromString(case.request)
                answer = await v1.RunFunction(req1, timeout=30)
            run.latencies.append(time.perf_counter() - t)
            if answer.SerializeToString(deterministic=True) != case.expected:
                run.wrong.append(f"call {i} ({case.name}): answer differs from the in-process one")
            run.calls += 1
            if on_progress and run.calls % 1000 == 0:
                on_progress(run.calls)

    started = time.perf_counter()
    async with grpc.aio.insecure_channel(address) as channel:
        await asyncio.gather(*(client(channel) for _ in range(concurrency)))
    run.seconds = time.perf_counter() - started
    return run
