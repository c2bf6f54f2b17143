"""The control API's pieces: the metadata filter, pages, create requests and error shapes."""

import asyncio
import contextlib
import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import httpx
import pytest
from workspace_gateway import not_offered
from workspace_gateway.app import build_app
from workspace_gateway.backend import NewSandbox, State, choose
from workspace_gateway.control import Control
from workspace_gateway.errors import GatewayError
from workspace_gateway.keys import StaticKeys
from workspace_gateway.listing import metadata_filter, page, page_token, token_key
from workspace_gateway.request_bodies import MAX_TIMEOUT, new_sandbox
from workspace_gateway.sandbox_json import metric_json

from tests.gateway.fakes import KEY, ONE, OTHER_KEY, T0, TOKEN, Sandboxes, sandbox


def sdk_query(metadata: dict[str, str]) -> dict[str, list[str]]:
    """What the SDK sends for a metadata filter, parsed as the gateway's query parser does."""
    inner = urlencode({quote(k): quote(v) for k, v in metadata.items()})
    return parse_qs(str(httpx.URL("http://x/", params={"metadata": inner}).query, "ascii"))


@pytest.mark.parametrize(
    "metadata",
    [{"user": "a b"}, {"k": "v", "other": "x=y&z"}, {"ünï": "cödé/%20"}, {"empty": ""}],
)
def test_the_metadata_filter_decodes_what_the_sdk_encodes(metadata: dict[str, str]) -> None:
    assert metadata_filter(sdk_query(metadata)["metadata"][0]) == metadata


def test_the_captured_metadata_query_decodes() -> None:
    assert parse_qs("metadata=user%3Da%252520b")["metadata"] == ["user=a%2520b"]
    assert metadata_filter("user=a%2520b") == {"user": "a b"}


def test_a_metadata_filter_that_is_not_pairs_is_a_400() -> None:
    with pytest.raises(GatewayError) as e:
        metadata_filter("no-equals-sign")
    assert e.value.status == 400


def test_pages_cover_everything_once_in_order() -> None:
    everything = [sandbox(n) for n in range(7)]
    for order in ("asc", "desc"):
        seen: list[str] = []
        query: dict[str, list[str]] = {"limit": ["3"], "order": [order]}
        while True:
            reply = page(everything, query)
            seen += [item["sandboxID"] for item in reply.body]
            headers = dict(reply.headers)
            if "x-next-token" not in headers:
                break
            query = {**query, "nextToken": [headers["x-next-token"]]}
        expected = sorted(s.sandbox_id for s in everything)
        assert seen == (expected if order == "asc" else expected[::-1])


def test_a_page_token_survives_its_sandbox_being_killed() -> None:
    everything = [sandbox(n) for n in range(4)]
    first = page(everything, {"limit": ["2"], "order": ["asc"]})
    token = dict(first.headers)["x-next-token"]
    rest = page(everything[2:], {"limit": ["2"], "order": ["asc"], "nextToken": [token]})
    assert [i["sandboxID"] for i in rest.body] == [
        everything[2].sandbox_id,
        everything[3].sandbox_id,
    ]
    assert rest.headers == ()


def test_page_tokens_round_trip_and_forgeries_are_refused() -> None:
    assert token_key(page_token(sandbox(3))) == (
        int((T0 + timedelta(seconds=3)).timestamp() * 1_000_000),
        sandbox(3).sandbox_id,
    )
    for bad in ("!!!", "bm9jb2xvbg", page_token(sandbox(1))[:-3] + "AAA"):
        with pytest.raises(GatewayError) as e:
            token_key(bad)
        assert e.value.status == 400


def test_lists_filter_by_state_and_metadata_and_show_no_token() -> None:
    everything = [sandbox(1), sandbox(2, state=State.PAUSED), sandbox(3, metadata={"n": "1"})]
    reply = page(everything, {"state": ["paused"]})
    assert [i["sandboxID"] for i in reply.body] == [everything[1].sandbox_id]
    reply = page(everything, {"metadata": ["n=1"], "order": ["asc"]})
    assert [i["sandboxID"] for i in reply.body] == [
        everything[0].sandbox_id,
        everything[2].sandbox_id,
    ]
    assert all("envdAccessToken" not in item for item in reply.body)
    assert reply.body[0]["startedAt"] == "2026-01-01T00:00:01Z"
    for bad in ({"state": ["stopped"]}, {"limit": ["0"]}, {"limit": ["101"]}, {"order": ["up"]}):
        with pytest.raises(GatewayError):
            page(everything, bad)


