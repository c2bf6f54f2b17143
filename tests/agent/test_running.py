"""Commands under the table, in-process: exits without pidfds, and how long ends are kept."""

import errno
import os
import pwd
from pathlib import Path

import pytest
from workspace_agent import running
from workspace_agent._proto.process.process_pb import ProcessConfig
from workspace_agent.errors import AgentError
from workspace_agent.events import is_end
from workspace_agent.launch import Launch, spawn
from workspace_agent.running import Command, Table
from workspace_agent.users import User

ME = pwd.getpwuid(os.geteuid())
USER = User(ME.pw_name, ME.pw_uid, ME.pw_gid, (ME.pw_gid,), Path(ME.pw_dir))


def start(table: Table, script: str, tag: str | None = None) -> Command:
    launch = Launch(
        argv=("/bin/sh", "-c", script),
        env={"PATH": "/usr/bin:/bin"},
        cwd=Path("/"),
        user=USER,
        stdin=False,
        terminal=None,
    )
    return table.add(spawn(launch, privileged=False), ProcessConfig(cmd="/bin/sh"), tag, None)


async def test_exits_are_seen_without_pidfds(monkeypatch: pytest.MonkeyPatch) -> None:
    def unsupported(pid: int) -> int:
        del pid
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(os, "pidfd_open", unsupported)
    table = Table()
    command = start(table, "sleep 0.2; echo hi; exit 3")
    feed = command.attach()
    events = [await feed.get()]
    while not is_end(events[-1]):
        events.append(await feed.get())
    assert [e.event.field for e in events if e.event] == ["data", "end"]
    assert command.end is not None
    assert (command.end.exit_code, command.end.status) == (3, "exit status 3")
    assert table.running == {}


async def test_ended_commands_are_kept_only_so_many(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(running, "KEEP_ENDED", 3)
    table = Table()
    pids = []
    for n in range(5):
        command = start(table, "true", tag=f"job{n}")
        await command.task
        pids.append(command.pid)
    with pytest.raises(AgentError) as caught:
        table.find_any(pids[0])
    assert caught.value.message == f"process with pid {pids[0]} not found"
    assert table.find_any(pids[-1]).pid == pids[-1]
    assert table.find_any("job4").pid == pids[-1]
    with pytest.raises(AgentError):
        table.find_any("job1")


async def test_ended_commands_are_forgotten_after_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(running, "KEEP_ENDED_SECONDS", 0.0)
    table = Table()
    command = start(table, "true")
    await command.task
    with pytest.raises(AgentError):
        table.find_any(command.pid)
