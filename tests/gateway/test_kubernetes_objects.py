"""The mapping between E2B's sandboxes and WorkspaceSandbox objects: plain dicts, no API server."""

from datetime import UTC, datetime
from typing import Any

import pytest
from workspace_gateway.backend import NewSandbox, Snapshot, State
from workspace_gateway.errors import GatewayError
from workspace_gateway.kubernetes.objects import (
    AUTO_PAUSE,
    END,
    HANDED_OUT,
    ID_LABEL,
    MARK,
    MEMBER,
    POOL_LABEL,
    READY_NOTE,
    STARTED,
    TEMPLATE,
    Settings,
    access_token,
    agent_url,
    alive,
    handout_patch,
    manifest,
    mark,
    member_manifest,
    ours,
    preview_ports,
    refusal_of,
    sandbox_of,
    shown,
    snapshots_of,
)
from workspace_gateway.kubernetes.templates import Template
from workspace_gateway.times import rfc3339

SEED = b"s" * 32
NS, ID = "team-a", "a" * 20
NOW = datetime(2026, 12, 1, 18, 0, 0, 250000, tzinfo=UTC)
BASE = Template(image="ubuntu-24.04", preset="standard", resources={"cpu": "2", "memory": "1Gi"})
SETTINGS = Settings(templates={"base": BASE}, seed=SEED)


def made(request: NewSandbox) -> dict[str, Any]:
    """The object as the API server would return it: the manifest, placed in its namespace."""
    obj = manifest((NS, ID), "base", BASE, request, NOW, seed=SEED)
    obj["metadata"] |= {"namespace": NS, "resourceVersion": "7", "generation": 1}
    return obj


def running(obj: dict[str, Any], host: str = "10.0.0.5") -> dict[str, Any]:
    ready = {"type": "Ready", "status": "True"}
    return {**obj, "status": {"phase": "Running", "endpoint": host, "conditions": [ready]}}


def test_a_manifest_carries_the_callers_settings_and_the_gateways_mark() -> None:
    request = NewSandbox("base", timeout=60, metadata={"who": "me"}, auto_pause=True)
    obj = made(request)
    notes = obj["metadata"]["annotations"]
    assert obj["metadata"]["labels"] == {ID_LABEL: ID}
    assert notes[TEMPLATE] == "base"
    assert notes[AUTO_PAUSE] == "true"
    assert notes[MARK] == mark(SEED, NS, ID)
    assert obj["spec"]["power"] == "Running"
    assert obj["spec"]["lifetime"] == {"suspendAt": "2026-12-01T18:01:00Z"}
    assert obj["spec"]["image"] == "ubuntu-24.04"


def test_suspend_at_is_written_to_the_second_and_e2b_times_keep_microseconds() -> None:
    assert rfc3339(NOW, "seconds") == "2026-12-01T18:00:00Z"
    assert rfc3339(NOW) == "2026-12-01T18:00:00.250000Z"


def test_metadata_and_env_vars_past_the_budget_are_refused() -> None:
    request = NewSandbox("base", timeout=60, env_vars={"A": "x" * 30_000})
    with pytest.raises(GatewayError) as e:
        made(request)
    assert e.value.status == 400
    assert e.value.message.startswith("metadata and envVars are too large")


def test_a_sandbox_of_an_object_is_what_e2b_answers() -> None:
    obj = running(made(NewSandbox("base", timeout=60, metadata={"who": "me"})))
    sandbox = sandbox_of(obj, SETTINGS, "0.6.4")
    assert sandbox.sandbox_id == ID
    assert sandbox.namespace == NS
    assert sandbox.state is State.RUNNING
    assert sandbox.metadata == {"who": "me"}
    assert (sandbox.cpu_count, sandbox.memory_mb) == (2, 1024)
    assert sandbox.endpoint == "http://10.0.0.5:49983"
    assert sandbox.access_token == access_token(SEED, NS, ID)
    assert sandbox.envd_version == "0.6.4"
    assert sandbox.end_at == datetime.fromisoformat(obj["metadata"]["annotations"][END])


@pytest.mark.parametrize(
    ("status", "url"),
    [
        pytest.param({}, None, id="no-status-no-url"),
        pytest.param({"phase": "Running", "endpoint": "h"}, None, id="not-ready-no-url"),
        pytest.param(
            {
                "phase": "Suspended",
                "endpoint": "h",
                "conditions": [{"type": "Ready", "status": "True"}],
            },
            None,
            id="suspended-no-url",
        ),
        pytest.param(
            {
                "phase": "Running",
                "endpoint": "h",
                "conditions": [{"type": "Ready", "status": "True"}],
            },
            "http://h:49983",
            id="running-and-ready",
        ),
    ],
)
def test_the_agent_is_reached_only_once_the_platform_says_it_is_up(
    status: dict[str, Any], url: str | None
) -> None:
    assert agent_url({"spec": {"power": "Running"}, "status": status}, 49983) == url


def test_an_object_without_the_mark_of_its_own_namespace_is_not_the_gateways() -> None:
    obj = made(NewSandbox("base", timeout=60))
    assert ours(obj, SEED)
    moved = {**obj, "metadata": {**obj["metadata"], "namespace": "team-b"}}
    assert not ours(moved, SEED)
    assert not ours(obj, b"x" * 32)
    deleting = {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": "2026-12-01T18:00Z"}}
    assert ours(deleting, SEED)
    assert not alive(deleting, SEED)


def test_a_pool_member_is_alive_but_not_shown_until_handed_out() -> None:
    member = member_manifest((NS, ID), "base", BASE, NOW, seed=SEED)
    member["metadata"] |= {"namespace": NS, "resourceVersion": "3"}
    assert member["metadata"]["labels"][POOL_LABEL] == MEMBER
    assert alive(member, SEED)
    assert not shown(member, SEED)
    patch = handout_patch(member, NewSandbox("base", timeout=60), NOW, SEED)
    assert patch["metadata"]["resourceVersion"] == "3"
    assert patch["metadata"]["labels"][POOL_LABEL] == HANDED_OUT
    assert patch["metadata"]["annotations"][READY_NOTE] is None
    assert patch["metadata"]["annotations"][STARTED] == NOW.isoformat()


def test_only_a_current_fatal_result_is_a_refusal() -> None:
    message = 'pipeline step "render" returned a fatal result: spec.preset: "xl" is not offered'
    synced = {"type": "Synced", "status": "False", "message": message, "observedGeneration": 2}
    obj = {"metadata": {"generation": 2}, "status": {"conditions": [synced]}}
    assert refusal_of(obj) == 'spec.preset: "xl" is not offered'
    assert refusal_of({**obj, "metadata": {"generation": 3}}) is None
    other = {**synced, "message": "cannot apply"}
    assert refusal_of({"metadata": {}, "status": {"conditions": [other]}}) is None


def test_snapshots_are_ready_only_with_their_volume_snapshot() -> None:
    obj = {
        "metadata": {"name": ID},
        "spec": {"snapshots": [{"name": "one"}, {"name": "two"}, "junk"]},
        "status": {"snapshots": [{"name": "one", "readyToUse": True, "volumeSnapshot": "vs-1"}]},
    }
    assert snapshots_of(obj) == (
        Snapshot(ID, "one", ready=True, volume="vs-1"),
        Snapshot(ID, "two", ready=False, volume=""),
    )


def test_preview_ports_leave_the_agents_out() -> None:
    obj = {"spec": {"ports": [{"port": 8080}, {"port": 49983}, {"port": "x"}, "junk"]}}
    assert preview_ports(obj, 49983) == frozenset({8080})
