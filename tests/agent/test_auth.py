"""`/init` and the access token: trusted once, then only for whoever holds the token."""

import os
from pathlib import Path

import httpx
import pytest
from workspace_agent.process import ProcessService
from workspace_agent.server import build_app
from workspace_agent.state import Agent
from workspace_agent.users import Users

from tests.agent.sdk.conftest import NOBODY, Running

STAT = "/filesystem.Filesystem/Stat"
FIRST, SECOND, WRONG = "first", "second", "wrong"  # tokens
RPC_HEADERS = {"content-type": "application/json", "connect-protocol-version": "1"}


def stat(agent: Running, path: str, token: str | None = None) -> httpx.Response:
    headers = RPC_HEADERS | ({"X-Access-Token": token} if token else {})
    return agent.post(STAT, json={"path": path}, headers=headers)


def write(agent: Running, path: str, token: str | None = None, **params: str) -> httpx.Response:
    headers = {"X-Access-Token": token} if token else {}
    return agent.post(
        "/files", params={"path": path, **params}, files={"file": ("x", b"x")}, headers=headers
    )


def test_before_init_everything_is_open(agent: Running) -> None:
    assert stat(agent, ".").status_code == 200
    assert write(agent, "open.txt").status_code == 200
    assert agent.get("/nowhere").status_code == 404


def test_the_token_from_init_is_then_required_everywhere_but_health(agent: Running) -> None:
    assert agent.post("/init", json={"accessToken": "first"}).status_code == 204

    assert agent.get("/health").status_code == 204
    for r in (
        stat(agent, "."),
        stat(agent, ".", token=WRONG),
        write(agent, "x.txt"),
        write(agent, "x.txt", token=WRONG),
        agent.get("/files", params={"path": "x.txt"}),
        agent.get("/nowhere"),
        agent.post("/init", json={"accessToken": "mine-now"}),
        agent.post("/init", json={}, headers={"X-Access-Token": "wrong"}),
    ):
        assert r.status_code == 401, r.request.url
    assert stat(agent, ".").json()["code"] == "unauthenticated"
    assert write(agent, "x.txt").json() == {
        "code": 401,
        "message": "missing access token or signature",
    }
    assert not (agent.root / "x.txt").exists()

    assert stat(agent, ".", token=FIRST).status_code == 200
    assert write(agent, "x.txt", token=FIRST).status_code == 200
    assert agent.get("/nowhere", headers={"X-Access-Token": "first"}).status_code == 404


def test_the_token_holder_can_rotate_it(agent: Running) -> None:
    agent.post("/init", json={"accessToken": "first"})
    rotated = agent.post(
        "/init", json={"accessToken": "second"}, headers={"X-Access-Token": "first"}
    )
    assert rotated.status_code == 204
    assert stat(agent, ".", token=FIRST).status_code == 401
    assert stat(agent, ".", token=SECOND).status_code == 200
    again = agent.post("/init", json={}, headers={"X-Access-Token": "second"})
    assert again.status_code == 204
    assert stat(agent, ".", token=SECOND).status_code == 200  # kept when not named


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


def test_an_empty_body_is_accepted(agent: Running) -> None:
    assert agent.post("/init").status_code == 204


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
        r = await client.post("/init", json={"envVars": {"A": "1", "B": "2"}, "timestamp": "x"})
        assert r.status_code == 204
        assert agent.session.env == {"A": "1", "B": "2"}
        await client.post("/init", json={"envVars": {"C": "3"}})
        assert agent.session.env == {"C": "3"}
        await client.post("/init", json={"accessToken": "t"})
        assert agent.session.env == {"C": "3"}  # not named: kept
        r = await client.post("/init", json={"envVars": {}}, headers={"X-Access-Token": "t"})
        assert r.status_code == 204
        assert agent.session.env == {}
