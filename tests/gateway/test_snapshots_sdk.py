"""Snapshots through E2B's API, with the real SDK, over `workspace-sandbox-gateway --local`:
`create_snapshot`, `list_snapshots`, `Sandbox.create(snapshot_id)` and `delete_snapshot`.

They are filesystem snapshots (a copy of the workspace here, a `spec.snapshots` VolumeSnapshot
on a cluster: tests/gateway/test_kubernetes_backend.py), and the answers say so.
"""

import os
from collections.abc import Iterator

import httpx
import pytest
from e2b import Sandbox, SandboxException

from tests.gateway.sdk.gateways import (  # noqa: F401  # the fixtures
    Gateway,
    gateway,
    sdk_env,
)

pytestmark = pytest.mark.e2e  # starts agents or gateways


@pytest.fixture
def source() -> Iterator[Sandbox]:
    made = Sandbox.create()
    yield made
    made.kill()


def listed(**filters: str) -> list[str]:
    pages = Sandbox.list_snapshots(**filters)  # type: ignore[arg-type]  # each filter by name
    found: list[str] = []
    while pages.has_next:
        found += [s.snapshot_id for s in pages.next_items()]
    return sorted(found)


def test_a_snapshot_is_the_files_a_new_sandbox_starts_from(source: Sandbox) -> None:
    source.files.write("notes/kept.txt", "before the snapshot")
    source.commands.run("sleep 600", background=True)
    taken = source.create_snapshot(name="first")
    assert taken.snapshot_id == f"snapshot-{source.sandbox_id}-first"
    assert taken.names == ["first"]
    source.files.write("notes/kept.txt", "after the snapshot")

    restored = Sandbox.create(taken.snapshot_id)
    try:
        assert restored.sandbox_id != source.sandbox_id
        assert restored.files.read("notes/kept.txt") == "before the snapshot"
        assert restored.get_info().template_id == "base"  # its source's template
        # Files, not memory: none of the source's commands run in it.
        assert [p.cmd for p in source.commands.list()] != []
        assert restored.commands.list() == []
        assert source.files.read("notes/kept.txt") == "after the snapshot"
    finally:
        restored.kill()


def test_snapshots_are_listed_filtered_and_deleted(source: Sandbox) -> None:
    one = source.create_snapshot(name="one").snapshot_id
    unnamed = source.create_snapshot().snapshot_id
    assert unnamed.startswith(f"snapshot-{source.sandbox_id}-snap-")
    other = Sandbox.create()
    try:
        theirs = other.create_snapshot(name="one").snapshot_id
        assert listed(sandbox_id=source.sandbox_id) == sorted([one, unnamed])
        assert listed(name="one") == sorted([one, theirs])
        assert listed(name=one) == [one]
        assert set(listed()) >= {one, unnamed, theirs}
        pages = Sandbox.list_snapshots(sandbox_id=source.sandbox_id, limit=1)
        assert [s.snapshot_id for s in pages.next_items()] == [one]
        assert [s.snapshot_id for s in pages.next_items()] == [unnamed]
        assert not pages.has_next
    finally:
        other.kill()
    # A sandbox's snapshots go with it, as its VolumeSnapshots go with a WorkspaceSandbox.
    assert theirs not in listed()
    assert Sandbox.delete_snapshot(one) is True
    assert Sandbox.delete_snapshot(one) is False
    assert listed(sandbox_id=source.sandbox_id) == [unnamed]
    with pytest.raises(SandboxException, match="not found"):
        Sandbox.create(one)


def test_what_is_not_a_filesystem_snapshot_is_refused_by_name(source: Sandbox) -> None:
    with pytest.raises(SandboxException, match="snapshots of memory are not offered"):
        source.create_snapshot(mode="full")
    with pytest.raises(SandboxException, match="a DNS label of at most 40 characters"):
        source.create_snapshot(name="team/project:v1")
    source.create_snapshot(name="twice", mode="filesystem")
    with pytest.raises(SandboxException, match="has a snapshot 'twice' already"):
        source.create_snapshot(name="twice")
    assert source.is_running()


def test_the_answer_says_what_kind_of_snapshot_it_is(
    gateway: Gateway,  # noqa: F811  # the fixture
    source: Sandbox,
) -> None:
    answer = httpx.post(
        f"{gateway.url}/sandboxes/{source.sandbox_id}/snapshots",
        json={"name": "raw"},
        headers={"X-API-Key": gateway.key},
    )
    assert answer.status_code == 201
    assert answer.json() == {
        "snapshotID": f"snapshot-{source.sandbox_id}-raw",
        "names": ["raw"],
        "sandboxID": source.sandbox_id,
        "memory": False,
        "kind": "filesystem",
        "readyToUse": True,
    }


def test_a_fork_is_sandboxes_from_one_filesystem_snapshot(source: Sandbox) -> None:
    source.files.write("state.txt", "forked")
    source.commands.run("sleep 600", background=True)
    forks = source.fork(count=2, timeout=120)
    try:
        assert all(isinstance(f, Sandbox) for f in forks), forks
        first, second = (f for f in forks if isinstance(f, Sandbox))
        assert len({first.sandbox_id, second.sandbox_id, source.sandbox_id}) == 3
        for fork in (first, second):
            assert fork.files.read("state.txt") == "forked"
            assert fork.commands.list() == []  # files, not processes
        first.files.write("state.txt", "changed in one fork")
        assert second.files.read("state.txt") == "forked"
        assert source.files.read("state.txt") == "forked"
        # The snapshot they came from is the source's, listed and deletable as any other.
        (kept,) = listed(sandbox_id=source.sandbox_id)
        assert kept.startswith(f"snapshot-{source.sandbox_id}-fork-")
    finally:
        for fork in forks:
            if isinstance(fork, Sandbox):
                fork.kill()
    # A count the SDK would not send (it checks it itself), sent anyway.
    answer = httpx.post(
        f"{os.environ['E2B_API_URL']}/sandboxes/{source.sandbox_id}/fork",
        json={"count": 21},
        headers={"X-API-Key": os.environ["E2B_API_KEY"]},
    )
    assert (answer.status_code, answer.json()["message"]) == (
        400,
        "count must be a whole number from 1 to 20",
    )


def test_a_fork_of_a_private_sandbox_is_private(
    gateway: Gateway,  # noqa: F811  # the fixture
) -> None:
    source = Sandbox.create(network={"allow_public_traffic": False})
    try:
        (fork,) = source.fork()
        assert isinstance(fork, Sandbox), fork
        try:
            for sandbox in (source, fork):
                route = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "3000"}
                assert httpx.get(f"{gateway.url}/", headers=route).status_code == 403
        finally:
            fork.kill()
    finally:
        source.kill()


def test_a_pause_says_it_kept_the_files_whatever_was_asked(
    gateway: Gateway,  # noqa: F811  # the fixture
    source: Sandbox,
) -> None:
    """SDKs before 2.63 send `memory: true` on every pause: it is taken, and the answer and
    the sandbox both say what was kept."""
    answer = httpx.post(
        f"{gateway.url}/sandboxes/{source.sandbox_id}/pause",
        json={"memory": True},
        headers={"X-API-Key": gateway.key},
    )
    assert (answer.status_code, answer.headers["pause-mode"]) == (204, "filesystem")
    detail = httpx.get(
        f"{gateway.url}/sandboxes/{source.sandbox_id}", headers={"X-API-Key": gateway.key}
    )
    assert detail.json()["pauseMode"] == "filesystem"
    assert source.pause(mode="full") is False  # already paused: the SDK's 409
