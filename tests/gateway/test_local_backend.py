"""The local backend's own bookkeeping and warm pools, with real agent processes."""

import asyncio
import base64
import getpass
import json
import logging
import os
import pwd
import socket
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from workspace_gateway import local_backend
from workspace_gateway.app import build_app
from workspace_gateway.backend import NewSandbox, State
from workspace_gateway.keys import StaticKeys
from workspace_gateway.local_backend import LocalBackend, Pool, Temperature
from workspace_gateway.main import find_agent
from workspace_gateway.metrics import Metrics

from tests.agent.sdk.agents import STREAM, envelope, envelopes

pytestmark = pytest.mark.e2e  # starts agents or gateways

# As root the agents act as nobody, so that no command reads root's login profile.
USER = "nobody" if os.geteuid() == 0 else getpass.getuser()


async def test_two_creates_at_once_never_share_a_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel may name one free port twice before either agent binds it."""
    held, other = local_backend.hold_port(), local_backend.hold_port()
    first, second = held.getsockname()[1], other.getsockname()[1]
    again = socket.socket()  # the same port once more, as a kernel that named it twice would
    again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    again.bind(("127.0.0.1", first))
    answers = iter([held, again, other])
    monkeypatch.setattr(local_backend, "hold_port", lambda: next(answers))
    agent = find_agent()
    assert agent is not None
    backend = LocalBackend(agent, USER)
    try:
        made = await asyncio.gather(
            backend.create("local", NewSandbox("base", 60)),
            backend.create("local", NewSandbox("base", 60)),
        )
        endpoints = {m.endpoint for m in made}
        assert endpoints == {f"http://127.0.0.1:{first}", f"http://127.0.0.1:{second}"}
        assert backend.ports == {first, second}
        await backend.delete("local", made[0].sandbox_id)
        assert len(backend.ports) == 1
    finally:
        await backend.close()
    assert backend.ports == set()
    assert backend.processes == {}


def pooled(size: int, temperature: Temperature = Temperature.RUNNING) -> LocalBackend:
    agent = find_agent()
    assert agent is not None
    return LocalBackend(
        agent, USER, metrics=Metrics(), pools={("local", "base"): Pool(size, temperature)}
    )


def figure(backend: LocalBackend, name: str, **labels: str) -> float:
    assert backend.metrics is not None
    value = backend.metrics.registry.get_sample_value(
        name, {"namespace": "local", "template": "base", **labels}
    )
    return value or 0.0


async def test_a_running_member_is_handed_out_once_with_the_caller_s_settings() -> None:
    backend = pooled(2)
    try:
        await backend.refill()
        members = list(backend.members["local", "base"])
        assert len(members) == 2
        # Made ahead, healthy, never listed nor reachable, and holding no token yet.
        for member in members:
            assert member.process is not None and member.process.returncode is None
            assert member.sandbox.access_token == ""
            assert member.env_vars == {}
            assert await backend.locate(member.sandbox.sandbox_id) == ()
        assert await backend.list("local") == []
        assert figure(backend, "workspace_gateway_pool_members", temperature="running") == 2
        assert figure(backend, "workspace_gateway_pool_topup_seconds_count") == 2

        request = NewSandbox("base", 60, metadata={"run": "1"}, env_vars={"FOO": "bar"})
        got = await backend.create("local", request)
        assert got.sandbox_id == members[0].sandbox.sandbox_id  # the oldest first
        assert got.endpoint == members[0].sandbox.endpoint
        assert got.metadata == {"run": "1"}
        assert len(got.access_token) == 64
        assert timedelta(seconds=55) < got.end_at - datetime.now(UTC) <= timedelta(seconds=60)
        assert await backend.list("local") == [got]
        assert backend.members["local", "base"] == [members[1]]
        # The caller's token now guards the agent: /init without it is refused.
        assert got.endpoint is not None
        async with httpx.AsyncClient() as http:
            refused = await http.post(got.endpoint + "/init", json={"accessToken": "mine"})
            assert refused.status_code == 401
            wrong = await http.get(
                got.endpoint + "/files", params={"path": "."}, headers={"X-Access-Token": "x"}
            )
            assert wrong.status_code == 401
        assert figure(backend, "workspace_gateway_pool_hits_total") == 1
        assert figure(backend, "workspace_gateway_pool_members", temperature="running") == 1

        await backend.refill()
        assert len(backend.members["local", "base"]) == 2
    finally:
        await backend.close()
    assert backend.processes == {}
    assert not any(m.workspace.exists() for m in members)


async def test_concurrent_creates_never_share_a_member_and_the_rest_are_cold() -> None:
    backend = pooled(3)
    try:
        await backend.refill()
        pool_ids = {m.sandbox.sandbox_id for m in backend.members["local", "base"]}
        made = await asyncio.gather(
            *(backend.create("local", NewSandbox("base", 60)) for _ in range(5))
        )
        ids = [m.sandbox_id for m in made]
        assert len(set(ids)) == 5
        assert len({m.endpoint for m in made}) == 5
        assert len({m.access_token for m in made}) == 5
        assert len(pool_ids & set(ids)) == 3
        assert figure(backend, "workspace_gateway_pool_hits_total") == 3
        assert figure(backend, "workspace_gateway_pool_misses_total") == 2
        assert backend.members["local", "base"] == []
    finally:
        await backend.close()


async def test_refills_at_once_make_no_more_than_the_size_and_only_while_leading() -> None:
    backend = pooled(2)
    try:
        await backend.refill(lambda: False)
        assert backend.members["local", "base"] == []
        await asyncio.gather(backend.refill(), backend.refill(), backend.refill())
        assert len(backend.members["local", "base"]) == 2
        assert len(backend.processes) == 2
    finally:
        await backend.close()


async def test_a_suspended_member_has_no_agent_until_handed_out() -> None:
    backend = pooled(1, Temperature.SUSPENDED)
    try:
        await backend.refill()
        (member,) = backend.members["local", "base"]
        assert member.process is None
        assert member.workspace.is_dir()
        assert backend.processes == {}
        got = await backend.create("local", NewSandbox("base", 60, env_vars={"A": "b"}))
        assert got.sandbox_id == member.sandbox.sandbox_id
        assert got.state is State.RUNNING
        assert member.process is not None and member.process.returncode is None
        assert figure(backend, "workspace_gateway_pool_hits_total") == 1
        assert figure(backend, "workspace_gateway_pool_members", temperature="suspended") == 0
    finally:
        await backend.close()


async def test_an_unhealthy_member_is_dropped_not_handed_out() -> None:
    backend = pooled(2)
    try:
        await backend.refill()
        dead, tampered = backend.members["local", "base"]
        assert dead.process is not None
        dead.process.kill()
        await dead.process.wait()
        # Someone reached the second before any create and set a token of their own.
        assert tampered.sandbox.endpoint is not None
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                tampered.sandbox.endpoint + "/init", json={"accessToken": "stolen"}
            )
            assert answer.status_code == 204
        got = await backend.create("local", NewSandbox("base", 60))
        assert got.sandbox_id not in {dead.sandbox.sandbox_id, tampered.sandbox.sandbox_id}
        assert not dead.workspace.exists()
        assert not tampered.workspace.exists()
        assert figure(backend, "workspace_gateway_pool_misses_total") == 1
        assert len(backend.processes) == 1
    finally:
        await backend.close()


@pytest.mark.parametrize(
    ("pool", "said"), [(True, ["hit", "miss", None]), (False, [None, None, None])]
)
async def test_the_audit_line_of_a_create_says_hit_or_miss_where_a_pool_is_kept(
    caplog: pytest.LogCaptureFixture, pool: bool, said: list[str | None]
) -> None:
    caplog.set_level(logging.INFO, logger="workspace_gateway.audit")
    agent = find_agent()
    assert agent is not None
    backend = pooled(1) if pool else LocalBackend(agent, USER, metrics=Metrics())
    key = "e2b_" + "ab" * 20
    try:
        await backend.refill()
        async with httpx.AsyncClient() as upstream:
            app = build_app(backend, upstream, keys=StaticKeys({key: "local"}), domain="x.test")
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://api.x.test"
            ) as http:
                for _ in range(2):
                    answer = await http.post("/sandboxes", json={}, headers={"X-API-Key": key})
                    assert answer.status_code == 201
                await http.get("/v2/sandboxes", headers={"X-API-Key": key})
    finally:
        await backend.close()
    lines = [
        json.loads(r.getMessage()) for r in caplog.records if r.name == "workspace_gateway.audit"
    ]
    assert [line.get("pool") for line in lines] == said
    assert all(line["durationMs"] > 0 for line in lines[:2])


async def test_a_cancelled_top_up_leaves_no_member_no_process_and_no_count() -> None:
    backend = pooled(3)
    try:
        refill = asyncio.create_task(backend.refill())
        await asyncio.sleep(0.05)  # the agents are starting
        refill.cancel()
        with pytest.raises(asyncio.CancelledError):
            await refill
        assert backend.making == {("local", "base"): 0}
        assert backend.members["local", "base"] == []
        assert backend.processes == {}
        await backend.refill()
        assert len(backend.members["local", "base"]) == 3
    finally:
        await backend.close()


async def test_a_restarted_local_agent_is_closed_to_anyone_until_the_owner_s_next_call() -> None:
    """`--local`, as the review reproduced it: the agent killed and started again on its port."""
    agent = find_agent()
    assert agent is not None
    backend = LocalBackend(agent, USER)
    again: asyncio.subprocess.Process | None = None
    try:
        made = await backend.create("local", NewSandbox("base", 60, env_vars={"K": "v"}))
        entry = backend.entries[made.sandbox_id]
        assert entry.process is not None and made.endpoint is not None
        entry.process.kill()
        await entry.process.wait()
        address = made.endpoint.removeprefix("http://")
        again = await asyncio.create_subprocess_exec(
            str(agent),
            *("--address", address, "--root", str(entry.workspace), "--user", USER),
        )
        async with httpx.AsyncClient(timeout=10) as http:
            for _ in range(200):
                try:
                    await http.get(made.endpoint + "/health")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            app = build_app(backend, http, keys=StaticKeys({}), domain="localhost")
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as gw:
                plane = {"E2b-Sandbox-Id": made.sandbox_id, **STREAM}
                body = envelope({"process": {"cmd": "/bin/sh", "args": ["-c", "id -u"]}})
                as_root = {"Authorization": "Basic " + base64.b64encode(b"root:").decode()}
                anonymous = await gw.post(
                    "/process.Process/Start", content=body, headers=plane | as_root
                )
                assert anonymous.status_code == 401
                health = await http.get(made.endpoint + "/health")
                assert health.headers["x-agent-initialized"] == "false"
                # As the agent's own user: the local backend's folders are the gateway's.
                me = pwd.getpwuid(os.geteuid()).pw_name.encode()
                script = {"process": {"cmd": "/bin/sh", "args": ["-c", 'printf %s "$K"']}}
                owner = await gw.post(
                    "/process.Process/Start",
                    content=envelope(script),
                    headers={
                        **plane,
                        "X-Access-Token": made.access_token,
                        "Authorization": "Basic " + base64.b64encode(me + b":").decode(),
                    },
                )
                assert owner.status_code == 200, owner.text
                printed = b"".join(
                    base64.b64decode(m.get("event", {}).get("data", {}).get("stdout", ""))
                    for _, m in envelopes(owner)
                )
                assert printed == b"v", list(envelopes(owner))
    finally:
        if again is not None:
            again.kill()
            await again.wait()
        await backend.close()
