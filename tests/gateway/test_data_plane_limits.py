"""The data plane's bounds: streams per namespace and in all, stalled downloads, bad headers."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from workspace_gateway import proxy
from workspace_gateway.app import Target, build_app, route
from workspace_gateway.asgi import Message
from workspace_gateway.audit import MAX_SANDBOX_ID, Entry
from workspace_gateway.keys import StaticKeys
from workspace_gateway.proxy import (
    SMALL_READ_BYTES,
    UPSTREAM_READ_BYTES,
    LargeReads,
    SizedStream,
    Streams,
)

from tests.gateway.fakes import KEY, ONE, TOKEN, Sandboxes, sandbox
from tests.gateway.stand_in import eventually

DOMAIN = "sbx.example.com"


def test_one_stream_over_either_cap_is_refused_and_one_ending_makes_room() -> None:
    streams = Streams(most=3, per_tenant=2)
    assert streams.refusal("a") is None
    assert streams.refusal("a") is None
    assert streams.refusal("a") == (
        "the namespace has 2 sandbox streams open, its limit; retry once one ends"
    )
    assert streams.refusal("b") is None
    assert streams.refusal("c") == (
        "the gateway is serving its limit of 3 sandbox streams; retry later"
    )
    streams.release("a")
    assert streams.refusal("c") is None
    assert streams.refusal("a") is not None  # the total is full again
    for tenant in ("a", "b", "c"):
        streams.release(tenant)
    assert (streams.total, streams.by_tenant) == (0, {})


class Agent:
    """An agent whose answers stream until `done` is set."""

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.started = 0

    async def body(self) -> AsyncIterator[bytes]:
        self.started += 1
        yield b"first"
        await self.done.wait()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        del request
        return httpx.Response(200, content=self.body())


async def call(app: Any, sandbox_id: str, port: str = "49983") -> tuple[int, bytes]:
    """One data-plane request to the app; its status and body."""
    sent: list[Message] = []
    headers = [(b"e2b-sandbox-id", sandbox_id.encode()), (b"e2b-sandbox-port", port.encode())]
    headers.append((b"x-access-token", TOKEN.encode()))
    scope = {"type": "http", "method": "GET", "path": "/files", "headers": headers}
    gone = asyncio.Event()

    async def receive() -> Message:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


async def test_a_namespace_s_stream_past_its_cap_is_a_429_until_one_ends() -> None:
    agent = Agent()
    backend = Sandboxes()
    backend.all.append(sandbox(2, namespace="b"))
    http = httpx.AsyncClient(transport=httpx.MockTransport(agent))
    app = build_app(
        backend,
        http,
        keys=StaticKeys({KEY: "a"}),
        domain=DOMAIN,
        streams=Streams(most=3, per_tenant=2),
    )
    first = [asyncio.create_task(call(app, ONE)) for _ in range(2)]
    await eventually(lambda: agent.started == 2)
    status, body = await call(app, ONE)
    assert (status, json.loads(body)) == (
        429,
        {
            "code": 429,
            "message": "the namespace has 2 sandbox streams open, its limit; retry once one ends",
        },
    )
    other = asyncio.create_task(call(app, "sbx00000000000000002"))  # another namespace's room
    await eventually(lambda: agent.started == 3)
    agent.done.set()
    assert [await t for t in [*first, other]] == [(200, b"first")] * 3
    agent.done = asyncio.Event()
    agent.done.set()
    assert await call(app, ONE) == (200, b"first")
    await http.aclose()


class Held:
    """A client connection's outbound side that takes the first chunk, then stalls."""

    def __init__(self) -> None:
        self.unsent = 0
        self.stalled = asyncio.Event()

    def buffered(self) -> int:
        return self.unsent

    async def drained(self) -> None:
        if self.unsent:
            self.stalled.set()
            await asyncio.Event().wait()  # never: the client takes nothing more


class Inner:
    """An agent connection that always has more than any read asks for."""

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109  # httpcore's signature
        del timeout
        return b"x" * max_bytes


class Download:
    """What `_relay` reads of a response: its network stream and its raw chunks."""

    def __init__(self) -> None:
        self.stream = SizedStream(Inner())  # type: ignore[arg-type]
        self.extensions = {"network_stream": self.stream}

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        while True:
            yield await self.stream.read(UPSTREAM_READ_BYTES)


async def test_stalled_downloads_hold_a_rationed_share_of_large_reads_and_small_ones_past_it() -> (
    None
):
    reads = LargeReads(budget=4 * UPSTREAM_READ_BYTES)
    held: list[int] = []
    relays = []
    outs = []
    for _ in range(20):
        out = Held()
        got: list[int] = []

        async def send(message: Message, out: Held = out, got: list[int] = got) -> None:
            got.append(len(message["body"]))
            out.unsent += len(message["body"])  # taken by nobody: all of it stays unsent

        relays.append(asyncio.create_task(proxy._relay(Download(), send, out, reads)))  # type: ignore[arg-type]
        outs.append((out, got))
        await out.stalled.wait()
    for _, got in outs:
        assert len(got) == 1  # never a second read before the first is taken
        held.append(got[0])
    assert held.count(UPSTREAM_READ_BYTES) == 4
    assert held.count(SMALL_READ_BYTES) == 16
    assert sum(held) <= reads.left + 4 * UPSTREAM_READ_BYTES + 16 * SMALL_READ_BYTES
    for relay in relays:
        relay.cancel()
    await asyncio.gather(*relays, return_exceptions=True)
    assert reads.left == 4 * UPSTREAM_READ_BYTES  # every large read given back


async def test_a_client_that_keeps_up_gets_large_reads() -> None:
    reads = LargeReads()
    out = Held()
    got: list[int] = []

    async def send(message: Message) -> None:
        got.append(len(message["body"]))
        if len(got) == 5:
            raise asyncio.CancelledError

    relay = asyncio.create_task(proxy._relay(Download(), send, out, reads))  # type: ignore[arg-type]
    await asyncio.gather(relay, return_exceptions=True)
    assert got == [UPSTREAM_READ_BYTES] * 5


def test_a_port_header_that_is_no_port_is_no_port() -> None:
    for port in ("9" * 5000, "\u00b2", "\u0663", "-1", "1e3", ""):
        assert route({"e2b-sandbox-id": "abc", "e2b-sandbox-port": port}, DOMAIN) == Target(
            "abc", -1
        )


async def test_a_port_header_that_is_no_port_is_answered_502_not_500() -> None:
    http = httpx.AsyncClient(transport=httpx.MockTransport(Agent()))
    app = build_app(Sandboxes(), http, keys=StaticKeys({KEY: "a"}), domain=DOMAIN)
    for port in ("9" * 5000, "\u00b2"):
        status, body = await call(app, ONE, port)
        assert status == 502
        assert json.loads(body)["message"] == "The sandbox is running but port is not open: -1"
    await http.aclose()


def test_the_audit_line_holds_at_most_64_characters_of_a_sandbox_id() -> None:
    line = json.loads(Entry(sandbox_id="x" * 100_000, route="GET sandbox:49983 /").line())
    assert line["sandboxId"] == "x" * MAX_SANDBOX_ID
    assert json.loads(Entry().line())["sandboxId"] is None
