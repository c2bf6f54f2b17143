"""As a pod's first process, the agent reaps what commands leave behind.

The agent runs as PID 1 of a PID namespace of its own (`unshare`), as it does in a container:
a command's background child is re-parented to it when the command ends, and must not stay a
zombie once it exits.
"""

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2b import CommandExitException, Sandbox

from tests.agent.sdk.agents import (
    AGENT,
    Running,
    debug_env,
    holding_token,
    initialise,
    stop,
)
from tests.ports import free_port

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"
    ),
]


@pytest.fixture
def first_process(workspace: Path) -> Iterator[Running]:
    port = free_port()
    process = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
         str(AGENT), "--address", f"127.0.0.1:{port}", "--root", str(workspace),
         "--user", "nobody", "--log-level", "warning"]
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == httpx.codes.NO_CONTENT:
                break
        except httpx.TransportError:
            time.sleep(0.05)
    running = initialise(Running(url, workspace, process))
    yield running
    stop(running)


def _zombies(sbx: Sandbox) -> list[str]:
    # Fields after the command name: state, parent. The listing itself is a live command.
    listing = sbx.commands.run(
        "for f in /proc/[0-9]*/stat; do cat $f; echo; done 2>/dev/null", user="root"
    ).stdout
    return [
        line for line in listing.splitlines() if line and line.rsplit(")", 1)[1].split()[0] == "Z"
    ]


def test_orphans_of_commands_are_reaped(
    first_process: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    debug_env(monkeypatch, first_process.url)
    sbx = holding_token(Sandbox.create())
    assert sbx.commands.run("echo $$").stdout.strip() != "1"
    assert (
        sbx.commands.run("cat /proc/1/cmdline | tr '\\0' ' '").stdout.count(
            "workspace-sandbox-agent"
        )
        == 1
    )
    # Each command leaves a child behind that outlives it and then exits.
    for _ in range(5):
        sbx.commands.run("(sleep 0.2 &) ; exit 0")
    time.sleep(0.5)
    deadline = time.monotonic() + 5
    while (left := _zombies(sbx)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []
    # Commands of its own still get their exit status, not the reaper's.
    with pytest.raises(CommandExitException) as exited:
        sbx.commands.run("sleep 0.3; exit 3")
    assert exited.value.exit_code == 3
