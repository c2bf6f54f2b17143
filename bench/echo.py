"""The floor: a function on the same SDK that answers with a precomputed response.

`python -m bench.echo --address ADDR --response FILE` serves RunFunction (v1 and v1beta1)
through the SDK's own runtime, returning the bytes in FILE, parsed once, for every call. Any
Python function costs at least this much on the same machine.
"""

import argparse
from pathlib import Path
from typing import Any

import grpc
from crossplane.function import runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1


class Echo(grpcv1.FunctionRunnerServiceServicer):
    def __init__(self, answer: fnv1.RunFunctionResponse) -> None:
        self.answer = answer

    async def RunFunction(
        self, _: fnv1.RunFunctionRequest, __: grpc.aio.ServicerContext[Any, Any] | None
    ) -> fnv1.RunFunctionResponse:
        return self.answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--response", type=Path, required=True)
    args = parser.parse_args()
    answer = fnv1.RunFunctionResponse()
    answer.ParseFromString(args.response.read_bytes())
    runtime.serve(Echo(answer), args.address, creds=None, insecure=True)  # type: ignore[arg-type]  # SDK: creds may be None with insecure


if __name__ == "__main__":
    main()
