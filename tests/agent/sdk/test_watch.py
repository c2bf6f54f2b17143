"""Watching directories through the real SDK: polled (sync) and streamed (async).

The sync tests follow the SDK's own: a write is expected to show as created, mode changed and
written, in that order, with nothing in between, though the agent writes to a temporary file
and renames it into place.
"""

import asyncio
import os
import time
from pathlib import Path

import httpx
import pytest
from e2b import FilesystemEvent, FilesystemEventType, FileType, Sandbox
from e2b.exceptions import NotFoundException, SandboxException

from tests.agent.sdk.agents import NOBODY, STREAM, Running, async_sandbox, envelope, envelopes

pytestmark = pytest.mark.e2e  # starts agents or gateways

CREATE, CHMOD, WRITE = (
    FilesystemEventType.CREATE,
    FilesystemEventType.CHMOD,
    FilesystemEventType.WRITE,
)


def inotify_fds(agent: Running) -> int:
    fds = Path(f"/proc/{agent.process.pid}/fd")
    return sum(1 for fd in fds.iterdir() if os.readlink(fd) == "anon_inode:inotify")


def test_a_write_is_created_chmod_written(sandbox: Sandbox) -> None:
    sandbox.files.make_dir("watched")
    handle = sandbox.files.watch_dir("watched")
    sandbox.files.write("watched/new.txt", "content")
    events = handle.get_new_events()
    assert [(e.type, e.name) for e in events] == [
        (CREATE, "new.txt"),
        (CHMOD, "new.txt"),
        (WRITE, "new.txt"),
    ]
    sandbox.files.write("watched/new.txt", "again")
    assert (WRITE, "new.txt") in [(e.type, e.name) for e in handle.get_new_events()]
    assert handle.get_new_events() == []
    handle.stop()


def test_renames_and_removals(sandbox: Sandbox, agent: Running) -> None:
    sandbox.files.make_dir("watched")
    sandbox.files.write("watched/a.txt", "a")
    handle = sandbox.files.watch_dir("watched")
    sandbox.files.rename("watched/a.txt", "watched/b.txt")
    sandbox.files.remove("watched/b.txt")
    (agent.root / "watched" / "by-hand.txt").write_text("x")
    os.chmod(agent.root / "watched" / "by-hand.txt", 0o600)
    seen = [(e.type.value, e.name) for e in handle.get_new_events()]
    assert seen == [
        ("rename", "a.txt"),
        ("create", "b.txt"),
        ("remove", "b.txt"),
        ("create", "by-hand.txt"),
        ("write", "by-hand.txt"),
        ("chmod", "by-hand.txt"),
    ]
    handle.stop()


def described(events: list[FilesystemEvent]) -> list[tuple[str, str, object]]:
    """Each event with what its entry says: type, name, size and metadata, or None."""
    return [
        (
            e.type.value,
            e.name,
            e.entry and (e.entry.type, e.entry.name, e.entry.size, e.entry.metadata),
        )
        for e in events
    ]


def test_events_carry_their_entry_when_asked_but_not_a_removal(
    sandbox: Sandbox, agent: Running
) -> None:
    sandbox.files.make_dir("watched")
    handle = sandbox.files.watch_dir("watched", include_entry=True)
    sandbox.files.write("watched/new.txt", "five!", metadata={"k": "v"})
    written = (FileType.FILE, "new.txt", 5, {"k": "v"})
    assert described(handle.get_new_events()) == [
        ("create", "new.txt", written),
        ("chmod", "new.txt", written),
        ("write", "new.txt", written),
    ]
    sandbox.files.make_dir("watched/sub")
    sub = agent.root / "watched" / "sub"
    sandbox.files.rename("watched/new.txt", "watched/renamed.txt")
    assert described(handle.get_new_events()) == [
        ("create", "sub", (FileType.DIR, "sub", sub.stat().st_size, None)),
        ("rename", "new.txt", None),
        ("create", "renamed.txt", (FileType.FILE, "renamed.txt", 5, {"k": "v"})),
    ]
    sandbox.files.remove("watched/renamed.txt")
    assert described(handle.get_new_events()) == [("remove", "renamed.txt", None)]
    handle.stop()


