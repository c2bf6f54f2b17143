"""Previews through the gateway, each beside the same request straight to the sandbox's port.

    python -m bench.preview_benchmark            # the run recorded in BENCHMARKS.md
    python -m bench.preview_benchmark --smoke    # a few calls: it works

One gateway (`--local`, plain HTTP) and one sandbox, in which the SDK starts a small HTTP
server (HTTP/1.1, keep-alive) and a WebSocket echo server on loopback ports. Each is reached two
ways: through the gateway (`<port>-<id>.<domain>` as `Host`) and straight to the port, one
persistent connection each way, called in turn so that noise on this shared machine lands on
both; the ratio of the medians is the preview proxy's cost.

- HTTP: a GET of a 2 KiB page, its head and body written in one send, as Node's servers
  (which set TCP_NODELAY) and uvicorn do. A server that writes them apart without TCP_NODELAY
  (Python's `http.server`) stalls answers by the kernel's 40 ms delayed ACK whoever reads
  them: 44 ms a GET seen straight to such a server, and through the gateway (BENCHMARKS.md).
- WebSocket: a round trip of a 64-byte text message on an open connection.
"""

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import httpx
from e2b import Sandbox
from websockets.asyncio.client import ClientConnection, connect

from bench.gateway_benchmark import KEY, _ms, _pairs, _start

GOALS = {"http ratio": 1.3, "websocket ratio": 1.3}
DOMAIN = "e2b.localhost"  # the gateway's default --domain
SERVER = r"""
import asyncio, http.server, json, os, threading
from websockets.asyncio.server import serve

PAGE = b"x" * 2048


class Page(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(PAGE)
        self.wfile.write(head + PAGE)

    def log_message(self, *args):
        pass


async def echo(ws):
    async for message in ws:
        await ws.send(message)


async def main():
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    async with serve(echo, "127.0.0.1", 0, compression=None) as ws:
        ports = {"http": web.server_port, "ws": ws.sockets[0].getsockname()[1]}
        with open("ports.json~", "w") as f:
            json.dump(ports, f)
        os.rename("ports.json~", "ports.json")
        await asyncio.Future()


asyncio.run(main())
"""


def _servers(sandbox: Sandbox) -> dict[str, int]:
    sandbox.files.write("bench_server.py", SERVER)
    # This Python, which has `websockets`: the local mode's sandbox is this machine.
    sandbox.commands.run(f"{sys.executable} bench_server.py", background=True)
    for _ in range(300):
        if sandbox.files.exists("ports.json"):
            ports: dict[str, int] = json.loads(sandbox.files.read("ports.json"))
            return ports
        time.sleep(0.1)
    sys.exit("the servers in the sandbox never started")


async def _websocket_pairs(
    gateway: str, host: str, port: int, calls: int
) -> tuple[list[float], list[float]]:
    address = httpx.URL(gateway)
    sock = socket.create_connection((address.host, address.port))
    via = await connect(f"ws://{host}/", sock=sock, compression=None)
    direct = await connect(f"ws://127.0.0.1:{port}/", compression=None)
    message = "m" * 64

    def round_trip(ws: ClientConnection) -> Callable[[], Awaitable[object]]:
        async def once() -> object:
            await ws.send(message)
            answer = await ws.recv()
            if answer != message:
                sys.exit("the echo answered another message")
            return answer

        return once

    try:
        return await _async_pairs(round_trip(via), round_trip(direct), calls)
    finally:
        await via.close()
        await direct.close()


async def _async_pairs(
    via: Callable[[], Awaitable[object]], direct: Callable[[], Awaitable[object]], calls: int
) -> tuple[list[float], list[float]]:
    gateway: list[float] = []
    straight: list[float] = []
    for _ in range(20):
        await via()
        await direct()
    for _ in range(calls):
        t = time.perf_counter()
        await via()
        gateway.append(time.perf_counter() - t)
        t = time.perf_counter()
        await direct()
        straight.append(time.perf_counter() - t)
    return gateway, straight


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="a few calls: it works")
    args = parser.parse_args()
    calls = 20 if args.smoke else 1000

    process, url = _start()
    for name in [n for n in os.environ if n.startswith("E2B_")]:
        del os.environ[name]
    os.environ.update(E2B_API_KEY=KEY, E2B_API_URL=url, E2B_SANDBOX_URL=url)
    try:
        sandbox = Sandbox.create()
        ports = _servers(sandbox)
        host = f"{ports['http']}-{sandbox.sandbox_id}.{DOMAIN}"
        with (
            httpx.Client(base_url=url, headers={"Host": host}) as via,
            httpx.Client(base_url=f"http://127.0.0.1:{ports['http']}") as direct,
        ):

            def get(client: httpx.Client) -> Callable[[], object]:
                def once() -> object:
                    page = client.get("/page")
                    if (page.status_code, len(page.content)) != (200, 2048):
                        sys.exit(f"the page answered {page.status_code}: {page.text[:200]}")
                    return page

                return once

            http = _pairs(get(via), get(direct), calls)
        ws_host = f"{ports['ws']}-{sandbox.sandbox_id}.{DOMAIN}"
        ws = asyncio.run(_websocket_pairs(url, ws_host, ports["ws"], calls))
        sandbox.kill()
    finally:
        process.terminate()
        process.wait(30)

    print(
        f"# preview benchmark: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {calls} pairs each"
    )
    print("| measure | through the gateway | straight to the port | ratio | goal |")
    print("| --- | --- | --- | --- | --- |")
    ratios = {}
    for name, (gateway, straight), goal in (
        ("HTTP GET of 2 KiB", http, "http ratio"),
        ("WebSocket round trip of 64 bytes", ws, "websocket ratio"),
    ):
        ratios[goal] = statistics.median(gateway) / statistics.median(straight)
        print(
            f"| {name}: p50 | {_ms(gateway, 50):.2f} ms | {_ms(straight, 50):.2f} ms "
            f"| {ratios[goal]:.2f}x | at most {GOALS[goal]}x |"
        )
        print(
            f"| {name}: p90 | {_ms(gateway, 90):.2f} ms | {_ms(straight, 90):.2f} ms "
            f"| {_ms(gateway, 90) / _ms(straight, 90):.2f}x | |"
        )
    if args.smoke:
        print("smoke run: every page and every echo came back whole")
        return
    missed = [name for name, ratio in ratios.items() if ratio > GOALS[name]]
    if missed:
        sys.exit(f"goals missed: {', '.join(missed)}")


if __name__ == "__main__":
    main()
