"""The SDK's whole cycle through the gateway: create, run, files, timeout, pause, connect, kill."""

import time
import uuid
from datetime import UTC, datetime, timedelta, timezone

import e2b
import httpx
import pytest
from e2b import Sandbox, SandboxQuery, SandboxState

pytestmark = pytest.mark.e2e  # starts agents or gateways

# The SDK before 2.51 has no SandboxNotRunningException: it raises its base for that 502.
NOT_RUNNING = getattr(e2b, "SandboxNotRunningException", e2b.SandboxException)


def test_create_passes_metadata_and_env_vars() -> None:
    sandbox = Sandbox.create(metadata={"purpose": "env test"}, envs={"GREETING": "hello there"})
    try:
        assert len(sandbox.sandbox_id) == 20
        assert sandbox.sandbox_id.isalnum()
        assert sandbox.sandbox_id == sandbox.sandbox_id.lower()
        assert sandbox.commands.run("echo $GREETING").stdout == "hello there\n"
        info = sandbox.get_info()
        assert info.metadata == {"purpose": "env test"}
        assert info.template_id == "base"
        assert info.state.value == "running"
    finally:
        sandbox.kill()


def test_commands_and_files(sandbox: Sandbox) -> None:
    sandbox.files.write("notes/today.txt", "written through the gateway")
    assert sandbox.files.read("notes/today.txt") == "written through the gateway"
    assert sandbox.commands.run("cat notes/today.txt").stdout == "written through the gateway"
    with pytest.raises(e2b.CommandExitException) as failed:
        sandbox.commands.run("echo oops >&2; exit 3")
    assert failed.value.exit_code == 3
    assert failed.value.stderr == "oops\n"


def test_set_timeout_moves_the_end_time(sandbox: Sandbox) -> None:
    sandbox.set_timeout(1200)
    info = sandbox.get_info()
    left = (info.end_at - datetime.now(UTC)).total_seconds()
    assert 1190 < left <= 1200
    sandbox.set_timeout(30)
    left = (sandbox.get_info().end_at - datetime.now(UTC)).total_seconds()
    assert 20 < left <= 30


def test_a_sandbox_is_killed_at_its_end_time() -> None:
    sandbox = Sandbox.create(timeout=1)
    deadline = time.monotonic() + 10
    while sandbox.is_running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not sandbox.is_running()
    assert sandbox.kill() is False


def test_list_filters_by_metadata_and_pages() -> None:
    tag = uuid.uuid4().hex
    made = [Sandbox.create(metadata={"tag": tag, "n": str(i)}) for i in range(3)]
    other = Sandbox.create(metadata={"tag": "someone else's"})
    try:
        seen: list[str] = []
        pages = Sandbox.list(query=SandboxQuery(metadata={"tag": tag}), limit=2)
        while pages.has_next:
            items = pages.next_items()
            assert 1 <= len(items) <= 2
            seen += [item.sandbox_id for item in items]
        assert sorted(seen) == sorted(s.sandbox_id for s in made)
        spaced = Sandbox.list(query=SandboxQuery(metadata={"tag": "someone else's"})).next_items()
        assert [s.sandbox_id for s in spaced] == [other.sandbox_id]
    finally:
        for sandbox in [*made, other]:
            sandbox.kill()


def test_list_filters_by_template_and_start_time() -> None:
    """A "kill every sandbox of template X" job must find only those: a filter the gateway
    ignored would hand it every sandbox."""
    tag = uuid.uuid4().hex
    first = Sandbox.create(metadata={"tag": tag})
    between = datetime.now(UTC)
    second = Sandbox.create(metadata={"tag": tag})
    try:

        def listed(**query: object) -> list[str]:
            asked = SandboxQuery(metadata={"tag": tag}, **query)  # type: ignore[arg-type]
            return sorted(s.sandbox_id for s in Sandbox.list(query=asked).next_items())

        both = sorted([first.sandbox_id, second.sandbox_id])
        assert listed(template="base") == both
        assert listed(template="desktop") == []
        assert listed(started_after=between) == [second.sandbox_id]
        # Another offset (sent as +02:00, its + percent-encoded) is the same moment.
        east = between.astimezone(timezone(timedelta(hours=2)))
        assert listed(started_after=east) == [second.sandbox_id]
        assert listed(started_after=between - timedelta(minutes=5)) == both
        assert listed(started_after=datetime.now(UTC) + timedelta(minutes=5)) == []
    finally:
        first.kill()
        second.kill()


