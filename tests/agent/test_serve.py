"""The agent's process: it starts, answers /health, and refuses bad arguments in one line."""

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from workspace_agent import ENVD_VERSION

from tests.agent.sdk.agents import (
    AGENT,
    STREAM,
    Running,
    envelope,
    envelopes,
    needs_root,
    start,
    stop,
)

pytestmark = pytest.mark.e2e  # starts agents or gateways


def test_health_answers_204_with_the_envd_version(agent: Running) -> None:
    r = agent.get("/health")
    assert r.status_code == 204
    assert r.headers["x-envd-version"] == ENVD_VERSION == "0.6.4"


def test_a_missing_root_is_one_line() -> None:
    done = subprocess.run(
        [str(AGENT), "--root", "/nonexistent/workspace"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert (
        done.stderr == "workspace-sandbox-agent: --root /nonexistent/workspace is not a directory\n"
    )


@needs_root
def test_an_unknown_default_user_is_one_line(workspace: Path) -> None:
    done = subprocess.run(
        [str(AGENT), "--root", str(workspace), "--user", "no-such-user-here"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "--user:" in done.stderr
    assert "no-such-user-here" in done.stderr
    assert "Traceback" not in done.stderr


# Started by a parent that ignores SIGCHLD: an ignored SIGCHLD survives exec, and would let the
# kernel reap every command before the agent reads its exit status.
_IGNORING_PARENT = """
import os, signal, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_exit_codes_survive_a_parent_that_ignores_sigchld(workspace: Path) -> None:
    running = start(workspace, wrapper=(sys.executable, "-c", _IGNORING_PARENT))
    try:
        body = {"process": {"cmd": "/bin/sh", "args": ["-c", "exit 3"]}, "stdin": False}
        with httpx.stream(
            "POST",
            running.url + "/process.Process/Start",
            content=envelope(body),
            headers=STREAM,
            timeout=30,
        ) as answer:
            events = [m for _, m in envelopes(answer)]
        assert events[-2]["event"]["end"] == {
            "exitCode": 3,
            "exited": True,
            "status": "exit status 3",
            "error": "exit status 3",
        }
    finally:
        stop(running)