def test_without_include_entry_events_carry_none(sandbox: Sandbox) -> None:
    sandbox.files.make_dir("watched")
    handle = sandbox.files.watch_dir("watched")
    sandbox.files.write("watched/new.txt", "x")
    assert [e.entry for e in handle.get_new_events()] == [None, None, None]
    handle.stop()


def test_recursive_watching_follows_new_directories_but_not_links(
    sandbox: Sandbox, agent: Running, tmp_path: Path
) -> None:
    sandbox.files.make_dir("tree/existing")
    outside = tmp_path / "outside"
    outside.mkdir()
    (agent.root / "tree" / "link").symlink_to(outside)
    handle = sandbox.files.watch_dir("tree", recursive=True)
    sandbox.files.write("tree/existing/one.txt", "1")
    sandbox.files.make_dir("tree/later")
    sandbox.files.write("tree/later/two.txt", "2")
    (outside / "unseen.txt").write_text("through the link")
    names = [(e.type, e.name) for e in handle.get_new_events()]
    assert (WRITE, "existing/one.txt") in names
    assert (CREATE, "later") in names
    assert (WRITE, "later/two.txt") in names
    assert not any("unseen" in name for _, name in names)
    handle.stop()


def test_what_cannot_be_watched(sandbox: Sandbox, agent: Running, tmp_path: Path) -> None:
    with pytest.raises(NotFoundException):
        sandbox.files.watch_dir("no-such-dir")
    sandbox.files.write("plain.txt", "x")
    with pytest.raises(SandboxException, match="not a directory"):
        sandbox.files.watch_dir("plain.txt")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    tmp_path.chmod(0o755)
    with pytest.raises(SandboxException, match="permission denied"):
        sandbox.files.watch_dir(str(private))
    as_root = sandbox.files.watch_dir(str(private), user="root")
    (private / "x").write_text("x")
    assert [e.name for e in as_root.get_new_events()] == ["x", "x"]  # created, written
    as_root.stop()
    del agent


def test_stopping_releases_the_watch(sandbox: Sandbox, agent: Running) -> None:
    sandbox.files.make_dir("w")
    handles = [sandbox.files.watch_dir("w", recursive=True) for _ in range(3)]
    assert inotify_fds(agent) == 3
    for h in handles:
        h.stop()
    assert inotify_fds(agent) == 0
    with pytest.raises(SandboxException):
        handles[0].get_new_events()


def test_streamed_events_with_entries(sandbox: Sandbox, agent: Running) -> None:
    sandbox.files.make_dir("streamed")

    async def watch() -> list[tuple[str, str, str | None]]:
        seen: list[tuple[str, str, str | None]] = []
        three = asyncio.Event()

        def on_event(e: FilesystemEvent) -> None:
            seen.append((e.type.value, e.name, e.entry and e.entry.owner))
            if len(seen) == 3:
                three.set()

        client = await async_sandbox()
        handle = await client.files.watch_dir("streamed", on_event=on_event, include_entry=True)
        await client.files.write("streamed/s.txt", "s")
        await asyncio.wait_for(three.wait(), 5)
        await handle.stop()
        return seen

    assert asyncio.run(watch()) == [
        ("create", "s.txt", "nobody"),
        ("chmod", "s.txt", "nobody"),
        ("write", "s.txt", "nobody"),
    ]
    deadline = time.monotonic() + 8  # the agent sends something at least every 3 s
    while inotify_fds(agent) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert inotify_fds(agent) == 0
    assert NOBODY.pw_uid == (agent.root / "streamed" / "s.txt").stat().st_uid


def test_a_quiet_stream_sends_keepalives(agent: Running) -> None:
    (agent.root / "quiet").mkdir()
    frames: list[dict[str, object]] = []
    with httpx.stream(
        "POST",
        agent.url + "/filesystem.Filesystem/WatchDir",
        content=envelope({"path": "quiet"}),
        headers={**STREAM, "keepalive-ping-interval": "1"},
        timeout=10,
    ) as r:
        for _, frame in envelopes(r):
            frames.append(frame)
            if len(frames) >= 3:
                break
    assert frames == [{"start": {}}, {"keepalive": {}}, {"keepalive": {}}]
