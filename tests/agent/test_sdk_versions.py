"""The SDK tests again, under the last `e2b` release before the v2 routes (2.50.0).

Users upgrade their SDK on their own schedule, and 2.50.0 differs from the dev extra's
2.63.0 in what matters here: another connectrpc (0.11), another protobuf runtime, an
httpx-based file client. One venv can't hold both SDKs, so 2.50.0 gets a venv of its own,
kept inside this venv (built once, then reused), and runs `tests/agent/sdk` against the agent
of this venv and `tests/gateway/sdk` against its gateway. The tests there import only the
standard library, pytest, httpx and `e2b` (and `cryptography`, for the TLS test) for this
reason.
"""

import hashlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # starts agents or gateways

OLD_SDK = "e2b==2.50.0"
AGENT = Path(sys.executable).with_name("workspace-sandbox-agent")
GATEWAY = Path(sys.executable).with_name("workspace-sandbox-gateway")
# Each folder with the executable its conftest reads from the environment.
SDK_TESTS = {
    "agent": (ROOT / "tests" / "agent" / "sdk", {"AGENT": str(AGENT)}),
    "gateway": (ROOT / "tests" / "gateway" / "sdk", {"GATEWAY": str(GATEWAY)}),
}


def _pins(*names: str) -> list[str]:
    """The dev extra's exact pins for the test tools, so both runs use the same pytest."""
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = [p.split(";")[0].split("#")[0].strip() for p in dev["dev"]]
    found = [p for p in pins if p.split("==")[0] in names]
    assert len(found) == len(names), f"the dev extra no longer pins all of {names}"
    return found


def _old_sdk_venv() -> Path:
    # cryptography makes the TLS test's certificates. The venv is named for what it holds, so
    # a change to this list builds a new one rather than reusing one without the change.
    packages = [OLD_SDK, *_pins("pytest", "pytest-asyncio", "httpx", "cryptography")]
    name = hashlib.sha256(" ".join(packages).encode()).hexdigest()[:8]
    venv = Path(sys.prefix) / "sdk-venvs" / f"{OLD_SDK.replace('==', '-')}-{name}"
    python = venv / "bin" / "python"
    if python.exists():
        return python
    # Built beside its final place and moved there whole, so no half-built venv is reused.
    partial = venv.with_name(f"{venv.name}.{os.getpid()}")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", partial], check=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            partial / "bin" / "python",
            "install",
            "--quiet",
            "--no-compile",
            *packages,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.fail(f"pip could not install {OLD_SDK}: {done.stderr.strip()[-2000:]}")
    try:
        partial.rename(venv)
    except OSError:  # another run built it first
        pass
    return python


@pytest.mark.parametrize("service", sorted(SDK_TESTS))
def test_the_sdk_tests_pass_under_e2b_2_50(service: str) -> None:
    folder, executable = SDK_TESTS[service]
    python = _old_sdk_venv()
    version = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('e2b'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version == OLD_SDK.split("==")[1]
    # Only the SDK folder's conftest: the suite's own needs packages the old venv lacks.
    done = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            str(folder),
            "--confcutdir",
            str(folder),
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
            "--no-header",
        ],
        cwd=ROOT,
        env={**os.environ, **executable},
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"under {OLD_SDK}:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    assert " passed" in summary
    assert " failed" not in summary
