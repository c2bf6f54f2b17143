"""End to end over real gRPC: `workspace-sandbox serve` as a subprocess, called like Crossplane."""

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1

from tests.ports import free_port
from tests.support import request, results, wait_until_serving, xr


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    addr = f"127.0.0.1:{free_port()}"
    exe = Path(sys.executable).parent / "workspace-sandbox"
    proc = subprocess.Popen(
        [str(exe), "serve", "--insecure", "--address", addr],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        with grpc.insecure_channel(addr) as channel:
            wait_until_serving(proc, channel)
        yield addr
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_v1_run_function_over_grpc(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request(xr()), timeout=10)
    assert not results(rsp)
    assert sorted(rsp.desired.resources) == [
        "cilium-policy",
        "network-policy",
        "service",
        "vm",
        "workspace-volume",
    ]
    vm = resource.struct_to_dict(rsp.desired.resources["vm"].resource)
    assert vm["spec"]["runStrategy"] == "Always"


def test_v1beta1_run_function_over_grpc(address: str) -> None:
    beta = fnv1beta1.RunFunctionRequest()
    beta.ParseFromString(request(xr({"power": "Suspended"})).SerializeToString())
    with grpc.insecure_channel(address) as channel:
        rsp = grpcv1beta1.FunctionRunnerServiceStub(channel).RunFunction(beta, timeout=10)
    vm = resource.struct_to_dict(rsp.desired.resources["vm"].resource)
    assert vm["spec"]["runStrategy"] == "Halted"


def test_bad_input_over_grpc_is_a_fatal_result_not_an_error(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        bad = stub.RunFunction(request(xr({"preset": "xl"})), timeout=10)
        good = stub.RunFunction(request(xr()), timeout=10)
    assert [(r.severity, r.message) for r in bad.results] == [
        (
            fnv1.SEVERITY_FATAL,
            "spec.preset: 'xl' is not offered; use one of: dedicated-plane, gvisor, isolated, isolated-kata, kata, shared-plane, standard",
        )
    ]
    assert not results(good)
