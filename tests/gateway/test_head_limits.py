"""Request heads before any key is asked for: bounded in size and in time, in a real gateway.

A `workspace-sandbox-gateway --local` subprocess on loopback; its memory is its resident size.
"""

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from workspace_gateway.http_protocol import MAX_HEAD_BYTES

from tests.gateway.test_main import GATEWAY
from tests.ports import free_port

pytestmark = pytest.mark.e2e  # starts agents or gateways

KEY = "e2b_" + "0" * 40
CONNECTIONS = 16
FLOOD_BYTES = 8 << 20  # each connection's endless header, as far as the test goes
CHUNK = 64 * 1024
HEAD_TIMEOUT = 1.0


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def gateway() -> Iterator[tuple[int, int]]:
    """The gateway's port and process ID."""
    port = free_port()
    process = subprocess.Popen(
        [
            *(GATEWAY, "--local", "--address", f"127.0.0.1:{port}", "--api-key", KEY),
            *("--log-level", "warning", "--head-timeout", str(HEAD_TIMEOUT)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/health")
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(timeout=15)


def connect(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=5)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    return conn


def answer(conn: socket.socket) -> bytes:
    """What the gateway sent before it closed the connection (b"" if it only closed it)."""
    got = b""
    with contextlib.suppress(OSError):
        while chunk := conn.recv(65536):
            got += chunk
    return got


def test_endless_heads_are_refused_431_and_the_gateway_s_memory_stays_flat(
    gateway: tuple[int, int],
) -> None:
    port, pid = gateway
    before = rss(pid)
    conns = [connect(port) for _ in range(CONNECTIONS)]
    for n, conn in enumerate(conns):
        # Half one endless header, half endless small headers; a long URL the first.
        start = b"GET /" + b"a" * 1000 if n == 0 else b"GET /"
        conn.sendall(start + b" HTTP/1.1\r\nHost: x\r\nX-Long: ")
    open_ = set(range(CONNECTIONS))
    peak = before
    sent = 0
    filler = b"h" * CHUNK
    many = b"".join(b"X-%05d: v\r\n" % i for i in range(CHUNK // 12))
    while open_ and sent < FLOOD_BYTES:
        for n in sorted(open_):
            try:
                conns[n].sendall(filler if n % 2 else many)
            except OSError:
                open_.discard(n)
        sent += CHUNK
        peak = max(peak, rss(pid))
    assert open_ == set(), f"still open after {sent >> 20} MiB each: {sorted(open_)}"
    assert sent < FLOOD_BYTES
    for conn in conns:
        got = answer(conn)
        conn.close()
        assert got == b"" or got.startswith(b"HTTP/1.1 431 "), got[:100]
    assert peak - before < 32 << 20, f"{(peak - before) >> 20} MiB more"


def test_a_head_that_never_ends_is_closed_408_after_the_head_timeout(
    gateway: tuple[int, int],
) -> None:
    port, _ = gateway
    began = time.monotonic()
    silent = [connect(port) for _ in range(CONNECTIONS // 2)]
    slow = [connect(port) for _ in range(CONNECTIONS // 2)]
    for conn in slow:
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    for conn in silent + slow:
        got = answer(conn)
        conn.close()
        assert got.startswith(b"HTTP/1.1 408 "), got[:100]
        assert got.endswith(b'"message": "the request head did not arrive within 1 s"}')
    assert HEAD_TIMEOUT <= time.monotonic() - began < HEAD_TIMEOUT + 5


def test_an_idle_keep_alive_connection_outlives_the_head_timeout(gateway: tuple[int, int]) -> None:
    port, _ = gateway
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        first = client.get("/v2/sandboxes", headers={"X-API-Key": KEY})
        time.sleep(HEAD_TIMEOUT * 2.5)
        again = client.get("/v2/sandboxes", headers={"X-API-Key": KEY})
    assert (first.status_code, again.status_code) == (200, 200)
    assert first.extensions["network_stream"] is again.extensions["network_stream"]


def test_a_head_just_under_the_limit_is_served(gateway: tuple[int, int]) -> None:
    port, _ = gateway
    padding = "p" * (MAX_HEAD_BYTES - 1024)
    got = httpx.get(
        f"http://127.0.0.1:{port}/v2/sandboxes", headers={"X-API-Key": KEY, "X-Pad": padding}
    )
    assert got.status_code == 200
    over = httpx.get(
        f"http://127.0.0.1:{port}/v2/sandboxes",
        headers={"X-API-Key": KEY, "X-Pad": padding + "p" * 2048},
    )
    assert over.status_code == 431
    assert over.json() == {
        "code": 431,
        "message": f"the request head is larger than {MAX_HEAD_BYTES} bytes",
    }
