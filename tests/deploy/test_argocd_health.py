"""deploy/argocd/health.lua: the health Argo CD shows for a WorkspaceSandbox.

health.lua runs under lupa's Lua 5.1 (the dialect of Argo CD's gopher-lua) with only the
libraries a health script may rely on; `obj` is built from Python data the way Argo CD builds it
from JSON (objects and arrays become tables, arrays 1-based, nulls absent).
"""

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import given, settings
from hypothesis import strategies as st

from function.main import cli
from tests.deploy.argocd import GOLDEN, HEALTH_LUA, run_answered
from tests.support import (
    EXAMPLES,
    ROOT,
    load_stream,
    observed_of,
    request,
    xr,
)

STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}
# What a health script may use: gopher-lua as Argo CD opens it has no io, os or loaders.
UNAVAILABLE = ("io", "os", "debug", "require", "dofile", "loadfile", "load", "loadstring")
RUNTIMES = ("lua51", "luajit21", "lua54", "lua55")


def lua_runtime(name: str = "lua51") -> Any:
    module = importlib.import_module(f"lupa.{name}")
    lua = module.LuaRuntime(unpack_returned_tuples=True)
    for global_name in UNAVAILABLE:
        lua.execute(f"{global_name} = nil")
    return lua


def to_lua(lua: Any, value: Any) -> Any:
    """JSON-shaped Python data as Argo CD hands it to Lua: tables, 1-based arrays, no nulls."""
    if isinstance(value, dict):
        table = lua.table()
        for key, item in value.items():
            if item is not None:
                table[key] = to_lua(lua, item)
        return table
    if isinstance(value, list):
        table = lua.table()
        for index, item in enumerate((i for i in value if i is not None), start=1):
            table[index] = to_lua(lua, item)
        return table
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)  # gopher-lua's numbers are float64, as JSON's are
    return value


def health(obj: dict[str, Any], runtime: str = "lua51") -> tuple[str, str]:
    lua = lua_runtime(runtime)
    lua.globals().obj = to_lua(lua, obj)
    hs = lua.execute(HEALTH_LUA.read_text())
    assert lua.eval("type")(hs) == "table"
    assert set(dict(hs.items())) == {"status", "message"}
    assert hs.status in STATUSES
    assert isinstance(hs.message, str)
    assert hs.message
    return hs.status, hs.message


def cond(
    kind: str, status: str, reason: str | None = None, message: str | None = None
) -> dict[str, Any]:
    found: dict[str, Any] = {"type": kind, "status": status}
    if reason is not None:
        found["reason"] = reason
    if message is not None:
        found["message"] = message
    return found


def sandbox(status: Any = None, **fields: Any) -> dict[str, Any]:
    """A WorkspaceSandbox as Argo CD sees it; `status` None means none reported yet."""
    obj = xr(name="alice-api")
    if status is not None:
        obj["status"] = status
    return {**obj, **fields}


SYNCED = cond("Synced", "True", "ReconcileSuccess")
READY = cond("Ready", "True", "Available")
UNREADY = cond("Ready", "False", "Creating", "Unready resources: service, vm, and workspace-volume")
RUNNING = cond("Suspended", "False", "PowerRunning", "spec.power is Running")
NO_SNAPSHOTS = cond("Snapshots", "True", "Ready", "none requested")
DISK_READY = cond("Provisioned", "True", "Provisioned", "the workspace disk is ready")
EXPIRED = "spec.lifetime.suspendAt (2026-11-29T12:00:00Z) has passed; move it forward to resume"
FATAL = (
    'cannot compose resources: pipeline step "workspace-sandbox" returned a fatal result: '
    "spec.resources.cpu: 16 is more than preset 'standard' allows (8)"
)
UNSCHEDULABLE = (
    "VirtualMachine is ErrorUnschedulable: 0/3 nodes are available: 3 Insufficient memory."
)
CLONING = "waiting for the workspace disk: DataVolume phase CloneInProgress (45.00%)"


