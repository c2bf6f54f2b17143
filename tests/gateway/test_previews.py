"""Previews through `workspace-sandbox-gateway --local`: a server the SDK starts in a sandbox,
reached over HTTP and WebSocket by its port, as a browser reaches E2B's `get_host(port)`."""

import asyncio
import hashlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from e2b import Sandbox
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.gateway.sdk.gateways import (  # noqa: F401  # the fixture
    Gateway,
    gateway,
    point_sdk_at,
)
from tests.ports import free_port

pytestmark = pytest.mark.e2e  # starts agents or gateways

DOMAIN = "e2b.localhost"  # the gateway's default --domain
SERVER = r"""
import asyncio, hashlib, http.server, json, os, threading
from websockets.asyncio.server import serve


class Echo(http.server.BaseHTTPRequestHandler):
    def answer(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.answer({"path": self.path, "headers": [[k.lower(), v] for k, v in self.headers.items()]})

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.answer({"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()})

    def log_message(self, *args):
        pass


async def echo(ws):
    async for message in ws:
        if message == "close 4001":
            await ws.close(4001, "asked to")
            return
        await ws.send(ws.request.headers["Host"] if message == "host?" else message)


def redirect(connection, request):
    # A sandbox that answers the handshake with a redirect elsewhere (TRAP: the test's).
    if request.path == "/redirect":
        response = connection.respond(302, "")
        response.headers["Location"] = "ws://127.0.0.1:TRAP/"
        return response
    return None


async def main():
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    async with serve(
        echo, "127.0.0.1", 0, subprotocols=["chat"], max_size=None, process_request=redirect
    ) as ws:
        ports = {"http": web.server_port, "ws": ws.sockets[0].getsockname()[1]}
        with open("ports.json~", "w") as f:
            json.dump(ports, f)
        os.rename("ports.json~", "ports.json")
        await asyncio.Future()


asyncio.run(main())
"""


