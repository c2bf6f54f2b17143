"""Over real gRPC: malformed, empty, oversized and mixed-version requests; the server carries on."""

from collections.abc import Iterator

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from bench.driver import RUN_FUNCTION, RUN_FUNCTION_BETA, Server, server
from tests.support import request, results, xr


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    with server() as running:
        yield running


def call(srv: Server, payload: bytes, method: str = RUN_FUNCTION) -> fnv1.RunFunctionResponse:
    # The client takes big answers: a response carries the request's context back.
    options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    with grpc.insecure_channel(srv.address, options=options) as channel:
        raw = channel.unary_unary(method)(payload, timeout=10)
    rsp = fnv1.RunFunctionResponse()
    rsp.ParseFromString(raw)
    return rsp


def still_serving(srv: Server) -> None:
    rsp = call(srv, request(xr()).SerializeToString())
    assert not results(rsp)
    assert "vm" in rsp.desired.resources


def test_an_empty_request_is_a_fatal_result(srv: Server) -> None:
    rsp = call(srv, b"")
    assert [(r.severity, r.message) for r in results(rsp)] == [
        (fnv1.SEVERITY_FATAL, "input: the Composition step has no SandboxPlatform input")
    ]
    still_serving(srv)


def test_a_request_without_a_composite_is_a_fatal_result(srv: Server) -> None:
    req = request(xr())
    req.observed.ClearField("composite")
    rsp = call(srv, req.SerializeToString())
    assert [r.message for r in results(rsp)] == [
        "composite: the request carries no composite resource"
    ]
    still_serving(srv)


@pytest.mark.parametrize("garbage", [b"\xff\xff\xff\xff", b"\x0a\x05abc", b"not a protobuf at all"])
def test_garbage_bytes_get_an_error_status_and_nothing_else(srv: Server, garbage: bytes) -> None:
    with pytest.raises(grpc.RpcError) as err:
        call(srv, garbage)
    # gRPC's own answer to an undecodable message; nothing of ours runs.
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    assert "Error parsing message with type 'apiextensions.fn.proto.v1.RunFunctionRequest'" in (
        err.value.details() or ""
    )
    still_serving(srv)


def test_an_oversized_request_is_refused_by_the_size_limit(srv: Server) -> None:
    req = request(xr())
    req.context.update({"padding": "x" * (5 * 1024 * 1024)})
    with pytest.raises(grpc.RpcError) as err:
        call(srv, req.SerializeToString())
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in (err.value.details() or "")
    still_serving(srv)


def test_a_raised_size_limit_accepts_what_the_default_refuses() -> None:
    req = request(xr())
    req.context.update({"padding": "x" * (5 * 1024 * 1024)})
    with server("--max-recv-message-size", "8") as big:
        rsp = call(big, req.SerializeToString())
    assert "vm" in rsp.desired.resources


def test_v1_and_v1beta1_interleaved_give_the_same_answers(srv: Server) -> None:
    payload = request(xr({"power": "Suspended"})).SerializeToString()
    answers = {
        call(srv, payload, m).SerializeToString(deterministic=True)
        for m in [RUN_FUNCTION, RUN_FUNCTION_BETA] * 5
    }
    assert len(answers) == 1
