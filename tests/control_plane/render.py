"""`crossplane internal render` of Crossplane core v2.3.4: one real reconcile of an XR against an
in-memory client, calling our function over plain-text gRPC.

What the `crossplane render` CLI (github.com/crossplane/cli) runs: a binary `RenderRequest`
(crossplane's proto/render/v1alpha1/render.proto) on stdin, a `RenderResponse` on stdout, exit
code 3 on a FATAL result (cmd/crossplane/render/render.go). Functions are addressed by the
request itself (`FunctionInput`: the pipeline step's functionRef name and a gRPC address), not by
annotations. The message classes are built at test time from the pinned .proto file, into a
temporary folder; nothing of Crossplane's is kept in this repository.
"""

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    json_format,
    message_factory,
    struct_pb2,
    timestamp_pb2,
)
from google.protobuf.message import Message
from grpc_tools import protoc

from tests.control_plane.server import listening_port, source
from tests.support import wait_until_serving

CROSSPLANE = "github.com/crossplane/crossplane/v2"
PROTO = "render.proto"
"""In the module's proto/render/v1alpha1; it imports only google/protobuf's struct and
timestamp, which the protobuf runtime has (`IMPORTS`, loaded into its default pool)."""
IMPORTS = (struct_pb2, timestamp_pb2)
EXE = Path(sys.executable).parent / "workspace-sandbox"
PIPELINE_FATAL = 3
"""`crossplane internal render`'s exit code when a step returns a FATAL result."""
RENDER_TIMEOUT = "60s"
"""Crossplane's own timeout for the render; its gRPC client waits for the function to be ready,
so a function that never answers would otherwise hold it for its default of two minutes."""
PORT_SECONDS = 20.0


@dataclass(frozen=True)
class Messages:
    request: type[Message]
    response: type[Message]


def messages(tmp: Path) -> Messages:
    """RenderRequest and RenderResponse, from the pinned render.proto compiled by grpcio-tools'
    protoc to a descriptor set in `tmp`, then added to protobuf's default pool (where Struct
    already is, so the messages take the runtime's own Struct)."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(PROTO)
    except KeyError:
        folder = source(CROSSPLANE) / "proto" / "render" / "v1alpha1"
        out = tmp / "render.pb"
        included = Path(protoc.__file__).parent / "_proto"
        argv = ["protoc", f"-I{folder}", f"-I{included}", f"--descriptor_set_out={out}", PROTO]
        assert protoc.main(argv) == 0, f"protoc could not compile {folder / PROTO}"
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
        for f in files.file:
            pool.Add(f)

    def of(name: str) -> type[Message]:
        found = pool.FindMessageTypeByName(f"crossplane.render.v1alpha1.{name}")
        return message_factory.GetMessageClass(found)

    return Messages(of("RenderRequest"), of("RenderResponse"))


@contextlib.contextmanager
def served() -> Iterator[str]:
    """`workspace-sandbox serve --insecure` on a port the kernel picks (port 0, read back from
    /proc: no port is chosen free and then lost to another process); its address."""
    proc = subprocess.Popen(
        [str(EXE), "serve", "--insecure", "--address", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + PORT_SECONDS
        while (port := listening_port(proc.pid)) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"workspace-sandbox serve did not listen: {out}")
            time.sleep(0.1)
        address = f"127.0.0.1:{port}"
        with grpc.insecure_channel(address) as channel:
            wait_until_serving(proc, channel)
        yield address
    finally:
        proc.terminate()
        proc.communicate(timeout=15)


@dataclass(frozen=True)
class Rendered:
    code: int
    output: dict[str, Any]
    """The response's CompositeOutput as JSON: compositeResource, composedResources, events."""
    stderr: str


def crossplane_render(binary: Path, msgs: Messages, composite: dict[str, Any]) -> Rendered:
    """Run `crossplane internal render` on a CompositeInput given as JSON."""
    req = json_format.ParseDict({"meta": {}, "composite": composite}, msgs.request())
    run = subprocess.run(
        [binary, "internal", "render", f"--timeout={RENDER_TIMEOUT}"],
        input=req.SerializeToString(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    stderr = run.stderr.decode(errors="replace")
    if run.returncode not in (0, PIPELINE_FATAL):
        pytest.fail(f"crossplane internal render exited {run.returncode}: {stderr}")
    rsp = msgs.response.FromString(run.stdout)
    output = json_format.MessageToDict(rsp).get("composite", {})
    return Rendered(run.returncode, output, stderr)