@pytest.fixture
def trap() -> Iterator[socket.socket]:
    """A listener the sandbox's server redirects WebSockets to: nothing may connect to it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)  # noqa: FBT003  # socket's own signature
        yield listener


@pytest.fixture
def served(
    gateway: Gateway,  # noqa: F811  # the imported fixture
    monkeypatch: pytest.MonkeyPatch,
    trap: socket.socket,
) -> Iterator[tuple[Sandbox, dict[str, int]]]:
    """A sandbox running an HTTP echo server and a WebSocket echo server, and their ports."""
    point_sdk_at(gateway, monkeypatch)
    sandbox = Sandbox.create()
    yield sandbox, start_servers(sandbox, trap)
    sandbox.kill()


def start_servers(sandbox: Sandbox, trap: socket.socket) -> dict[str, int]:
    """Start the echo servers in `sandbox`: their ports."""
    sandbox.files.write("previews_server.py", SERVER.replace("TRAP", str(trap.getsockname()[1])))
    # The test's own Python, which has `websockets`: the local mode's sandbox is this machine.
    sandbox.commands.run(f"{sys.executable} previews_server.py", background=True)
    deadline = time.monotonic() + 30
    while not sandbox.files.exists("ports.json"):
        assert time.monotonic() < deadline, "the servers in the sandbox never started"
        time.sleep(0.1)
    ports: dict[str, int] = json.loads(sandbox.files.read("ports.json"))
    return ports


def test_a_private_sandbox_s_previews_take_its_traffic_token(
    gateway: Gateway,  # noqa: F811  # the imported fixture
    monkeypatch: pytest.MonkeyPatch,
    trap: socket.socket,
) -> None:
    """`network={"allow_public_traffic": False}`: E2B's private previews. The token the create
    answered opens them, as `e2b-traffic-access-token`, and never reaches the app."""
    point_sdk_at(gateway, monkeypatch)
    sandbox = Sandbox.create(network={"allow_public_traffic": False})
    try:
        ports = start_servers(sandbox, trap)
        token = sandbox.traffic_access_token
        assert token
        url, host = f"{gateway.url}/page", host_of(sandbox, ports["http"])
        refused = httpx.get(url, headers={"Host": host})
        assert refused.status_code == 403
        assert "e2b-traffic-access-token" in refused.json()["message"]
        access = {"Host": host, "X-Access-Token": sandbox._envd_access_token or ""}
        assert httpx.get(url, headers=access).status_code == 403
        answer = httpx.get(url, headers={"Host": host, "e2b-traffic-access-token": token})
        assert answer.status_code == 200, answer.text
        assert "e2b-traffic-access-token" not in dict(answer.json()["headers"])
        # Its token is its own: another sandbox's opens nothing here.
        other = Sandbox.create()
        try:
            theirs = {"Host": host, "e2b-traffic-access-token": other.traffic_access_token or ""}
            assert httpx.get(url, headers=theirs).status_code == 403
        finally:
            other.kill()
    finally:
        sandbox.kill()


def host_of(sandbox: Sandbox, port: int) -> str:
    return f"{port}-{sandbox.sandbox_id}.{DOMAIN}"


def test_an_http_preview_reaches_the_port_without_a_credential_and_gets_none(
    gateway: Gateway,  # noqa: F811  # the imported fixture
    served: tuple[Sandbox, dict[str, int]],
) -> None:
    sandbox, ports = served
    host = host_of(sandbox, ports["http"])
    assert sandbox.get_host(ports["http"]) == host
    sent = {
        "Host": host,
        "Authorization": "Bearer the-apps-own",
        "X-Access-Token": sandbox._envd_access_token or "",
        "X-API-Key": gateway.key,
    }
    answer = httpx.get(f"{gateway.url}/some/page?q=1", headers=sent)
    assert answer.status_code == 200, answer.text
    seen = json.loads(answer.text)
    assert seen["path"] == "/some/page?q=1"
    headers = dict(seen["headers"])
    # The app gets the request as the browser sent it: its Host and its own Authorization...
    assert headers["host"] == host
    assert headers["authorization"] == "Bearer the-apps-own"
    # ...and never the sandbox's token or the gateway's key.
    assert {"x-access-token", "x-api-key"} & set(headers) == set()

    # The SDK's own route, by header, with no credential at all; a body streams through.
    body = os.urandom(3 * 1024 * 1024 + 7)
    by_header = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": str(ports["http"])}
    posted = httpx.post(f"{gateway.url}/upload", headers=by_header, content=body)
    assert posted.json() == {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    relayed = dict(json.loads(httpx.get(f"{gateway.url}/", headers=by_header).text)["headers"])
    assert {"e2b-sandbox-id", "e2b-sandbox-port"} & set(relayed) == set()


def test_a_port_nothing_serves_and_a_sandbox_not_running_are_e2bs_answers(
    gateway: Gateway,  # noqa: F811  # the imported fixture
    served: tuple[Sandbox, dict[str, int]],
) -> None:
    sandbox, _ = served
    closed = free_port()
    answer = httpx.get(f"{gateway.url}/", headers={"Host": host_of(sandbox, closed)})
    assert answer.status_code == 502
    assert answer.json() == {
        "sandboxId": sandbox.sandbox_id,
        "message": f"The sandbox is running but port is not open: {closed}",
        "code": 502,
    }
    # The gateway's own port is no preview: a request there would come back to it.
    own = urlsplit(gateway.url).port
    assert own is not None
    answer = httpx.get(f"{gateway.url}/sandboxes", headers={"Host": host_of(sandbox, own)})
    assert answer.status_code == 502
    assert "port is not open" in answer.json()["message"]
    unknown = httpx.get(f"{gateway.url}/", headers={"Host": f"3000-nosuchsandbox.{DOMAIN}"})
    assert (unknown.status_code, unknown.json()["message"]) == (502, "The sandbox was not found")


async def exchange(gateway_url: str, host: str, path: str = "/") -> list[object]:
    """Open a WebSocket to `host` through the gateway, echo a few messages, and close."""
    address = urlsplit(gateway_url)
    sock = socket.create_connection((address.hostname, address.port))
    got: list[object] = []
    async with connect(f"ws://{host}{path}", sock=sock, subprotocols=["chat"], max_size=None) as ws:
        got.append(ws.subprotocol)
        for message in ("hello", b"\x00\x01binary", "x" * (1 << 20)):
            await ws.send(message)
            got.append(await ws.recv())
        await ws.send("close 4001")
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        got.append(
            (closed.value.rcvd.code, closed.value.rcvd.reason) if closed.value.rcvd else None
        )
    return got


def test_a_websocket_preview_is_relayed_both_ways_and_its_close_code_comes_back(
    gateway: Gateway,  # noqa: F811  # the imported fixture
    served: tuple[Sandbox, dict[str, int]],
) -> None:
    sandbox, ports = served
    got = asyncio.run(exchange(gateway.url, host_of(sandbox, ports["ws"]), "/socket?x=1"))
    assert got == ["chat", "hello", b"\x00\x01binary", "x" * (1 << 20), (4001, "asked to")]


async def refused(gateway_url: str, host: str) -> int:
    address = urlsplit(gateway_url)
    sock = socket.create_connection((address.hostname, address.port))
    with pytest.raises(InvalidStatus) as answer:
        async with connect(f"ws://{host}/", sock=sock):
            pass
    return answer.value.response.status_code


def test_websockets_reach_preview_ports_only(
    gateway: Gateway,  # noqa: F811  # the imported fixture
    served: tuple[Sandbox, dict[str, int]],
) -> None:
    sandbox, _ = served
    # envd's port and the control API speak no WebSocket; a closed port is not open.
    assert asyncio.run(refused(gateway.url, host_of(sandbox, 49983))) == 404
    assert asyncio.run(refused(gateway.url, "api." + DOMAIN)) == 404
    assert asyncio.run(refused(gateway.url, host_of(sandbox, free_port()))) == 502
    sandbox.pause()
    paused = asyncio.run(refused(gateway.url, host_of(sandbox, 8000)))
    assert paused == 502


async def too_big(gateway_url: str, host: str) -> int | None:
    address = urlsplit(gateway_url)
    sock = socket.create_connection((address.hostname, address.port))
    async with connect(f"ws://{host}/", sock=sock, subprotocols=["chat"], max_size=None) as ws:
        with pytest.raises(ConnectionClosed) as closed:
            await ws.send(b"x" * (16 * 1024 * 1024 + 1))
            await ws.recv()
    return closed.value.rcvd.code if closed.value.rcvd else None


def test_a_websocket_message_past_16_mib_closes_the_connection_with_1009(
    gateway: Gateway,  # noqa: F811  # the imported fixture
    served: tuple[Sandbox, dict[str, int]],
) -> None:
    sandbox, ports = served
    assert asyncio.run(too_big(gateway.url, host_of(sandbox, ports["ws"]))) == 1009


async def host_seen(gateway_url: str, host: str) -> object:
    address = urlsplit(gateway_url)
    sock = socket.create_connection((address.hostname, address.port))
    async with connect(f"ws://{host}/", sock=sock, subprotocols=["chat"]) as ws:
        await ws.send("host?")
        return await ws.recv()


def test_a_websocket_keeps_the_clients_host_and_follows_no_redirect(
    gateway: Gateway,  # noqa: F811  # the imported fixture
    served: tuple[Sandbox, dict[str, int]],
    trap: socket.socket,
) -> None:
    """The handshake names the client's `Host` (Jupyter compares `Origin` with it); a sandbox
    that answers it with a redirect to another address sends the gateway nowhere: 502."""
    sandbox, ports = served
    host = host_of(sandbox, ports["ws"])
    assert asyncio.run(host_seen(gateway.url, host)) == host

    async def redirected() -> int:
        address = urlsplit(gateway.url)
        sock = socket.create_connection((address.hostname, address.port))
        with pytest.raises(InvalidStatus) as answer:
            async with connect(f"ws://{host}/redirect", sock=sock):
                pass
        return answer.value.response.status_code

    assert asyncio.run(redirected()) == 502
    with pytest.raises(BlockingIOError):
        trap.accept()
