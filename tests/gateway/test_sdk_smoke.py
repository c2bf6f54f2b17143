"""`scripts/sdk-smoke` against the local gateway, so the script platform engineers run can't rot."""

import os
import re
import subprocess
import sys

import pytest

from tests.gateway.sdk import gateways
from tests.support import ROOT

pytestmark = pytest.mark.e2e  # starts agents or gateways

SCRIPT = ROOT / "scripts" / "sdk-smoke"
STEPS = ["create", "command", "files", "set_timeout", "list", "pause", "connect", "kill"]

gateway = gateways.gateway  # `workspace-sandbox-gateway --local`, started once


def smoke(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    return subprocess.run(
        [sys.executable, SCRIPT],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def settings(gateway: gateways.Gateway, key: str) -> dict[str, str]:
    return {"E2B_API_KEY": key, "E2B_API_URL": gateway.url, "E2B_SANDBOX_URL": gateway.url}


def test_the_whole_cycle_passes_one_line_a_step(gateway: gateways.Gateway) -> None:
    done = smoke(settings(gateway, gateway.key))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"sdk-smoke against {gateway.url}, template 'base'"
    for name, line in zip([*STEPS, "unknown"], lines[1:-1], strict=True):
        assert re.fullmatch(rf"ok    {name} +\d+\.\d\d s  \S.*", line), line
    assert re.fullmatch(r"passed in \d+\.\d\d s", lines[-1])
    listed = subprocess.run(
        [sys.executable, "-c", "from e2b import Sandbox; print(len(Sandbox.list().next_items()))"],
        env={**os.environ, **settings(gateway, gateway.key)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout == "0\n"  # nothing left running


def test_a_refused_key_fails_the_run_in_lines_not_a_traceback(gateway: gateways.Gateway) -> None:
    done = smoke(settings(gateway, "e2b_" + "0" * 40))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[1].startswith("FAIL  create")
    assert "AuthenticationException: 401" in lines[1]
    assert lines[2:9] == [f"skip  {name}" for name in STEPS[1:]]
    assert lines[-1].startswith("2 failed in ")
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"E2B_API_URL": "http://127.0.0.1:1"}, "sdk-smoke: set E2B_API_KEY"),
        ({"E2B_API_KEY": "e2b_" + "0" * 40}, "sdk-smoke: set E2B_DOMAIN (or E2B_API_URL)"),
    ],
)
def test_without_settings_it_calls_nobody(env: dict[str, str], message: str) -> None:
    done = smoke(env)
    assert done.returncode == 2
    assert done.stderr.strip().startswith(message)
    assert done.stdout == ""