def phase(name: str, *conditions: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"phase": name, "conditions": list(conditions), **fields}


CASES = [
    pytest.param(
        sandbox(), "Progressing", "waiting for the function to report status", id="no-status"
    ),
    pytest.param(
        sandbox({}), "Progressing", "waiting for the function to report status", id="empty-status"
    ),
    pytest.param(
        sandbox({"conditions": [SYNCED, UNREADY]}),
        "Progressing",
        "waiting for the function to report status",
        id="crossplane-conditions-only",
    ),
    pytest.param(
        sandbox({"conditions": [cond("Synced", "False", "ReconcileError", FATAL), UNREADY]}),
        "Degraded",
        f"ReconcileError: {FATAL}",
        id="synced-false",
    ),
    pytest.param(
        sandbox(
            phase(
                "Running",
                cond("Synced", "False", "ReconcileError", "cannot apply composed resource"),
                READY,
                cond(
                    "Provisioned", "True", "Provisioned", "the disk is ready and the VM is running"
                ),
            )
        ),
        "Degraded",
        "ReconcileError: cannot apply composed resource",
        id="synced-false-beats-ready",
    ),
    pytest.param(
        sandbox({"conditions": [cond("Synced", "False")]}),
        "Degraded",
        "the composite resource is not synced",
        id="synced-false-bare",
    ),
    pytest.param(
        sandbox({"conditions": [cond("Synced", "False", "ReconcileError")]}),
        "Degraded",
        "ReconcileError",
        id="synced-false-reason-only",
    ),
    pytest.param(
        sandbox(
            phase(
                "Failed",
                SYNCED,
                UNREADY,
                cond("Provisioned", "False", "VirtualMachineFailed", UNSCHEDULABLE),
                RUNNING,
            )
        ),
        "Degraded",
        f"VirtualMachineFailed: {UNSCHEDULABLE}",
        id="failed-vm",
    ),
    pytest.param(
        sandbox(
            phase(
                "Failed",
                SYNCED,
                cond("Provisioned", "False", "DiskFailed", "Unable to connect to http data source"),
            )
        ),
        "Degraded",
        "DiskFailed: Unable to connect to http data source",
        id="failed-disk",
    ),
    pytest.param(
        sandbox(phase("Failed", SYNCED, cond("Provisioned", "False"))),
        "Degraded",
        "the sandbox failed",
        id="failed-bare",
    ),
    pytest.param(
        sandbox(phase("Failed")), "Degraded", "the sandbox failed", id="failed-no-conditions"
    ),
    pytest.param(
        sandbox(
            phase(
                "Suspended",
                SYNCED,
                cond("Ready", "False", "Creating"),
                DISK_READY,
                cond(
                    "Suspended",
                    "True",
                    "Suspended",
                    "the VM is stopped; the workspace disk is kept",
                ),
                NO_SNAPSHOTS,
            )
        ),
        "Suspended",
        "Suspended: the VM is stopped; the workspace disk is kept",
        id="suspended",
    ),
    pytest.param(
        sandbox(
            phase(
                "Suspended",
                SYNCED,
                DISK_READY,
                cond("Suspended", "True", "LifetimeExpired", EXPIRED),
            )
        ),
        "Suspended",
        f"LifetimeExpired: {EXPIRED}",
        id="lifetime-expired",
    ),
    pytest.param(
        sandbox(
            {
                "conditions": [
                    cond("Suspended", "True", "Suspended", "the pod is gone; the workspace is kept")
                ]
            }
        ),
        "Suspended",
        "Suspended: the pod is gone; the workspace is kept",
        id="suspended-condition-without-phase",
    ),
    pytest.param(
        sandbox(phase("Suspended", cond("Suspended", "True"))),
        "Suspended",
        "the sandbox is suspended; the workspace disk is kept",
        id="suspended-bare",
    ),
    pytest.param(
        sandbox(phase("Suspended")),
        "Suspended",
        "the sandbox is suspended; the workspace disk is kept",
        id="suspended-no-conditions",
    ),
    pytest.param(
        sandbox(
            phase(
                "Suspending",
                SYNCED,
                UNREADY,
                DISK_READY,
                cond(
                    "Suspended",
                    "False",
                    "Suspending",
                    "waiting for the VM to stop (printableStatus Stopping)",
                ),
            )
        ),
        "Progressing",
        "Suspending: waiting for the VM to stop (printableStatus Stopping)",
        id="suspending",
    ),
    pytest.param(
        sandbox(
            phase(
                "Suspending",
                SYNCED,
                UNREADY,
                DISK_READY,
                cond("Suspended", "False", "LifetimeExpired", EXPIRED),
            )
        ),
        "Progressing",
        f"Suspending: {EXPIRED}",
        id="suspending-lifetime-expired",
    ),
    pytest.param(
        sandbox(
            phase(
                "Running",
                SYNCED,
                READY,
                cond(
                    "Provisioned", "True", "Provisioned", "the disk is ready and the VM is running"
                ),
                RUNNING,
                NO_SNAPSHOTS,
                endpoint="alice-api.tenant-acme.svc",
            )
        ),
        "Healthy",
        "Running: alice-api.tenant-acme.svc",
        id="running",
    ),
    pytest.param(sandbox(phase("Running", READY)), "Healthy", "Running", id="running-bare"),
    pytest.param(sandbox({"conditions": [READY]}), "Healthy", "Ready", id="ready-without-phase"),
    pytest.param(
        sandbox(
            phase(
                "Running",
                SYNCED,
                cond("Ready", "False", "Creating", "Unready resources: service"),
                cond(
                    "Provisioned", "True", "Provisioned", "the disk is ready and the VM is running"
                ),
            )
        ),
        "Progressing",
        "Running: Unready resources: service",
        id="running-not-ready-yet",
    ),
    pytest.param(
        sandbox(
            phase(
                "Running",
                cond(
                    "Provisioned", "True", "Provisioned", "the disk is ready and the VM is running"
                ),
            )
        ),
        "Progressing",
        "Running: the disk is ready and the VM is running",
        id="running-before-crossplane-ready",
    ),
    pytest.param(
        sandbox(
            phase(
                "Provisioning",
                SYNCED,
                UNREADY,
                cond("Provisioned", "False", "WaitingForDisk", CLONING),
                RUNNING,
            )
        ),
        "Progressing",
        f"Provisioning: {CLONING}",
        id="provisioning-disk",
    ),
    pytest.param(
        sandbox(
            phase(
                "Provisioning",
                SYNCED,
                UNREADY,
                cond(
                    "Provisioned",
                    "False",
                    "StartingVM",
                    "waiting for the VM to become ready (printableStatus Starting)",
                ),
            )
        ),
        "Progressing",
        "Provisioning: waiting for the VM to become ready (printableStatus Starting)",
        id="provisioning-vm",
    ),
    pytest.param(
        sandbox(
            phase(
                "Pending",
                SYNCED,
                UNREADY,
                cond(
                    "Provisioned", "False", "Creating", "waiting for the disk and VM to be created"
                ),
                RUNNING,
            )
        ),
        "Progressing",
        "Pending: waiting for the disk and VM to be created",
        id="pending",
    ),
    pytest.param(
        sandbox(
            phase(
                "Pending",
                cond(
                    "Provisioned",
                    "False",
                    "WaitingForRestoreSnapshot",
                    "waiting for VolumeSnapshot alice-api-nightly to be ready to use",
                ),
            )
        ),
        "Progressing",
        "Pending: waiting for VolumeSnapshot alice-api-nightly to be ready to use",
        id="pending-restore",
    ),
    pytest.param(
        sandbox(phase("Provisioning", cond("Provisioned", "False", "WaitingForDisk"))),
        "Progressing",
        "Provisioning: WaitingForDisk",
        id="provisioning-reason-only",
    ),
    pytest.param(
        sandbox(phase("Provisioning", cond("Provisioned", "False"), cond("Ready", "False"))),
        "Progressing",
        "Provisioning",
        id="provisioning-no-messages",
    ),
    pytest.param(
        sandbox({"phase": "Pending"}), "Progressing", "Pending", id="pending-no-conditions"
    ),
    pytest.param(
        sandbox(phase("Suspending", cond("Suspended", "False"))),
        "Progressing",
        "Suspending",
        id="suspending-no-messages",
    ),
    pytest.param(
        sandbox(
            phase(
                "Provisioning",
                cond("Provisioned", "False", "WaitingForDisk", ""),
                {"type": "Ready"},
                {},
            )
        ),
        "Progressing",
        "Provisioning: WaitingForDisk",
        id="empty-message-and-partial-conditions",
    ),
    pytest.param(
        sandbox("not an object"),
        "Progressing",
        "waiting for the function to report status",
        id="status-a-string",
    ),
    pytest.param(
        sandbox({"phase": "Running", "conditions": "not a list"}),
        "Progressing",
        "Running",
        id="conditions-a-string",
    ),
    pytest.param(
        sandbox({"phase": "Provisioning", "conditions": ["Ready", 7, None, [], {"type": 3}]}),
        "Progressing",
        "Provisioning",
        id="conditions-not-objects",
    ),
    pytest.param(
        sandbox(
            {
                "phase": "Failed",
                "conditions": [{"type": "Provisioned", "message": 42, "reason": True}],
            }
        ),
        "Degraded",
        "the sandbox failed",
        id="message-not-a-string",
    ),
    pytest.param(
        sandbox({"phase": 7}),
        "Progressing",
        "waiting for the function to report status",
        id="phase-a-number",
    ),
    pytest.param(
        sandbox(phase("Running", READY), metadata=None),
        "Healthy",
        "Running",
        id="no-metadata",
    ),
]


