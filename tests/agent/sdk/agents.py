"""The agent as users meet it: a `workspace-sandbox-agent` process, driven by the real SDK.

Tests in this folder import nothing but pytest, httpx and `e2b`, so that they run unchanged
under an older SDK in a venv of its own (`tests/agent/test_sdk_versions.py`); `AGENT` names the
agent's executable there.

The SDK's debug mode (`E2B_DEBUG=true`) talks to an agent directly, skipping the control API;
`E2B_SANDBOX_URL` points it at this test's agent, on a port of its own. The agent runs as root,
as in a VM, with `nobody` as its default user and a fresh workspace that `nobody` owns; the
`pod_agent` fixture runs it as `nobody`, as in a pod. Both need root to set up.

An agent serves no one until `/init` has set its access token, so each is started and then
`/init`ed with `TOKEN`, as the gateway does; `Running.get`/`post` and the SDK fixtures send it,
and raw requests add `AUTH`. Debug mode never learns a token, so the SDK's object is built the
way `create` builds it from the control API's answer.
"""

import json
import os
import pwd
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2b import AsyncSandbox, ConnectionConfig, Sandbox

from tests.ports import free_port

AGENT = Path(os.environ.get("AGENT") or Path(sys.executable).with_name("workspace-sandbox-agent"))
DEFAULT_USER = "nobody"
NOBODY = pwd.getpwnam(DEFAULT_USER)
ROOT = os.geteuid() == 0

needs_root = pytest.mark.skipif(not ROOT, reason="the agent acts as other users only as root")
TOKEN = "agent-test-token-0123456789abcdef"  # noqa: S105  # every test agent's, set by /init
AUTH = {"X-Access-Token": TOKEN}


# Connect's streaming framing (flags, big-endian length, JSON), for tests below the SDK.
STREAM = {"content-type": "application/connect+json", "connect-protocol-version": "1", **AUTH}
Envelope = tuple[int, dict[str, Any]]


def envelope(message: dict[str, Any], flags: int = 0) -> bytes:
    data = json.dumps(message).encode()
    return struct.pack(">BI", flags, len(data)) + data


def envelopes(response: httpx.Response) -> Iterator[Envelope]:
    buffer = b""
    for chunk in response.iter_bytes():
        buffer += chunk
        while len(buffer) >= 5:
            flags, length = struct.unpack(">BI", buffer[:5])
            if len(buffer) < 5 + length:
                break
            yield flags, json.loads(buffer[5 : 5 + length])
            buffer = buffer[5 + length :]
    assert buffer == b"", "the stream ended inside an envelope"


def gone(pid: int, within: float = 5.0) -> bool:
    """Whether the process has left the process table (it runs on this machine)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False


@dataclass
class Running:
    url: str
    root: Path
    process: subprocess.Popen[bytes]
    token: str | None = TOKEN
    """Sent in `X-Access-Token` by `get` and `post`, unless their headers name another."""

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.get(self.url + path, **self._authorised(kwargs))

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.post(self.url + path, **self._authorised(kwargs))

    @property
    def anonymous(self) -> "Running":
        """The same agent, asked without the token."""
        return replace(self, token=None)

    def _authorised(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.token is None:
            return kwargs
        return {**kwargs, "headers": {"X-Access-Token": self.token, **kwargs.get("headers", {})}}


# In a pod the agent is the pod's user from its first instruction. Here its venv and interpreter
# may sit where that user can't read (pyenv under /root, a clone in a 0700 temporary folder), so
# the pod's agent starts as root, imports the agent and what uvicorn loads when it starts, and
# gives root up for good before serving: from then on it can do exactly what a pod's agent can.
_AS_USER = """
import concurrent.futures.thread, importlib, os, pkgutil, sys
import uvicorn, workspace_agent
for found in pkgutil.walk_packages(workspace_agent.__path__, "workspace_agent."):
    importlib.import_module(found.name)
