"""`/init` and the access token: trusted once, then only for whoever holds the token."""

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from workspace_agent.process import ProcessService
from workspace_agent.server import build_app
from workspace_agent.state import Agent
from workspace_agent.users import Users

from tests.agent.sdk.agents import NOBODY, ROOT, TOKEN, Running, start, stop

pytestmark = pytest.mark.e2e  # starts agents or gateways

STAT = "/filesystem.Filesystem/Stat"
FIRST, SECOND, WRONG = "first", "second", "wrong"  # tokens
RPC_HEADERS = {"content-type": "application/json", "connect-protocol-version": "1"}


def stat(agent: Running, path: str, token: str | None = None) -> httpx.Response:
    """Stat `path` with `token`, or, without one, with whatever token `agent` holds."""
    headers = RPC_HEADERS | ({"X-Access-Token": token} if token else {})
    return agent.post(STAT, json={"path": path}, headers=headers)


def write(agent: Running, path: str, token: str | None = None, **params: str) -> httpx.Response:
    headers = {"X-Access-Token": token} if token else {}
    return agent.post(
        "/files", params={"path": path, **params}, files={"file": ("x", b"x")}, headers=headers
    )


@pytest.fixture
def fresh(workspace: Path) -> Iterator[Running]:
    """The agent as every boot and restart leaves it: running, never `/init`ed."""
    if not ROOT:
        pytest.skip("the VM agent runs as root")
    running = start(workspace, init=False)
    yield running
    stop(running)


NOT_INITIALISED = "the sandbox's agent has not been initialised"


def test_before_init_the_agent_refuses_everything_but_health_and_init(fresh: Running) -> None:
    health = fresh.get("/health")
    assert (health.status_code, health.headers["x-agent-initialized"]) == (204, "false")
    rpc = [
        stat(fresh, "."),
        stat(fresh, ".", token=WRONG),
        fresh.post("/process.Process/List", json={}, headers=RPC_HEADERS),
    ]
    for r in rpc:
        assert r.status_code == 401, r.request.url
        assert r.json() == {"code": "unauthenticated", "message": NOT_INITIALISED}
        assert r.headers["x-agent-initialized"] == "false"
    plain = [
        write(fresh, "open.txt"),
        write(fresh, "open.txt", token=WRONG),
        fresh.get("/files", params={"path": "/etc/shadow", "username": "root"}),
        fresh.get("/nowhere"),
        fresh.post("/health"),
        fresh.get("/init"),
    ]
    for r in plain:
        assert r.status_code == 401, r.request.url
        assert r.json() == {"code": 401, "message": NOT_INITIALISED}
        assert r.headers["x-agent-initialized"] == "false"
    assert not (fresh.root / "open.txt").exists()

    assert fresh.post("/init", json={"accessToken": FIRST}).status_code == 204
    health = fresh.get("/health")
    assert (health.status_code, health.headers["x-agent-initialized"]) == (204, "true")
    assert stat(fresh, ".", token=FIRST).status_code == 200
    assert "x-agent-initialized" not in stat(fresh, ".").headers  # a wrong token: just 401