@pytest.mark.parametrize(("obj", "status", "message"), CASES)
def test_health(obj: dict[str, Any], status: str, message: str) -> None:
    assert health(obj) == (status, message)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_every_lua_gives_the_same_answers(runtime: str) -> None:
    for case in CASES:
        obj, status, message = case.values
        assert isinstance(obj, dict)
        assert health(obj, runtime) == (status, message), case.id


def test_obj_missing_entirely_is_no_crash() -> None:
    lua = lua_runtime()
    hs = lua.execute(HEALTH_LUA.read_text())
    assert (hs.status, hs.message) == ("Progressing", "waiting for the function to report status")


def test_the_script_sets_no_globals() -> None:
    lua = lua_runtime()
    before = set(dict(lua.globals().items()))
    lua.globals().obj = to_lua(lua, sandbox(phase("Running", READY)))
    lua.execute(HEALTH_LUA.read_text())
    assert set(dict(lua.globals().items())) - before == {"obj"}


CONDITION_TYPES = ["Synced", "Ready", "Provisioned", "Suspended", "Snapshots", "Other"]
JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=8), st.just([]), st.just({})
)
CONDITIONS = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(CONDITION_TYPES),
                "status": st.sampled_from(["True", "False", "Unknown"]),
            },
            optional={
                "reason": st.one_of(st.text(max_size=12), JUNK),
                "message": st.one_of(st.text(max_size=40), JUNK),
            },
        ),
        JUNK,
    ),
    max_size=8,
)
PHASES = st.one_of(
    st.sampled_from(
        ["Pending", "Provisioning", "Running", "Suspending", "Suspended", "Failed", "Other"]
    ),
    JUNK,
)
STATUS = st.one_of(
    JUNK,
    st.fixed_dictionaries(
        {},
        optional={
            "phase": PHASES,
            "conditions": st.one_of(CONDITIONS, JUNK),
            "endpoint": st.one_of(st.text(max_size=20), JUNK),
        },
    ),
)


