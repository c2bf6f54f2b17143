"""The gateway as users meet it: `workspace-sandbox-gateway --local`, driven by the real SDK.

Tests in this folder import nothing but the standard library, pytest, httpx and `e2b`, so that
they run unchanged under an older SDK in a venv of its own (`tests/agent/test_sdk_versions.py`);
`GATEWAY` names the gateway's executable there. The SDK reaches the gateway over plain HTTP:
`E2B_API_URL` for the control API, `E2B_SANDBOX_URL` for every sandbox (routed by header).
"""

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from e2b import Sandbox

from tests.ports import free_port

GATEWAY = Path(
    os.environ.get("GATEWAY") or Path(sys.executable).with_name("workspace-sandbox-gateway")
)
API_KEY = "e2b_" + "0123456789abcdef" * 2 + "01234567"


@dataclass
class Gateway:
    url: str
    key: str
    process: "subprocess.Popen[bytes]"


@pytest.fixture(scope="session")
def gateway() -> Iterator[Gateway]:
    port = free_port()
    command = [str(GATEWAY), "--local", "--address", f"127.0.0.1:{port}", "--api-key", API_KEY]
    process = subprocess.Popen([*command, "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while True:
        if process.poll() is not None:
            pytest.fail(f"the gateway exited with {process.returncode} before answering")
        try:
            httpx.get(url + "/sandboxes", timeout=1)
            break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                process.kill()
                pytest.fail("the gateway did not answer within 15 s")
            time.sleep(0.05)
    yield Gateway(url, API_KEY, process)
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail("the gateway did not stop within 15 s of SIGTERM")


def sdk_environment(gateway: Gateway) -> dict[str, str]:
    """What points an SDK (Python's or Node's) at `gateway`, and no other `E2B_` setting."""
    return {
        "E2B_API_KEY": gateway.key,
        "E2B_API_URL": gateway.url,
        "E2B_SANDBOX_URL": gateway.url,
    }


def point_sdk_at(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("E2B_"):
            monkeypatch.delenv(name)
    for name, value in sdk_environment(gateway).items():
        monkeypatch.setenv(name, value)


@pytest.fixture(autouse=True)
def sdk_env(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    point_sdk_at(gateway, monkeypatch)


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    created = Sandbox.create()
    yield created
    created.kill()


@pytest.fixture
def gateway_url(gateway: Gateway) -> str:
    return gateway.url


@pytest.fixture
def key(gateway: Gateway) -> str:
    return gateway.key