def test_lists_filter_by_template_and_start_time() -> None:
    everything = [sandbox(1), sandbox(2, template="isolated"), sandbox(3)]
    ids = [s.sandbox_id for s in everything]

    def listed(query: dict[str, list[str]]) -> list[str]:
        return [i["sandboxID"] for i in page(everything, {"order": ["asc"], **query}).body]

    assert listed({"template": ["isolated"]}) == [ids[1]]
    assert listed({"template": ["base"]}) == [ids[0], ids[2]]
    assert listed({"template": ["desktop"]}) == []
    assert listed({"template": [""]}) == ids
    # At or after: sandbox(2) started at T0 + 2 s, given here in UTC, with an offset, and as Z.
    assert listed({"startedAfter": [(T0 + timedelta(seconds=2)).isoformat()]}) == ids[1:]
    assert listed({"startedAfter": ["2026-01-01T02:00:02.5+02:00"]}) == ids[2:]
    assert listed({"startedAfter": ["2026-01-01T00:00:01Z"], "template": ["base"]}) == [
        ids[0],
        ids[2],
    ]
    for bad, message in [
        ("2026-01-01T00:00:01", "with an offset"),  # no offset: whose local time?
        ("yesterday", "not an RFC 3339 time"),
        ("2026-01-01T00:00:01 00:00", "%2B"),  # a + the query parser took for a space
    ]:
        with pytest.raises(GatewayError) as e:
            page(everything, {"startedAfter": [bad]})
        assert e.value.status == 400
        assert message in e.value.message and "startedAfter" in e.value.message


def test_an_agent_sample_becomes_e2b_s_metric_and_a_bad_one_is_a_502() -> None:
    envd = {
        "ts": 1767225601,
        "cpu_count": 2,
        "cpu_used_pct": 12.5,
        "mem_total": 4 * 2**30,
        "mem_used": 2**30,
        "mem_cache": 2**29,
        "mem_total_mib": 4096,
        "mem_used_mib": 1024,
        "disk_used": 10,
        "disk_total": 20,
    }
    assert metric_json(envd) == {
        "timestamp": "2026-01-01T00:00:01Z",
        "timestampUnix": 1767225601,
        "cpuCount": 2,
        "cpuUsedPct": 12.5,
        "memUsed": 2**30,
        "memTotal": 4 * 2**30,
        "memCache": 2**29,
        "diskUsed": 10,
        "diskTotal": 20,
    }
    for bad in ({}, {**envd, "ts": "soon"}, {**envd, "cpu_count": None}):
        with pytest.raises(GatewayError) as e:
            metric_json(bad)
        assert e.value.status == 502


async def test_metrics_ranges_are_unix_seconds(client: httpx.AsyncClient) -> None:
    answer = await client.get(
        f"/sandboxes/{ONE}/metrics", params={"start": "yesterday"}, headers={"X-API-Key": KEY}
    )
    assert (answer.status_code, answer.json()["message"]) == (
        400,
        "start must be a time in Unix seconds",
    )


def test_create_requests_are_checked() -> None:
    assert new_sandbox({"templateID": "base", "metadata": {}, "envVars": {}}) == NewSandbox(
        "base", 300
    )
    assert new_sandbox({"timeout": 10, "autoPause": True, "secure": True}).auto_pause
    refused = {
        '{"network": {"maskRequestHost": "x"}}': "'network.maskRequestHost' is not offered by this gateway",
        '{"mcp": {"x": 1}}': "'mcp' is not offered by this gateway",
        '{"volumeMounts": []}': "'volumeMounts' is not offered by this gateway",
        '{"allow_internet_access": 0}': "allow_internet_access must be true or false",
        '{"autoResume": {"enabled": true}}': "'autoResume' is not offered by this gateway",
        '{"timeout": -1}': f"timeout must be a whole number of seconds from 0 to {MAX_TIMEOUT}",
        f'{{"timeout": {MAX_TIMEOUT + 1}}}': f"timeout must be a whole number of seconds from 0 to {MAX_TIMEOUT}",
        '{"timeout": true}': f"timeout must be a whole number of seconds from 0 to {MAX_TIMEOUT}",
        '{"envVars": {"A": 1}}': "envVars must be an object of strings",
        '{"templateID": ""}': "templateID must be a non-empty string",
    }
    for body, message in refused.items():
        with pytest.raises(GatewayError) as e:
            new_sandbox(json.loads(body))
        assert (e.value.status, e.value.message) == (400, message), body