@pytest.mark.parametrize(
    "body", [None, b"{}", b'{"envVars": {"A": "1"}}', b'{"accessToken": null}'], ids=repr
)
def test_a_first_init_without_a_token_is_refused_and_leaves_the_agent_shut(
    fresh: Running, body: bytes | None
) -> None:
    r = fresh.post("/init", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json() == {
        "code": 400,
        "message": "accessToken is required: the agent has none yet, and serves no one without it",
    }
    assert fresh.get("/health").headers["x-agent-initialized"] == "false"
    assert stat(fresh, ".").status_code == 401
    assert fresh.post("/init", json={"accessToken": FIRST}).status_code == 204
    assert stat(fresh, ".", token=FIRST).status_code == 200


def test_the_token_from_init_is_then_required_everywhere_but_health(fresh: Running) -> None:
    assert fresh.post("/init", json={"accessToken": "first"}).status_code == 204

    assert fresh.get("/health").status_code == 204
    for r in (
        stat(fresh, "."),
        stat(fresh, ".", token=WRONG),
        write(fresh, "x.txt"),
        write(fresh, "x.txt", token=WRONG),
        fresh.get("/files", params={"path": "x.txt"}),
        fresh.get("/nowhere"),
        fresh.post("/init", json={"accessToken": "mine-now"}),
        fresh.post("/init", json={}, headers={"X-Access-Token": "wrong"}),
    ):
        assert r.status_code == 401, r.request.url
    assert stat(fresh, ".").json()["code"] == "unauthenticated"
    assert write(fresh, "x.txt").json() == {
        "code": 401,
        "message": "missing access token or signature",
    }
    assert not (fresh.root / "x.txt").exists()

    assert stat(fresh, ".", token=FIRST).status_code == 200
    assert write(fresh, "x.txt", token=FIRST).status_code == 200
    assert fresh.get("/nowhere", headers={"X-Access-Token": "first"}).status_code == 404


def test_the_token_holder_can_rotate_it(fresh: Running) -> None:
    fresh.post("/init", json={"accessToken": "first"})
    rotated = fresh.post(
        "/init", json={"accessToken": "second"}, headers={"X-Access-Token": "first"}
    )
    assert rotated.status_code == 204
    assert stat(fresh, ".", token=FIRST).status_code == 401
    assert stat(fresh, ".", token=SECOND).status_code == 200
    again = fresh.post("/init", json={}, headers={"X-Access-Token": "second"})
    assert again.status_code == 204
    assert stat(fresh, ".", token=SECOND).status_code == 200  # kept when not named


def test_default_workdir_moves_relative_paths(agent: Running) -> None:
    (agent.root / "project").mkdir()
    os.chown(agent.root / "project", NOBODY.pw_uid, NOBODY.pw_gid)
    r = agent.post("/init", json={"defaultWorkdir": "project"})
    assert r.status_code == 204
    assert write(agent, "here.txt").status_code == 200
    assert (agent.root / "project" / "here.txt").exists()
    assert stat(agent, "here.txt").json()["entry"]["path"] == str(
        agent.root / "project" / "here.txt"
    )
    assert stat(agent, ".").json()["entry"]["path"] == str(agent.root / "project")
    agent.post("/init", json={"defaultWorkdir": str(agent.root)})
    assert stat(agent, "project").json()["entry"]["type"] == "FILE_TYPE_DIRECTORY"


def test_default_user_changes_who_writes(agent: Running) -> None:
    assert agent.post("/init", json={"defaultUser": "root"}).status_code == 204
    write(agent, "by-root.txt")
    assert (agent.root / "by-root.txt").stat().st_uid == 0
    agent.post("/init", json={"defaultUser": "nobody"})
    write(agent, "by-nobody.txt")
    assert (agent.root / "by-nobody.txt").stat().st_uid == NOBODY.pw_uid


def test_in_a_pod_the_default_user_is_only_the_pods(pod_agent: Running) -> None:
    r = pod_agent.post("/init", json={"defaultUser": "root"})
    assert r.status_code == 400
    assert "defaultUser" in r.json()["message"]
    assert pod_agent.post("/init", json={"defaultUser": "nobody"}).status_code == 204


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"envVars": ["A=1"]}', "envVars must be an object of strings"),
        (b'{"envVars": {"A": 1}}', "envVars must be an object of strings"),
        (b'{"accessToken": ""}', "accessToken must be a non-empty string"),
        (b'{"accessToken": 42}', "accessToken must be a non-empty string"),
        (b'{"defaultUser": "no-such-user-here"}', "defaultUser: invalid username"),
        (b'{"defaultWorkdir": "/nonexistent/dir"}', "is not a directory"),
        (b'{"defaultWorkdir": ""}', "defaultWorkdir must be a non-empty string"),
    ],
)
def test_bad_bodies_are_400_and_change_nothing(agent: Running, body: bytes, message: str) -> None:
    r = agent.post(
        "/init",
        content=b'{"accessToken": "t", "envVars": {"A": "1"}, "defaultWorkdir": "/nonexistent"}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400  # one bad field: nothing of it applied, token included
    assert stat(agent, ".").status_code == 200
    r = agent.post("/init", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["code"] == 400
    assert message in r.json()["message"]
    assert stat(agent, ".").status_code == 200


def test_an_empty_body_from_the_token_holder_is_accepted(agent: Running) -> None:
    assert agent.post("/init").status_code == 204
    assert stat(agent, ".", token=TOKEN).status_code == 200


# The environment is for commands; here it is seen in the agent's own state.


@pytest.fixture
def in_process(workspace: Path) -> tuple[Agent, httpx.AsyncClient]:
    agent = Agent(root=workspace, users=Users(workspace, "nobody"))
    app = build_app(agent, ProcessService(agent))
    return agent, httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a")


async def test_init_replaces_the_sandbox_environment(
    in_process: tuple[Agent, httpx.AsyncClient],
) -> None:
    agent, client = in_process
    async with client:
        first = {"accessToken": "t", "envVars": {"A": "1", "B": "2"}, "timestamp": "x"}
        assert (await client.post("/init", json=first)).status_code == 204
        assert agent.session.env == {"A": "1", "B": "2"}
        token = {"X-Access-Token": "t"}
        await client.post("/init", json={"envVars": {"C": "3"}}, headers=token)
        assert agent.session.env == {"C": "3"}
        await client.post("/init", json={"accessToken": "u"}, headers=token)
        assert agent.session.env == {"C": "3"}  # not named: kept
        r = await client.post("/init", json={"envVars": {}}, headers={"X-Access-Token": "u"})
        assert r.status_code == 204
        assert agent.session.env == {}
