"""The agent's process: it starts, answers /health, and refuses bad arguments in one line."""

import subprocess
from pathlib import Path

from tests.agent.sdk.conftest import AGENT, Running, needs_root


def test_health_answers_204_with_the_envd_version(agent: Running) -> None:
    r = agent.get("/health")
    assert r.status_code == 204
    assert r.headers["x-envd-version"] == "0.5.7"


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