uvicorn.Config(lambda *_: None, http="h11", lifespan="off").load()
uid, gid = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([])
os.setresgid(gid, gid, gid)
os.setresuid(uid, uid, uid)
assert os.getresuid() == (uid, uid, uid) and os.getgroups() == []
from workspace_agent.main import main
main(sys.argv[3:])
"""


def start(
    root: Path,
    *,
    user: str = DEFAULT_USER,
    as_uid: int | None = None,
    wrapper: tuple[str, ...] = (),
    init: bool = True,
    options: tuple[str, ...] = (),
) -> Running:
    """The agent on a free port, once it answers, `/init`ed with `TOKEN` unless `init` is false.

    `wrapper` runs first and execs the agent; `options` go on its command line.
    """
    port = free_port()
    args = [
        "--address",
        f"127.0.0.1:{port}",
        "--root",
        str(root),
        "--user",
        user,
        "--log-level",
        "warning",
        *options,
    ]
    if as_uid is None:
        command = [*wrapper, str(AGENT), *args]
    else:
        python = AGENT.with_name("python")
        command = [str(python), "-c", _AS_USER, str(as_uid), str(NOBODY.pw_gid), *args]
    process = subprocess.Popen(command)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the agent exited with {process.returncode} before answering")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 204:
                running = Running(url, root, process)
                return initialise(running) if init else running.anonymous
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    pytest.fail("the agent did not answer /health within 15 s")


def initialise(running: Running) -> Running:
    r = httpx.post(running.url + "/init", json={"accessToken": TOKEN}, timeout=10)
    assert r.status_code == 204, r.text
    return running


def stop(running: Running) -> None:
    running.process.terminate()
    try:
        running.process.wait(10)
    except subprocess.TimeoutExpired:
        running.process.kill()
        running.process.wait()


@pytest.fixture
def workspace() -> Iterator[Path]:
    """A workspace root the default user owns, outside pytest's root-only temp folders."""
    path = Path(tempfile.mkdtemp(prefix="agent-workspace-"))
    if ROOT:
        os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    path.chmod(0o750)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def agent(workspace: Path) -> Iterator[Running]:
    """The agent as in a VM: root, acting as any user, `nobody` by default."""
    if not ROOT:
        pytest.skip("the VM agent runs as root")
    running = start(workspace)
    yield running
    stop(running)


@pytest.fixture
def pod_agent(workspace: Path) -> Iterator[Running]:
    """The agent as in a pod: the pod's fixed unprivileged user and nothing else."""
    if not ROOT:
        pytest.skip("starting the agent as another user needs root")
    running = start(workspace, as_uid=NOBODY.pw_uid)
    yield running
    stop(running)


def debug_env(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    for name in list(os.environ):
        if name.startswith("E2B_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", url)


def holding_token(sandbox: Sandbox, token: str = TOKEN) -> Sandbox:
    """`sandbox` as a secured sandbox's create leaves it: holding the access token."""
    return Sandbox(
        sandbox_id=sandbox.sandbox_id,
        sandbox_domain=sandbox.sandbox_domain,
        envd_version=sandbox._envd_version,  # what create would have passed
        envd_access_token=token,
        traffic_access_token=None,
        connection_config=ConnectionConfig(extra_sandbox_headers={"X-Access-Token": token}),
    )


async def async_sandbox(token: str = TOKEN) -> AsyncSandbox:
    """The SDK's `AsyncSandbox`, holding the access token as `holding_token` does."""
    created = await AsyncSandbox.create()
    return AsyncSandbox(
        sandbox_id=created.sandbox_id,
        sandbox_domain=created.sandbox_domain,
        envd_version=created._envd_version,
        envd_access_token=token,
        traffic_access_token=None,
        connection_config=ConnectionConfig(extra_sandbox_headers={"X-Access-Token": token}),
    )


@pytest.fixture
def sandbox(agent: Running, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    """The real SDK's `Sandbox`, connected to the VM-style agent."""
    debug_env(monkeypatch, agent.url)
    return holding_token(Sandbox.create())


@pytest.fixture
def pod_sandbox(pod_agent: Running, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    """The real SDK's `Sandbox`, connected to the pod-style agent."""
    debug_env(monkeypatch, pod_agent.url)
    return holding_token(Sandbox.create())