@pytest.fixture
def backend() -> Sandboxes:
    return Sandboxes()


@pytest.fixture
async def client(backend: Sandboxes) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as upstream:
        keys = StaticKeys({KEY: "a", OTHER_KEY: "b"})
        app = build_app(backend, upstream, keys=keys, domain="sbx.example.com")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api.sbx.example.com"
        ) as edge:
            yield edge


@pytest.mark.parametrize(
    "case",
    [
        (
            "GET",
            "/v2/sandboxes",
            None,
            None,
            401,
            "Invalid API key, please check your X-API-Key header",
        ),
        (
            "GET",
            "/v2/sandboxes",
            None,
            KEY[:-1] + "e",
            401,
            "Invalid API key, please check your X-API-Key header",
        ),
        ("GET", "/sandboxes/nope", None, KEY, 404, "sandbox 'nope' not found"),
        ("DELETE", "/sandboxes/nope", None, KEY, 404, "sandbox 'nope' not found"),
        ("POST", "/sandboxes/nope/pause", None, KEY, 404, "sandbox 'nope' not found"),
        ("POST", "/sandboxes/sbx00000000000000001/pause", None, KEY, 409, "already paused"),
        ("POST", "/v2/sandboxes", b'{"templateID": "gpu"}', KEY, 404, "template 'gpu' not found"),
        ("POST", "/v2/sandboxes", b"not json", KEY, 400, "the request body is not valid JSON"),
        ("POST", "/v2/sandboxes", b"[]", KEY, 400, "the request body must be a JSON object"),
        ("POST", "/sandboxes/sbx00000000000000001/timeout", b"{}", KEY, 400, "timeout is required"),
        ("PUT", "/v2/sandboxes", None, KEY, 405, "PUT is not allowed on /v2/sandboxes"),
        ("GET", "/no-such-route", None, KEY, 404, "no route /no-such-route"),
        ("GET", "/templates/aliases/nope", None, KEY, 404, "template 'nope' not found"),
        ("POST", "/snapshots", None, KEY, 405, "POST is not allowed on /snapshots"),
    ],
)
async def test_errors_are_e2b_s_json(
    client: httpx.AsyncClient, case: tuple[str, str, bytes | None, str | None, int, str]
) -> None:
    method, path, body, key, status, message = case
    headers = {"X-API-Key": key} if key else {}
    answer = await client.request(method, path, content=body, headers=headers)
    assert answer.status_code == status
    assert answer.headers["content-type"] == "application/json; charset=utf-8"
    assert answer.json() == {"code": status, "message": message}


@pytest.mark.parametrize("route", not_offered.ROUTES, ids=lambda r: f"{r.method} {r.template}")
async def test_routes_not_offered_answer_501_with_what_to_do_for_any_sandbox(
    client: httpx.AsyncClient, route: not_offered.NotOffered
) -> None:
    """Never a 404 the SDK turns into "not found", and the same for a sandbox of the caller's
    namespace, of another namespace and none: nothing is looked up."""
    answers = []
    for key, sandbox_id in ((KEY, ONE), (OTHER_KEY, ONE), (KEY, "unknown")):
        path = route.template.replace("{id}", sandbox_id).replace("{name}", "x")
        answer = await client.request(route.method, path, headers={"X-API-Key": key})
        answers.append((answer.status_code, answer.json()))
    assert answers == [(501, {"code": 501, "message": route.message})] * 3
    assert "not offered by this gateway" in route.message
    anonymous = await client.request(route.method, route.template.replace("{id}", ONE))
    assert anonymous.status_code == 401


async def test_a_template_of_the_mapping_exists_for_every_key(client: httpx.AsyncClient) -> None:
    for key in (KEY, OTHER_KEY):
        answer = await client.get("/templates/aliases/base", headers={"X-API-Key": key})
        assert (answer.status_code, answer.json()) == (200, {"templateID": "base", "public": True})


def test_the_audit_log_names_routes_not_offered_by_their_template(backend: Sandboxes) -> None:
    control = Control(backend, "sbx.example.com")
    assert control.resolve("POST", f"/sandboxes/{ONE}/snapshots") == (
        "POST /sandboxes/{id}/snapshots",
        ONE,
    )
    assert control.resolve("DELETE", "/templates/snap-1") == ("DELETE /templates/{alias}", None)
    assert control.resolve("GET", "/templates/aliases/base") == (
        "GET /templates/aliases/{alias}",
        None,
    )