def test_what_is_not_offered_says_so_and_never_not_found(sandbox: Sandbox) -> None:
    """An agent that reads "not found" recreates a sandbox that is alive; a 501 comes out as the
    SDK's base exception with the gateway's message, and the sandbox goes on."""
    # A snapshot is one (tests/gateway/test_snapshots_sdk.py); a template is not to delete.
    taken = sandbox.create_snapshot()
    assert Sandbox.delete_snapshot(taken.snapshot_id) is True
    with pytest.raises(e2b.SandboxException, match=r"501: building, changing or deleting") as gone:
        Sandbox.delete_snapshot("base")
    with pytest.raises(e2b.SandboxException, match="501: changing a sandbox's network") as net:
        sandbox.update_network({"deny_out": ["0.0.0.0/0"]})
    for refused in (gone, net):
        assert not isinstance(refused.value, e2b.NotFoundException), refused.value
    assert sandbox.is_running()
    assert e2b.Template.exists("base") is True
    assert e2b.Template.exists("no-such-template") is False


def test_metrics_are_a_sample_the_agent_takes_now(sandbox: Sandbox) -> None:
    before = datetime.now(UTC) - timedelta(seconds=2)
    (sample,) = sandbox.get_metrics()
    assert sample.cpu_count >= 1
    assert 0.0 <= sample.cpu_used_pct <= 100.0
    assert 0 < sample.mem_used < sample.mem_total
    assert 0 < sample.disk_used <= sample.disk_total
    assert before <= sample.timestamp <= datetime.now(UTC) + timedelta(seconds=2)
    # No history is kept: a range that ends before now has no samples.
    assert sandbox.get_metrics(end=before - timedelta(minutes=1)) == []
    assert len(sandbox.get_metrics(start=before)) == 1


def test_pause_then_connect_keeps_the_workspace() -> None:
    sandbox = Sandbox.create()
    try:
        sandbox.files.write("kept.txt", "still here")
        assert sandbox.pause() is True
        assert sandbox.pause() is False  # already paused: 409
        assert Sandbox.get_info(sandbox.sandbox_id).state.value == "paused"
        listed = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
        assert sandbox.sandbox_id in [s.sandbox_id for s in listed]
        with pytest.raises(NOT_RUNNING, match="was not found"):
            sandbox.commands.run("true", request_timeout=10)
        resumed = Sandbox.connect(sandbox.sandbox_id)
        assert resumed.files.read("kept.txt") == "still here"
        assert resumed.commands.run("cat kept.txt").stdout == "still here"
        assert Sandbox.get_info(sandbox.sandbox_id).state.value == "running"
    finally:
        assert sandbox.kill() is True
    assert sandbox.kill() is False


def test_connect_only_extends_the_end_time(sandbox: Sandbox) -> None:
    sandbox.set_timeout(900)
    Sandbox.connect(sandbox.sandbox_id, timeout=60)
    left = (sandbox.get_info().end_at - datetime.now(UTC)).total_seconds()
    assert left > 800


def test_a_wrong_api_key_is_refused() -> None:
    with pytest.raises(e2b.AuthenticationException):
        Sandbox.create(api_key="e2b_" + "f" * 40)
    with pytest.raises(e2b.AuthenticationException):
        Sandbox.list(api_key="e2b_" + "f" * 40).next_items()


def test_an_unknown_template_is_not_found() -> None:
    with pytest.raises(e2b.SandboxException, match="template 'no-such-template' not found"):
        Sandbox.create("no-such-template")


def test_an_unknown_sandbox_is_not_found() -> None:
    with pytest.raises(e2b.SandboxNotFoundException):
        Sandbox.get_info("nosuchsandbox0000000")
    with pytest.raises(e2b.SandboxNotFoundException):
        Sandbox.connect("nosuchsandbox0000000")
    with pytest.raises(e2b.SandboxNotFoundException):
        Sandbox.set_timeout("nosuchsandbox0000000", 60)
    assert Sandbox.kill("nosuchsandbox0000000") is False


def test_unoffered_features_are_refused_clearly(gateway_url: str, key: str) -> None:
    refused = {
        "network": {"egressProxy": {"address": "proxy.example.com:1080"}},
        "allow_internet_access": False,
    }
    messages = {
        "network": "'network.egressProxy' is not offered by this gateway",
        # Local sandboxes are processes of this machine: nothing limits their egress.
        "allow_internet_access": (
            "egress restrictions (network, allow_internet_access) need --kubernetes"
        ),
    }
    for name, value in refused.items():
        answer = httpx.post(
            gateway_url + "/v2/sandboxes",
            json={"templateID": "base", name: value},
            headers={"X-API-Key": key},
        )
        assert answer.status_code == 400, name
        assert answer.json() == {"code": 400, "message": messages[name]}


def test_a_sandbox_that_asked_to_pause_at_its_end_time_pauses() -> None:
    sandbox = Sandbox.create(timeout=1, lifecycle={"on_timeout": "pause"})
    try:
        sandbox.files.write("kept.txt", "kept")
        deadline = time.monotonic() + 10
        while sandbox.is_running() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert Sandbox.get_info(sandbox.sandbox_id).state == SandboxState.PAUSED
        assert Sandbox.connect(sandbox.sandbox_id, timeout=60).files.read("kept.txt") == "kept"
    finally:
        sandbox.kill()
