"""The audit log: one JSON line per request, with who, what, how much, and nothing secret."""

import json
import logging

import httpx
import pytest
from workspace_gateway.app import build_app
from workspace_gateway.audit import Entry
from workspace_gateway.keys import StaticKeys, digest

from tests.gateway.fakes import KEY, ONE, OTHER_KEY, TOKEN, Sandboxes

FIELDS = {
    "time",
    "keyId",
    "namespace",
    "sandboxId",
    "route",
    "status",
    "bytesIn",
    "bytesOut",
    "durationMs",
}


@pytest.fixture
async def http() -> httpx.AsyncClient:
    async with httpx.AsyncClient() as upstream:
        keys = StaticKeys({KEY: "a", OTHER_KEY: "b"})
        app = build_app(Sandboxes(), upstream, keys=keys, domain="sbx.example.com")
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://api.sbx.example.com"
        )


def lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [
        json.loads(r.getMessage()) for r in caplog.records if r.name == "workspace_gateway.audit"
    ]


async def test_each_call_is_one_line_naming_key_namespace_sandbox_and_route(
    http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="workspace_gateway.audit")
    body = b'{"timeout": 30}'
    answer = await http.post(f"/sandboxes/{ONE}/timeout", content=body, headers={"X-API-Key": KEY})
    assert answer.status_code == 204
    (line,) = lines(caplog)
    assert set(line) == FIELDS
    assert line["keyId"] == digest(KEY)[:12]
    assert line["namespace"] == "a"
    assert line["sandboxId"] == ONE
    assert line["route"] == "POST /sandboxes/{id}/timeout"
    assert line["status"] == 204
    assert line["bytesIn"] == len(body)
    assert line["bytesOut"] == 0
    assert isinstance(line["durationMs"], float)
    assert str(line["time"]).endswith("Z")


async def test_queries_keys_tokens_and_metadata_never_reach_the_log(
    http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="workspace_gateway.audit")
    await http.get("/v2/sandboxes?metadata=secret%3Dhunter2", headers={"X-API-Key": KEY})
    await http.get(f"/sandboxes/{ONE}", headers={"X-API-Key": KEY})
    await http.get("/v2/sandboxes", headers={"X-API-Key": "e2b_" + "9" * 40})
    plane = {"E2b-Sandbox-Id": "nosuch", "X-Access-Token": TOKEN}
    await http.get("/files?path=/secret/place", headers=plane)
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 4
    text = "\n".join(logged)
    for secret in (KEY, KEY[4:], "e2b_" + "9" * 40, TOKEN, "hunter2", "secret", "/secret/place"):
        assert secret not in text
    routes = [line["route"] for line in lines(caplog)]
    assert routes == [
        "GET /v2/sandboxes",
        "GET /sandboxes/{id}",
        "GET /v2/sandboxes",
        "GET sandbox:49983 /files",
    ]
    statuses = [line["status"] for line in lines(caplog)]
    assert statuses == [200, 200, 401, 502]
    assert [line["keyId"] for line in lines(caplog)][2:] == [None, None]


def test_a_line_measures_the_time_taken() -> None:
    entry = Entry(started=10.0)
    assert json.loads(entry.line(now=10.25))["durationMs"] == 250.0