async def test_create_answers_201_with_the_sandbox_s_domain(client: httpx.AsyncClient) -> None:
    answer = await client.post(
        "/sandboxes", json={"templateID": "base"}, headers={"X-API-Key": KEY}
    )
    assert answer.status_code == 201
    assert answer.json() == {
        "templateID": "base",
        "sandboxID": "sbx00000000000000001",
        "clientID": "workspace-sandbox-gateway",
        "envdVersion": "0.6.4",
        "envdAccessToken": TOKEN,
        "trafficAccessToken": hmac.new(
            TOKEN.encode(), b"e2b-traffic-access-token", hashlib.sha256
        ).hexdigest(),
        "domain": "sbx.example.com",
    }


async def test_internal_paths_are_refused_before_any_lookup(client: httpx.AsyncClient) -> None:
    answer = await client.post("/init", headers={"E2b-Sandbox-Id": "sbx00000000000000001"})
    assert answer.status_code == 403
    assert answer.json()["code"] == 403


async def test_a_paused_sandbox_answers_502(client: httpx.AsyncClient) -> None:
    headers = {"Host": "49983-unknown.sbx.example.com", "X-Access-Token": TOKEN}
    answer = await client.get("/health", headers=headers)
    assert answer.status_code == 502
    assert answer.json() == {
        "sandboxId": "unknown",
        "message": "The sandbox was not found",
        "code": 502,
    }


async def test_another_port_is_not_open(client: httpx.AsyncClient) -> None:
    answer = await client.get("/", headers={"Host": "3000-sbx00000000000000001.sbx.example.com"})
    assert answer.status_code == 502
    assert "port is not open" in answer.json()["message"]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/sandboxes/{}", None),
        ("DELETE", "/sandboxes/{}", None),
        ("POST", "/sandboxes/{}/pause", None),
        ("POST", "/sandboxes/{}/timeout", b'{"timeout": 10}'),
        ("POST", "/sandboxes/{}/connect", b'{"timeout": 10}'),
        ("POST", "/v2/sandboxes/{}/connect", b'{"timeout": 10}'),
        ("GET", "/sandboxes/{}/metrics", None),
    ],
)
async def test_another_namespace_s_sandbox_answers_as_an_unknown_one(
    client: httpx.AsyncClient, backend: Sandboxes, method: str, path: str, body: bytes | None
) -> None:
    headers = {"X-API-Key": OTHER_KEY}
    theirs = await client.request(method, path.format(ONE), content=body, headers=headers)
    unknown = await client.request(
        method, path.format("sbx99999999999999999"), content=body, headers=headers
    )
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json() == {"code": 404, "message": f"sandbox {ONE!r} not found"}
    assert unknown.json()["message"] == "sandbox 'sbx99999999999999999' not found"
    assert backend.all[0].end_at == sandbox(1).end_at  # nothing changed for its owner
    mine = await client.request(method, path.format(ONE), content=body, headers={"X-API-Key": KEY})
    assert mine.status_code != 404


async def test_lists_show_only_the_key_s_namespace(client: httpx.AsyncClient) -> None:
    for path in ("/sandboxes", "/v2/sandboxes"):
        mine = await client.get(path, headers={"X-API-Key": KEY})
        theirs = await client.get(path, headers={"X-API-Key": OTHER_KEY})
        assert [s["sandboxID"] for s in mine.json()] == [ONE]
        assert theirs.json() == []


async def test_a_name_in_two_namespaces_is_reached_by_no_one_without_a_token(
    client: httpx.AsyncClient, backend: Sandboxes
) -> None:
    backend.all.append(sandbox(1, namespace="b", access_token="theirs"))  # noqa: S106
    answer = await client.get("/health", headers={"E2b-Sandbox-Id": ONE})
    assert answer.status_code == 401
    assert answer.json() == {
        "code": 401,
        "message": "missing or invalid access token: send the sandbox's X-Access-Token, or a signed URL",
    }


