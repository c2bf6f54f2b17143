"""The npm `e2b` and `@e2b/code-interpreter` SDKs (pinned in tests/gateway/js) through
`workspace-sandbox-gateway --local`.

Node runs tests/gateway/js/cycle.mjs and interpreter.mjs against the gateway; `scripts/js-sdk install` puts the
SDK in the test cache (CI runs it). Without Node or the SDK this is skipped naming the
command, and with `CI` set it fails.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.sdk.gateways import (  # `gateway`: the fixture
    Gateway,
    gateway,  # noqa: F401
    sdk_environment,
)

pytestmark = pytest.mark.e2e  # starts agents or gateways

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "tests" / "gateway" / "js"


def installed() -> Path:
    node = shutil.which("node")
    found = subprocess.run(
        [str(ROOT / "scripts" / "js-sdk"), "path"], capture_output=True, text=True, check=False
    )
    if node is None or found.returncode != 0:
        message = "the JS SDK tests need node and `scripts/js-sdk install`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return Path(found.stdout.strip())


def run(script: str, gateway: Gateway, folder: Path) -> dict[str, Any]:  # noqa: F811  # not the fixture
    """Run one of tests/gateway/js's scripts with Node against `gateway`: what it saw."""
    sdk = installed()
    (folder / "node_modules").symlink_to(sdk / "node_modules")
    shutil.copy(JS / "package.json", folder)
    shutil.copy(JS / script, folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env |= sdk_environment(gateway)
    env["DENO_FOLDER"] = str(sdk / "node_modules" / "@deno" / "linux-x64-glibc")
    ran = subprocess.run(
        ["node", script],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-4000:]
    seen: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return seen


def test_the_npm_sdk_s_core_cycle(
    gateway: Gateway,  # noqa: F811  # the fixture
    tmp_path: Path,
) -> None:
    seen = run("cycle.mjs", gateway, tmp_path)
    assert seen["stdout"].splitlines()[0] == "hello"
    assert seen["read"] == "written by node"
    assert seen["entries"] == ["from-js.txt"]
    assert seen["host"] is True
    assert seen["preview"] == [200, "written by node"]
    both = sorted([seen["id"], seen["second"]])
    assert seen["both"] == seen["byTemplate"] == both
    assert seen["otherTemplate"] == []
    assert seen["startedAfter"] == [seen["second"]]
    assert seen["metrics"]["cpuCount"] >= 1
    assert seen["metrics"]["memTotal"] > 0
    assert seen["snapshot"].startswith(f"snapshot-{seen['id']}-snap-")
    assert seen["restored"] == "written by node"
    assert seen["deleted"] == [True, False]
    assert seen["killed"] == [True, True, False]


def test_the_npm_code_interpreter_sdk(
    gateway: Gateway,  # noqa: F811  # the fixture
    tmp_path: Path,
) -> None:
    """`@e2b/code-interpreter` on its default template: state, a chart, an error, a timeout
    that interrupts, JavaScript in Deno's kernel, and a context's whole life."""
    seen = run("interpreter.mjs", gateway, tmp_path)
    assert seen == {
        "template": "code-interpreter-v1",
        "kept": "42",
        "stdout": [["out\n"], ["out\n"]],
        "png": True,
        "error": ["ZeroDivisionError", "division by zero", True],
        "interrupted": True,
        "js": "42",
        "listed": True,
        "restarted": "NameError",
        "removed": True,
    }
