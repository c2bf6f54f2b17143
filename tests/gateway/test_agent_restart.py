"""A sandbox whose agent restarts: closed to everyone, then the owner's again, env vars and all.

The agent holds its token in memory only, so any restart (a crash, an OOM kill, a reboot inside
the guest, the platform restarting the VM or the pod's container) leaves it without one. Such
an agent refuses everything but `/health` and `/init`, and the gateway refuses everything that
carries no credential before it reaches the agent; the owner's next call, or a connect, makes
the gateway run `/init` again with the sealed env vars. Over the real agent, the stand-in
platform (which reports the sandbox Running and Ready all along, as it would for a restart it
does not see) and the Kubernetes backend.
"""

import asyncio
import base64
import contextlib
from typing import Any

import httpx
import pytest

from tests.agent.sdk.agents import STREAM, envelope, envelopes
from tests.gateway import stand_in
from tests.gateway.stand_in import KEY_A, World

pytestmark = pytest.mark.e2e  # starts agents or gateways

world = stand_in.world  # the fake cluster, the stand-in platform and a gateway with API keys

SECRET = {"SECRET_KEY": "s3cret"}  # a test value


ROOT = {"Authorization": "Basic " + base64.b64encode(b"root:").decode()}  # envd's user header


def start(script: str) -> bytes:
    return envelope({"process": {"cmd": "/bin/sh", "args": ["-c", script]}, "stdin": False})


def output(answer: httpx.Response) -> tuple[str, dict[str, Any]]:
    """A Start stream's stdout, and its end event."""
    out, end = b"", {}
    for _, message in envelopes(answer):
        event = message.get("event") or {}
        out += base64.b64decode((event.get("data") or {}).get("stdout", ""))
        end = event.get("end") or end
    return out.decode(), end


async def agent_health(world: World, where: tuple[str, str]) -> httpx.Response | None:
    url = f"http://{world.platform.hosts_of[where]}:{world.platform.port}/health"
    async with httpx.AsyncClient() as direct:
        with contextlib.suppress(httpx.TransportError):
            return await direct.get(url)
    return None


async def restarted(world: World, where: tuple[str, str]) -> None:
    """Restart its agent and wait until the new one answers, holding no token."""
    await world.platform.restart(where)
    for _ in range(200):
        health = await agent_health(world, where)
        if health is not None:
            assert health.headers["x-agent-initialized"] == "false"
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the restarted agent did not answer")


async def test_a_restarted_agent_is_refused_to_anyone_and_comes_back_for_the_owner(
    world: World,
) -> None:
    created = await world.call("POST", "/sandboxes", KEY_A, json={"envVars": SECRET})
    assert created.status_code == 201, created.text
    sandbox_id, token = created.json()["sandboxID"], created.json()["envdAccessToken"]
    where = ("team-a", sandbox_id)
    plane = {"E2b-Sandbox-Id": sandbox_id, **STREAM}
    await restarted(world, where)

    # Anyone who knows the ID: refused by the gateway, root or not, before and after the
    # owner's connect, and the agent is never reached (it would say so by being initialised).
    for round_ in range(2):
        for headers in (plane, {**plane, "X-Access-Token": "guessed"}):
            for user in (ROOT, {}):
                anonymous = await world.http.post(
                    "/process.Process/Start", content=start("id -u"), headers=headers | user
                )
                assert anonymous.status_code == 401, anonymous.text
        health = await agent_health(world, where)
        assert health is not None
        assert health.headers["x-agent-initialized"] == "false"
        reads = await world.http.get("/files?path=.", headers={"E2b-Sandbox-Id": sandbox_id})
        assert reads.status_code == 401
        if round_ == 0:
            connected = await world.call("POST", f"/sandboxes/{sandbox_id}/connect", KEY_A)
            assert connected.status_code == 200, connected.text
            assert connected.json()["envdAccessToken"] == token
            await restarted(world, where)  # and once more, after the connect

    # The owner's next call: the gateway gives the agent its token and env vars back first.
    owner = await world.http.post(
        "/process.Process/Start",
        content=start('printf %s "$SECRET_KEY"'),
        headers={**plane, "X-Access-Token": token},
    )
    assert owner.status_code == 200, owner.text
    printed, end = output(owner)
    assert (printed, end.get("exitCode", 0)) == ("s3cret", 0)
    health = await agent_health(world, where)
    assert health is not None
    assert health.headers["x-agent-initialized"] == "true"


async def test_connect_gives_a_restarted_agent_its_token_and_env_vars_back(world: World) -> None:
    created = await world.call("POST", "/sandboxes", KEY_A, json={"envVars": SECRET})
    sandbox_id, token = created.json()["sandboxID"], created.json()["envdAccessToken"]
    where = ("team-a", sandbox_id)
    await restarted(world, where)
    connected = await world.call("POST", f"/sandboxes/{sandbox_id}/connect", KEY_A, json={})
    assert connected.status_code == 200, connected.text
    health = await agent_health(world, where)
    assert health is not None
    assert health.headers["x-agent-initialized"] == "true"
    # The agent itself now wants the owner's token, and has the env vars back.
    url = f"http://{world.platform.hosts_of[where]}:{world.platform.port}"
    async with httpx.AsyncClient() as direct:
        refused = await direct.post(
            url + "/process.Process/Start", content=start("id -u"), headers=STREAM | ROOT
        )
        assert refused.status_code == 401
        answer = await direct.post(
            url + "/process.Process/Start",
            content=start('printf %s "$SECRET_KEY"'),
            headers={**STREAM, "X-Access-Token": token},
        )
    assert output(answer)[0] == "s3cret"


async def test_a_command_sent_chunked_as_the_sdk_sends_it_is_sent_again_after_a_restart(
    world: World,
) -> None:
    # The SDK's Connect client sends a streaming call's one message with no Content-Length: a
    # real reboot showed the first command after it answered 503 ("send it again").
    created = await world.call("POST", "/sandboxes", KEY_A, json={"envVars": SECRET})
    sandbox_id, token = created.json()["sandboxID"], created.json()["envdAccessToken"]
    await restarted(world, ("team-a", sandbox_id))

    async def chunked() -> Any:
        yield start('printf %s "$SECRET_KEY"')

    answer = await world.http.post(
        "/process.Process/Start",
        content=chunked(),
        headers={"E2b-Sandbox-Id": sandbox_id, **STREAM, "X-Access-Token": token},
    )
    assert "content-length" not in answer.request.headers
    assert answer.status_code == 200, answer.text
    printed, end = output(answer)
    assert (printed, end.get("exitCode", 0)) == ("s3cret", 0)