def test_the_data_plane_chooses_between_namespaces_only_by_the_token() -> None:
    mine = sandbox(1, namespace="a", access_token="mine")  # noqa: S106
    squatter = sandbox(1, namespace="b", access_token="theirs")  # noqa: S106

    def given(token: str | None) -> Callable[[str], bool]:
        return lambda t: token is not None and t == token

    assert choose([mine], given("mine")) is mine
    assert choose([mine], given(None)) is None  # one of that name: still its token or nothing
    assert choose([mine, squatter], given("mine")) is mine
    assert choose([squatter, mine], given("mine")) is mine
    assert choose([mine, squatter], given(None)) is None
    assert choose([mine, squatter], given("neither")) is None
    assert choose([], given("mine")) is None


async def test_health_needs_no_key_and_says_whether_the_replica_can_serve(
    client: httpx.AsyncClient, backend: Sandboxes
) -> None:
    answer = await client.get("/health")
    assert (answer.status_code, answer.json()) == (200, {"ready": True})
    backend.is_ready = False
    answer = await client.get("/health")
    assert (answer.status_code, answer.json()) == (503, {"ready": False})
    # Only that one route goes without a key.
    assert (await client.post("/health")).status_code == 401
    assert (await client.get("/health/x")).status_code == 401
    assert (await client.get("/sandboxes")).status_code == 401


