"""The agent's envd protocol against upstream's, vendored in agent/spec/upstream/.

What protoc makes of envd 0.6.4's .proto files is compared with the descriptors in the agent's
generated stubs (what it serves), each flattened to one line per file, service, method, message,
field, enum and enum value; a method counts on the agent's side only where its service implements
it. Each route of upstream's `envd.yaml` is asked of the agent's app. Where the agent differs on
purpose, the allowances below say so, with the line on each side: a difference they don't list
fails, and so does one they list that has gone.
"""

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml

# connectrpc's table of an error code's HTTP status is private; the pin (0.12.1) keeps it still.
from connectrpc._protocol import _error_to_http_status
from connectrpc.code import Code
from google.protobuf import descriptor_pb2, text_format
from google.protobuf.message import Message
from grpc_tools import protoc
from workspace_agent._proto.filesystem import filesystem_connect, filesystem_pb
from workspace_agent._proto.process import process_connect, process_pb
from workspace_agent.errors import HTTP_STATUS
from workspace_agent.filesystem import FilesystemService
from workspace_agent.process import ProcessService
from workspace_agent.server import build_app
from workspace_agent.state import Agent
from workspace_agent.users import Users

from tests.agent.sdk.agents import TOKEN
from tests.support import ROOT

UPSTREAM = ROOT / "agent" / "spec" / "upstream"
PROTOS = ("process/process.proto", "filesystem/filesystem.proto")
AGENT = {
    "process/process.proto": process_pb.desc(),
    "filesystem/filesystem.proto": filesystem_pb.desc(),
}
SERVICES: dict[str, tuple[type, type]] = {
    "process.Process": (ProcessService, process_connect.Process),
    "filesystem.Filesystem": (FilesystemService, filesystem_connect.Filesystem),
}
"""Each service the agent mounts: its implementation, and the generated protocol it implements,
whose methods answer `unimplemented`."""

ALLOWED: dict[str, tuple[str | None, str | None]] = {
    # The e2b SDK 2.63.0 reads it (the descriptor in its e2b/envd/filesystem/filesystem_pb.py):
    # a link is then listed as a link, its `type` what it points at. envd has no such field.
    "field filesystem.EntryInfo.is_symlink": ("12 optional bool json=isSymlink", None),
}
"""Each difference the agent means: its line (None: it has none), and upstream's."""

ROUTES_NOT_SERVED = {
    # The orchestrator's: envd freezes the sandbox's cgroups before a pause, and thaws them if
    # the pause fails. Here a pause is the WorkspaceSandbox's `spec.power`, which the platform
    # acts on, and the gateway refuses both paths from outside (workspace_gateway/proxy.py).
    ("POST", "/freeze"),
    ("POST", "/unfreeze"),
    # No call of the e2b SDK 2.63.0 reaches either: its routes are /files and /health
    # (e2b/envd/api.py) and the two services.
    ("GET", "/envs"),
    ("POST", "/files/compose"),
}
"""envd.yaml's routes the agent leaves unserved, and why."""

HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def _snake(method: str) -> str:
    """A method's name in the generated Python protocol: `GetWatcherEvents` is `get_watcher_events`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", method).lower()


def _implements(implementation: type, protocol: type, method: str) -> bool:
    """Whether `implementation` has its own `method`, not the protocol's `unimplemented` answer."""
    return getattr(implementation, _snake(method)) is not getattr(protocol, _snake(method))


def _implemented(service: str, method: str) -> bool:
    return _implements(*SERVICES[service], method)


def _options(options: Message) -> str:
    text = text_format.MessageToString(options, as_one_line=True)
    return f" [{text}]" if text else ""


def _field(f: descriptor_pb2.FieldDescriptorProto, oneofs: list[str]) -> str:
    label = descriptor_pb2.FieldDescriptorProto.Label.Name(f.label).removeprefix("LABEL_")
    kind = descriptor_pb2.FieldDescriptorProto.Type.Name(f.type).removeprefix("TYPE_")
    line = f"{f.number} {label.lower()} {kind.lower()}{f' {f.type_name}' if f.type_name else ''}"
    line += f" json={f.json_name}" if f.HasField("json_name") else " json=(unset)"
    if f.proto3_optional:
        line += " proto3-optional"
    elif f.HasField("oneof_index"):
        line += f" oneof={oneofs[f.oneof_index]}"
    return line + (f" default={f.default_value}" if f.HasField("default_value") else "")


