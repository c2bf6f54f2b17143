"""What hostile code in the sandbox, or a caller, can do to the agent itself.

Code in the sandbox runs as the default user and names files as it likes, bytes that aren't
UTF-8 included; a caller can send bodies and messages of any shape. Neither may break the agent
for everyone else, nor hold its event loop.
"""

import gzip
import os
import socket
import struct
import threading
import time
from pathlib import Path

import httpx
import pytest
from workspace_agent.process import ProcessService
from workspace_agent.server import MAX_PROCESS_MESSAGE, build_app, is_local
from workspace_agent.state import Agent
from workspace_agent.users import Users

from tests.agent.sdk.agents import (
    NOBODY,
    STREAM,
    Running,
    envelope,
    envelopes,
)

pytestmark = pytest.mark.e2e  # starts agents or gateways

MIB = 1 << 20
RPC = {"content-type": "application/json", "connect-protocol-version": "1"}


def plant_bytes(agent: Running, name: bytes, *, link_to: bytes | None = None) -> None:
    """A file (or a link) as the default user would make it, named by raw bytes."""
    path = os.path.join(bytes(agent.root), name)
    if link_to is None:
        with open(path, "wb"):
            pass
    else:
        os.symlink(link_to, path)
    os.lchown(path, NOBODY.pw_uid, NOBODY.pw_gid)


def list_names(agent: Running, path: str = ".") -> list[str]:
    r = agent.post(
        "/filesystem.Filesystem/ListDir",
        json={"path": path},
        headers={"connect-protocol-version": "1"},
    )
    assert r.status_code == 200, r.text
    return sorted(e["name"] for e in r.json().get("entries", []))


def test_names_that_are_not_utf8_do_not_break_a_listing(agent: Running) -> None:
    (agent.root / "good.txt").write_text("x")
    plant_bytes(agent, b"bad\xff.txt")
    plant_bytes(agent, b"link", link_to=b"/nowhere/\xfe")
    assert list_names(agent) == ["bad\ufffd.txt", "good.txt", "link"]
    r = agent.post(
        "/filesystem.Filesystem/Stat",
        json={"path": "link"},
        headers={"connect-protocol-version": "1"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["entry"]["symlinkTarget"] == "/nowhere/\ufffd"


def test_a_name_that_is_not_utf8_does_not_end_a_watch(agent: Running) -> None:
    (agent.root / "w").mkdir()
    os.chown(agent.root / "w", NOBODY.pw_uid, NOBODY.pw_gid)
    names: list[str] = []

    def make_files() -> None:
        time.sleep(0.5)
        with open(os.path.join(bytes(agent.root), b"w", b"odd\xff"), "wb"):
            pass
        (agent.root / "w" / "after.txt").write_text("x")

    maker = threading.Thread(target=make_files)
    with httpx.stream(
        "POST",
        agent.url + "/filesystem.Filesystem/WatchDir",
        content=envelope({"path": "w"}),
        headers=STREAM,
        timeout=10,
    ) as r:
        maker.start()
        for flags, frame in envelopes(r):
            assert flags == 0, frame  # an end-of-stream frame here is the watch failing
            if "filesystem" in frame:
                names.append(frame["filesystem"]["name"])
                if frame["filesystem"]["name"] == "after.txt":
                    break
    maker.join()
    assert "odd\ufffd" in names


def peak_rss(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def test_a_gzip_bomb_of_a_process_message_is_refused_before_it_inflates(agent: Running) -> None:
    """256 MiB of zeros is 256 KiB gzipped: the agent must stop inflating at its limit.

    zlib grows its output buffer by copying, so inflating up to the limit may briefly take twice
    the limit; the whole bomb is four times the limit.
    """
    agent.post("/process.Process/List", json={}, headers={"connect-protocol-version": "1"})
    before = peak_rss(agent.process.pid)
    bomb = gzip.compress(bytes(4 * MAX_PROCESS_MESSAGE), compresslevel=9)
    r = agent.post(
        "/process.Process/SendInput",
        content=bomb,
        headers={
            "content-type": "application/json",
            "content-encoding": "gzip",
            "connect-protocol-version": "1",
        },
        timeout=60,
    )
    assert r.json()["code"] == "resource_exhausted", r.text
    grown = peak_rss(agent.process.pid) - before
    assert grown < 2 * MAX_PROCESS_MESSAGE + 32 * MIB, (
        f"the agent's peak memory grew by {grown / MIB:.1f} MiB"
    )


def test_a_stream_message_longer_than_the_limit_is_refused_from_its_prefix(
    agent: Running,
) -> None:
    """A prefix announcing 1 GiB is refused at once, not buffered while the bytes trickle in."""
    prefix = struct.pack(">BI", 0, 1 << 30)
    with httpx.stream(
        "POST",
        agent.url + "/process.Process/StreamInput",
        content=iter([prefix, b"{" * 1024]),
        headers=STREAM,
        timeout=10,
    ) as r:
        frames = list(envelopes(r))
    assert frames[-1][1]["error"]["code"] == "resource_exhausted", frames


# In a VM the agent is root and code in the sandbox is not: it must not be a way in.


def remote_only(client: tuple[str, int]) -> httpx.AsyncClient:
    agent = Agent(root=Path("/"), users=Users(Path("/"), "nobody"), remote_only=True)
    app = build_app(agent, ProcessService(agent))
    transport = httpx.ASGITransport(app=app, client=client)
    return httpx.AsyncClient(transport=transport, base_url="http://a")


def own_address() -> str:
    """An address of this machine that isn't loopback (where a route out starts)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # TEST-NET: no packet is sent
        return str(s.getsockname()[0])


LOCAL_CALLS = [
    ("POST", "/process.Process/List", {}),
    ("POST", "/filesystem.Filesystem/Stat", {"path": "/"}),
    ("POST", "/init", {"accessToken": "mine", "defaultUser": "root"}),
    ("GET", "/files", None),
    ("GET", "/nowhere", None),
]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "own"])
async def test_with_remote_only_a_local_peer_gets_nothing_but_health(host: str) -> None:
    """Before `/init` there is no token: a local user would get root by asking first."""
    address = own_address() if host == "own" else host
    async with remote_only((address, 40000)) as client:
        assert (await client.get("/health")).status_code == 204
        for method, path, body in LOCAL_CALLS:
            r = await client.request(
                method, path, json=body, params={"path": "/etc/shadow"}, headers=RPC
            )
            assert r.status_code == 403, (path, r.text)


async def test_with_remote_only_a_remote_peer_is_served() -> None:
    async with remote_only(("192.0.2.7", 40000)) as client:  # TEST-NET: nobody's address
        r = await client.post("/init", json={"accessToken": "t"})
        assert r.status_code == 204
        r = await client.post(
            "/filesystem.Filesystem/Stat",
            json={"path": "/"},
            headers={**RPC, "X-Access-Token": "t"},
        )
        assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),  # a dual-stack listener's IPv4 loopback peer
        ("::ffff:192.0.2.7", False),
        ("192.0.2.7", False),
        ("2001:db8::7", False),
        ("not-an-address", True),
    ],
)
def test_which_peers_are_local(host: str, local: bool) -> None:
    assert is_local((host, 40000)) is local