@settings(max_examples=300, deadline=None)
@given(status=STATUS)
def test_any_status_gets_an_allowed_health_and_a_message(status: Any) -> None:
    health(sandbox(status))


def goldens() -> Iterator[Any]:
    for path in sorted(GOLDEN.glob("*.yaml")):
        yield pytest.param(path, id=path.stem)


# A golden file is `render`'s output: the XR's status as the function set it, with the Ready
# condition Crossplane derives from the function's readiness, as crossplane render prints it.
AS_RENDERED = {
    "full": "Progressing",
    "kata": "Healthy",
    "minimal": "Progressing",
    "provisioning": "Progressing",
    "running": "Healthy",
    "suspended": "Suspended",
    "dedicated-plane": "Healthy",
    "shared-plane": "Progressing",
    "isolated": "Healthy",
}


def test_every_golden_file_has_an_expected_health() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.yaml")) == sorted(AS_RENDERED)
    assert sorted(c.name for c in EXAMPLES) == sorted(AS_RENDERED)


def golden_xr(path: Path) -> dict[str, Any]:
    composite = load_stream(path)[0]
    assert composite["kind"] == "WorkspaceSandbox"
    return composite


def assert_explained(composite: dict[str, Any], status: str, message: str) -> None:
    if status == "Healthy":
        assert message == f"Running: {composite['status']['endpoint']}"
    if status == "Progressing":
        provisioned = next(
            c for c in composite["status"]["conditions"] if c["type"] == "Provisioned"
        )
        assert message == f"{composite['status']['phase']}: {provisioned['message']}"