def _enum(scope: str, e: descriptor_pb2.EnumDescriptorProto, found: dict[str, str]) -> None:
    name = f"{scope}.{e.name}"
    found[f"enum {name}"] = f"enum{_options(e.options)}"
    for v in e.value:
        found[f"enum value {name}.{v.name}"] = f"{v.number}{_options(v.options)}"


def _message(scope: str, m: descriptor_pb2.DescriptorProto, found: dict[str, str]) -> None:
    name = f"{scope}.{m.name}"
    oneofs = [o.name for o in m.oneof_decl]
    reserved = [f"{r.start}-{r.end - 1}" for r in m.reserved_range] + list(m.reserved_name)
    found[f"message {name}"] = f"oneofs {oneofs} reserved {reserved}{_options(m.options)}"
    for f in m.field:
        found[f"field {name}.{f.name}"] = _field(f, oneofs) + _options(f.options)
    for e in m.enum_type:
        _enum(name, e, found)
    for nested in m.nested_type:
        _message(name, nested, found)


def facts(
    file: descriptor_pb2.FileDescriptorProto, implemented: Callable[[str, str], bool]
) -> dict[str, str]:
    """One line per element of `file` the wire depends on, by a key naming it; its methods only
    where `implemented(service, method)`."""
    head = f"package {file.package} {file.syntax} imports {list(file.dependency)}"
    found = {f"file {file.name}": head + _options(file.options)}
    for s in file.service:
        service = f"{file.package}.{s.name}"
        found[f"service {service}"] = f"service{_options(s.options)}"
        for m in s.method:
            if not implemented(service, m.name):
                continue
            request = f"{'stream ' if m.client_streaming else ''}{m.input_type.lstrip('.')}"
            response = f"{'stream ' if m.server_streaming else ''}{m.output_type.lstrip('.')}"
            found[f"method {service}.{m.name}"] = f"{request} -> {response}{_options(m.options)}"
    for e in file.enum_type:
        _enum(file.package, e, found)
    for m in file.message_type:
        _message(file.package, m, found)
    return found


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Upstream's protos, compiled by grpcio-tools' protoc, as facts."""
    out = tmp_path_factory.mktemp("upstream") / "envd.pb"
    included = Path(protoc.__file__).parent / "_proto"  # google/protobuf/timestamp.proto
    argv = ["protoc", f"-I{UPSTREAM}", f"-I{included}", f"--descriptor_set_out={out}", *PROTOS]
    assert protoc.main(argv) == 0, f"protoc could not compile {UPSTREAM}"
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    return {k: v for f in files for k, v in facts(f, lambda *_: True).items()}


@pytest.fixture(scope="module")
def ours() -> dict[str, str]:
    """The agent's stubs' descriptors, as facts."""
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(d.proto.to_binary()) for d in AGENT.values()
    ]
    return {k: v for f in files for k, v in facts(f, _implemented).items()}


def test_the_agent_speaks_upstream_envds_protocol(
    ours: dict[str, str], upstream: dict[str, str]
) -> None:
    found = {
        key: (ours.get(key), upstream.get(key))
        for key in sorted(ours.keys() | upstream.keys())
        if ours.get(key) != upstream.get(key)
    }
    unexpected = {key: sides for key, sides in found.items() if ALLOWED.get(key) != sides}
    assert unexpected == {}, "differences from envd 0.6.4 (ours, upstream) that ALLOWED lacks"
    gone = sorted(key for key, sides in ALLOWED.items() if found.get(key) != sides)
    assert gone == [], "ALLOWED names differences that are no more"


@pytest.mark.parametrize(
    ("key", "line"),
    [
        pytest.param(
            "method process.Process.StreamInput",
            "stream process.StreamInputRequest -> process.StreamInputResponse",
            id="a-method-with-its-streams",
        ),
        pytest.param(
            "field process.ProcessEvent.EndEvent.exit_code",
            "1 optional sint32 json=exitCode",
            id="a-field-with-its-number-type-and-json-name",
        ),
        pytest.param(
            "field process.ProcessSelector.tag",
            "2 optional string json=tag oneof=selector",
            id="a-field-in-a-oneof",
        ),
        pytest.param(
            "field process.StartRequest.stdin",
            "4 optional bool json=stdin proto3-optional",
            id="an-optional-field",
        ),
        pytest.param(
            "field filesystem.EntryInfo.metadata",
            "11 repeated message .filesystem.EntryInfo.MetadataEntry json=metadata",
            id="a-map",
        ),
        pytest.param(
            "message filesystem.EntryInfo.MetadataEntry",
            "oneofs [] reserved [] [map_entry: true]",
            id="a-maps-entry",
        ),
        pytest.param("enum value process.Signal.SIGNAL_SIGKILL", "9", id="an-enum-value"),
    ],
)
def test_the_comparison_sees_what_the_wire_depends_on(
    upstream: dict[str, str], ours: dict[str, str], key: str, line: str
) -> None:
    assert (upstream[key], ours[key]) == (line, line)


def test_a_method_left_to_the_generated_protocol_is_not_implemented() -> None:
    class Partial(process_connect.Process):
        async def send_signal(self, *_: object) -> process_pb.SendSignalResponse:
            return process_pb.SendSignalResponse()

    assert _implements(Partial, process_connect.Process, "SendSignal")
    assert not _implements(Partial, process_connect.Process, "CloseStdin")


def _upstream_routes() -> set[tuple[str, str]]:
    spec = yaml.safe_load((UPSTREAM / "envd.yaml").read_text())
    return {
        (m.upper(), path) for path, ops in spec["paths"].items() for m in ops if m in HTTP_METHODS
    }


def _unserved(r: httpx.Response) -> bool:
    """The agent's answer to a route it doesn't serve: no such path, or not that method."""
    path, method = r.request.url.path, r.request.method
    refusals = [
        {"code": 404, "message": f"no route {path}"},
        {"code": 400, "message": f"{method} not allowed"},
    ]
    is_json = r.headers.get("content-type", "").startswith("application/json")
    return is_json and r.json() in refusals


async def test_the_agent_serves_upstream_envds_routes(workspace: Path) -> None:
    """Each route of envd.yaml, asked with the token, is answered other than with a refusal."""
    agent = Agent(root=workspace, users=Users(workspace, "nobody"))
    app = build_app(agent, ProcessService(agent))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://agent") as client:
        assert (await client.post("/init", json={"accessToken": TOKEN})).status_code == 204
        token = {"X-Access-Token": TOKEN}
        answers = {
            route: await client.request(*route, headers=token)
            for route in sorted(_upstream_routes())
        }
    unserved = {route for route, r in answers.items() if _unserved(r)}
    assert unserved - ROUTES_NOT_SERVED == set(), "envd.yaml's routes the agent doesn't serve"
    assert ROUTES_NOT_SERVED - unserved == set(), "ROUTES_NOT_SERVED names routes now served"
    assert ROUTES_NOT_SERVED <= answers.keys(), "ROUTES_NOT_SERVED names routes envd.yaml lacks"


def test_an_error_has_connects_http_status_but_a_full_disk_envds() -> None:
    connect = {code: status.code for code, status in _error_to_http_status.items()}
    assert HTTP_STATUS.keys() == connect.keys() == set(Code)
    assert {c: s for c, s in HTTP_STATUS.items() if connect[c] != s} == {
        Code.RESOURCE_EXHAUSTED: 507
    }
    spec = yaml.safe_load((UPSTREAM / "envd.yaml").read_text())
    full = spec["components"]["responses"]["NotEnoughDiskSpace"]["content"]["application/json"]
    assert full["example"]["code"] == 507


def _blob(data: bytes) -> str:
    """`git hash-object`: how SOURCES.md names each file's content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def test_the_vendored_files_are_upstreams_unedited() -> None:
    rows = re.findall(
        r"^\| `([^`]+)` \|(?:[^|]*\|){4} ([0-9a-f]{40}) \|",
        (UPSTREAM / "SOURCES.md").read_text(),
        re.M,
    )
    vendored = {
        str(p.relative_to(UPSTREAM)): _blob(p.read_bytes())
        for p in sorted(UPSTREAM.rglob("*"))
        if p.is_file() and p.name != "SOURCES.md"
    }
    assert dict(rows) == vendored, "a vendored file without its row, or not the blob it names"