async def asgi_get(app: Any, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """One GET to the app as a server hands it over; its status and body."""
    sent: list[dict[str, Any]] = []
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = {"type": "http", "method": "GET", "path": path, "query_string": b"", "headers": raw}
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@contextlib.asynccontextmanager
async def previewing(
    answer: bytes, ports: frozenset[int] = frozenset({3000}), *, private: bool = False
) -> AsyncIterator[tuple[Any, list[httpx.Request]]]:
    """The app over one sandbox that names `ports`, whose app answers `answer` (streamed,
    as a server's answer is), and the requests that reached it."""
    seen: list[httpx.Request] = []

    async def served() -> AsyncIterator[bytes]:
        yield answer

    def app_in_the_sandbox(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=served())

    backend = Sandboxes()
    backend.all = [
        sandbox(
            1, namespace="a", ports=ports, endpoint="http://svc.a:49983", public_traffic=not private
        )
    ]
    async with httpx.AsyncClient(transport=httpx.MockTransport(app_in_the_sandbox)) as upstream:
        yield build_app(backend, upstream, keys=StaticKeys({KEY: "a"}), domain=PREVIEWS), seen


PREVIEWS = "sbx.example.com"
PREVIEWED = f"sbx00000000000000001.{PREVIEWS}"


async def test_a_declared_port_is_forwarded_to_that_port_of_the_sandbox_and_no_other() -> None:
    """On a cluster a preview port is one of the WorkspaceSandbox's `spec.ports`: its Service
    and its policies open those to the gateway, and the gateway reaches no other."""
    async with previewing(b"served") as (app, seen):
        host = f"3000-{PREVIEWED}"
        status, body = await asgi_get(app, "/app", {"Host": host, "X-Access-Token": TOKEN})
        assert (status, body) == (200, b"served")
        (request,) = seen
        assert str(request.url) == "http://svc.a:3000/app"
        assert request.headers["host"] == host
        assert "x-access-token" not in request.headers
        status, body = await asgi_get(app, "/", {"Host": f"8080-{PREVIEWED}"})
        assert status == 502
        assert json.loads(body)["message"] == "The sandbox is running but port is not open: 8080"
        assert len(seen) == 1


async def test_the_interpreter_s_port_takes_the_access_token_or_for_contexts_the_traffic_one() -> (
    None
):
    """49999 runs code as the sandbox's user: never public, whatever its previews are."""
    traffic = hmac.new(TOKEN.encode(), b"e2b-traffic-access-token", hashlib.sha256).hexdigest()
    async with previewing(b"[]", ports=frozenset({3000, 49999})) as (app, seen):
        host = f"49999-{PREVIEWED}"
        for path, headers in [
            ("/contexts", {}),
            ("/execute", {"E2B-Traffic-Access-Token": traffic}),
            ("/contexts", {"E2B-Traffic-Access-Token": "made-up"}),
            ("/contexts", {"X-Access-Token": "made-up", "E2B-Traffic-Access-Token": traffic}),
            # The access token is not a traffic token, nor the other way round.
            ("/contexts", {"E2B-Traffic-Access-Token": TOKEN}),
            ("/execute", {"X-Access-Token": traffic}),
        ]:
            status, body = await asgi_get(app, path, {"Host": host, **headers})
            assert status == 401, (path, headers)
            assert b"E2B-Traffic-Access-Token" in body
        assert seen == []
        both = {"X-Access-Token": TOKEN, "E2B-Traffic-Access-Token": traffic}
        assert await asgi_get(app, "/execute", {"Host": host, **both}) == (200, b"[]")
        contexts = {"E2B-Traffic-Access-Token": traffic}
        assert await asgi_get(app, "/contexts", {"Host": host, **contexts}) == (200, b"[]")
        assert [str(r.url) for r in seen] == [
            "http://svc.a:49999/execute",
            "http://svc.a:49999/contexts",
        ]
        for request in seen:
            assert "x-access-token" not in request.headers
            assert "e2b-traffic-access-token" not in request.headers
        sent = await websocket_answer(app, b"/", host)
        assert sent[0]["status"] == 404
    # A sandbox whose spec opens no 49999 has no interpreter to reach.
    async with previewing(b"", ports=frozenset({3000})) as (app, seen):
        headers = {"Host": f"49999-{PREVIEWED}", "X-Access-Token": TOKEN}
        status, body = await asgi_get(app, "/contexts", headers)
        assert status == 502
        assert json.loads(body)["message"] == "The sandbox is running but port is not open: 49999"
        assert seen == []


async def test_a_private_sandbox_s_previews_take_its_traffic_token_and_keep_it() -> None:
    """`network.allowPublicTraffic: false`: E2B's `e2b-traffic-access-token`, which the app in
    the sandbox never sees; the access token is no traffic token."""
    traffic = hmac.new(TOKEN.encode(), b"e2b-traffic-access-token", hashlib.sha256).hexdigest()
    async with previewing(b"private", private=True) as (app, seen):
        host = f"3000-{PREVIEWED}"
        for headers in ({}, {"e2b-traffic-access-token": "made-up"}, {"X-Access-Token": TOKEN}):
            status, body = await asgi_get(app, "/", {"Host": host, **headers})
            assert status == 403, headers
            assert b"allowPublicTraffic: false" in body
        sent = await websocket_answer(app, b"/", host)
        assert sent[0]["status"] == 403
        assert seen == []
        headers = {"Host": host, "e2b-traffic-access-token": traffic}
        assert await asgi_get(app, "/", headers) == (200, b"private")
        (request,) = seen
        assert "e2b-traffic-access-token" not in request.headers


async def test_envds_internal_paths_are_refused_on_its_port_alone() -> None:
    async with previewing(b"the app's own /init") as (app, seen):
        status, body = await asgi_get(app, "/init", {"Host": f"3000-{PREVIEWED}"})
        assert (status, body) == (200, b"the app's own /init")
        assert [str(r.url) for r in seen] == ["http://svc.a:3000/init"]
        headers = {"Host": f"49983-{PREVIEWED}", "X-Access-Token": TOKEN}
        status, body = await asgi_get(app, "/init", headers)
        assert status == 403
        assert len(seen) == 1


async def websocket_answer(app: Any, raw_path: bytes, host: str) -> list[dict[str, Any]]:
    """A WebSocket handshake as a server hands it over; what the app sent back."""
    sent: list[dict[str, Any]] = []
    scope = {
        "type": "websocket", "path": raw_path.decode(), "raw_path": raw_path,
        "query_string": b"", "headers": [(b"host", host.encode())], "subprotocols": [],
        "extensions": {"websocket.http.response": {}},
    }  # fmt: skip
    messages = [{"type": "websocket.connect"}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()
        return {"type": "websocket.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def test_a_websocket_whose_target_is_not_a_path_reaches_nothing() -> None:
    """`@host/` as a target would make the port's URL name another host (`ws://a:3000@host/`)."""
    backend = Sandboxes()
    backend.all = [
        sandbox(1, namespace="a", ports=frozenset({3000}), endpoint="http://svc.a:49983")
    ]
    async with httpx.AsyncClient() as upstream:
        app = build_app(backend, upstream, keys=StaticKeys({KEY: "a"}), domain="sbx.example.com")
        host = "3000-sbx00000000000000001.sbx.example.com"
        for target in (b"@169.254.169.254/latest", b"http://169.254.169.254/", b"*"):
            sent = await websocket_answer(app, target, host)
            assert sent[0] == {
                "type": "websocket.http.response.start",
                "status": 400,
                "headers": sent[0]["headers"],
            }, target