@pytest.mark.parametrize("path", list(goldens()))
def test_golden_as_rendered(path: Path) -> None:
    composite = golden_xr(path)
    status, message = health(composite)
    assert status == AS_RENDERED[path.stem]
    assert_explained(composite, status, message)


@pytest.mark.parametrize("path", list(goldens()))
async def test_golden_on_a_cluster(path: Path) -> None:
    """Crossplane writes the Ready and Synced that render shows, Ready as the function marked
    the composite; the health is the same."""
    case = ROOT / "examples" / path.stem
    rsp = await run_answered(request(load_stream(case / "xr.yaml")[0], observed_of(case)), case)
    composite = golden_xr(path)
    ready = next(c for c in composite["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"] == "True") == (rsp.desired.composite.ready == fnv1.READY_TRUE)
    synced = next(c for c in composite["status"]["conditions"] if c["type"] == "Synced")
    assert {k: synced[k] for k in SYNCED} == SYNCED
    status, message = health(composite)
    assert status == AS_RENDERED[path.stem]
    assert_explained(composite, status, message)


@pytest.mark.parametrize(
    ("case", "flags", "want"),
    [
        pytest.param(
            "running",
            ["-o", "observed.yaml"],
            ("Healthy", "Running: alice-api.tenant-acme.svc"),
            id="running",
        ),
        pytest.param(
            "provisioning",
            ["-o", "observed.yaml"],
            (
                "Progressing",
                "Provisioning: waiting for the workspace disk: DataVolume phase CSICloneInProgress",
            ),
            id="provisioning",
        ),
        pytest.param(
            "dedicated-plane",
            ["-o", "observed.yaml", "-e", "required.yaml"],
            ("Healthy", "Running: dana-ml.sandbox-dana-ml.svc"),
            id="dedicated-plane",
        ),
    ],
)
def test_render_output_gets_the_health_argo_cd_would_show(
    case: str, flags: list[str], want: tuple[str, str]
) -> None:
    folder = ROOT / "examples" / case
    paths = [str(folder / f) if f.endswith(".yaml") else f for f in flags]
    args = ["render", str(folder / "xr.yaml"), *paths, "--now", "2026-11-29T12:00:00Z"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    composite = next(yaml.safe_load_all(result.stdout))
    assert health(composite) == want
