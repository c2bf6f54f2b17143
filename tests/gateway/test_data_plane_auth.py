"""The gateway checks the data plane's credential itself, before anything reaches a sandbox.

Sandbox IDs are not secrets (they are in every host name, TLS SNI, signed URL and log line),
and an agent that restarted holds no token until the gateway's `/init` runs again: the gateway
is what keeps such an agent closed to everyone but the owner. Signatures here are made by the
real SDK's own function, so the gateway agrees with what `download_url` and `upload_url` send.
"""

import time
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from e2b.sandbox.signature import get_signature
from workspace_gateway.app import build_app
from workspace_gateway.backend import Sandbox
from workspace_gateway.credentials import authenticates, signature
from workspace_gateway.keys import StaticKeys
from workspace_gateway.proxy import forwarded_headers

from tests.gateway.fakes import KEY, ONE, TOKEN, Sandboxes, sandbox

REFUSED = {
    "code": 401,
    "message": "missing or invalid access token: send the sandbox's X-Access-Token, or a signed URL",
}
# The fake sandbox's endpoint answers nothing: a request the gateway let through is a 502.
FORWARDED = 502


@pytest.fixture
def backend() -> Sandboxes:
    return Sandboxes()


@pytest.fixture
async def client(backend: Sandboxes) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5) as upstream:
        app = build_app(backend, upstream, keys=StaticKeys({KEY: "a"}), domain="sbx.example.com")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sbx.example.com") as c:
            yield c


def signed(path: str, operation: str, user: str = "", seconds: int | None = None) -> str:
    made = get_signature(path, operation, user or None, TOKEN, seconds)  # type: ignore[arg-type]
    query = {"path": path, "username": user, "signature": made["signature"]}
    if made["expiration"] is not None:
        query["signature_expiration"] = str(made["expiration"])
    return "/files?" + urlencode(query)


PLANE = {"E2b-Sandbox-Id": ONE}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/health"),
        ("POST", "/process.Process/Start"),
        ("POST", "/filesystem.Filesystem/ListDir"),
        ("GET", "/files?path=a.txt"),
        ("POST", "/files?path=a.txt"),
        ("GET", "/envs"),
    ],
)
async def test_nothing_reaches_a_sandbox_without_its_token(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    for headers in (PLANE, {**PLANE, "X-Access-Token": "guessed"}, {**PLANE, "X-Access-Token": ""}):
        answer = await client.request(method, path, headers=headers)
        assert (answer.status_code, answer.json()) == (401, REFUSED)
    by_host = await client.request(method, path, headers={"Host": f"49983-{ONE}.sbx.example.com"})
    assert by_host.status_code == 401
    allowed = await client.request(method, path, headers={**PLANE, "X-Access-Token": TOKEN})
    assert allowed.status_code == FORWARDED


async def test_a_signed_url_opens_only_its_own_operation_until_it_expires(
    client: httpx.AsyncClient,
) -> None:
    read, write = signed("/workspace/a.txt", "read"), signed("/workspace/a.txt", "write")
    assert (await client.get(read, headers=PLANE)).status_code == FORWARDED
    assert (await client.post(write, headers=PLANE)).status_code == FORWARDED
    assert (await client.post(read, headers=PLANE)).status_code == 401  # read's, for a write
    assert (await client.get(write, headers=PLANE)).status_code == 401
    lasting = signed("/workspace/a.txt", "read", "user", seconds=60)
    assert (await client.get(lasting, headers=PLANE)).status_code == FORWARDED
    expired = signed("/workspace/a.txt", "read", "user", seconds=-1)
    assert (await client.get(expired, headers=PLANE)).status_code == 401


async def test_a_signed_url_is_no_credential_elsewhere_nor_beside_a_wrong_token(
    client: httpx.AsyncClient,
) -> None:
    read = signed("/workspace/a.txt", "read")
    query = urlsplit(read).query
    for path in (f"/health?{query}", f"/process.Process/Start?{query}", f"//files?{query}"):
        assert (await client.post(path, headers=PLANE)).status_code == 401, path
    wrong = await client.get(read, headers={**PLANE, "X-Access-Token": "guessed"})
    assert wrong.status_code == 401  # envd's rule: a token that doesn't match is refused


async def test_a_url_whose_fields_were_changed_is_refused(client: httpx.AsyncClient) -> None:
    query = {k: v[0] for k, v in parse_qs(urlsplit(signed("/a", "read", "user", 60)).query).items()}
    for field, value in [
        ("path", "/etc/shadow"),
        ("username", "root"),
        ("signature_expiration", str(int(time.time()) + 3600)),
        ("signature_expiration", "1e9"),
        ("signature_expiration", "²"),
        ("signature_expiration", "9" * 5000),
        ("signature", "v1_" + "A" * 43),
    ]:
        changed = {**query, field: value}
        answer = await client.get("/files?" + urlencode(changed), headers=PLANE)
        assert answer.status_code == 401, (field, value)


def test_the_gateway_signs_exactly_as_the_sdk() -> None:
    for path, operation, user, expiration in [
        ("/workspace/a b.txt", "read", "", None),
        ("rel/ä.txt", "write", "user", 1_900_000_000),
    ]:
        made = get_signature(path, operation, user or None, TOKEN, None)  # type: ignore[arg-type]
        if expiration is None:
            assert signature(path, operation, user, TOKEN, None) == made["signature"]
        query = {"path": path, "username": user}
        query["signature"] = signature(path, operation, user, TOKEN, expiration)
        if expiration is not None:
            query["signature_expiration"] = str(expiration)
        method = "GET" if operation == "read" else "POST"
        common = {"method": method, "path": "/files", "access_token": None}
        assert authenticates(TOKEN, query=query, clock=lambda: 0.0, **common)
        assert not authenticates("another", query=query, clock=lambda: 0.0, **common)


async def test_a_look_alike_in_another_namespace_gets_nothing_of_the_owner_s(
    client: httpx.AsyncClient, backend: Sandboxes
) -> None:
    backend.all.append(sandbox(1, namespace="b", access_token="theirs", endpoint="http://x:1"))  # noqa: S106
    mine = await client.get("/health", headers={**PLANE, "X-Access-Token": TOKEN})
    assert mine.status_code == FORWARDED
    theirs_token = await client.get("/health", headers={**PLANE, "X-Access-Token": "theirs"})
    assert theirs_token.status_code == FORWARDED  # the look-alike's own token opens only it
    assert (await client.get(signed("/a", "read"), headers=PLANE)).status_code == FORWARDED


async def test_a_sandbox_that_is_not_there_is_e2b_s_not_found(client: httpx.AsyncClient) -> None:
    # A token of a sandbox since killed: the SDK's `is_running` reads the 502 as "not running".
    plane = {"E2b-Sandbox-Id": "x" * 20, "X-Access-Token": TOKEN}
    answer = await client.get("/health", headers=plane)
    assert answer.status_code == 502
    assert answer.json()["message"] == "The sandbox was not found"
    signed_only = await client.get(signed("/a", "read"), headers={"E2b-Sandbox-Id": "x" * 20})
    assert signed_only.status_code == 502


async def test_a_request_with_no_credential_at_all_costs_no_look_up(
    client: httpx.AsyncClient, backend: Sandboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flood of made-up IDs with nothing to check spends nothing of `locate`'s budget."""
    looked: list[str] = []
    real = backend.locate

    async def counting(sandbox_id: str) -> tuple[Sandbox, ...]:
        looked.append(sandbox_id)
        return await real(sandbox_id)

    monkeypatch.setattr(backend, "locate", counting)
    for n in range(20):
        answer = await client.get("/health", headers={"E2b-Sandbox-Id": f"{n:020d}"})
        assert (answer.status_code, answer.json()) == (401, REFUSED)
    assert looked == []
    await client.get("/health", headers={**PLANE, "X-Access-Token": "guessed"})
    assert looked == [ONE]


def test_the_caller_s_bearer_token_and_api_key_never_reach_the_sandbox() -> None:
    raw = [(b"Authorization", b"Bearer kube-token"), (b"X-API-Key", b"e2b_x"), (b"X-A", b"1")]
    assert forwarded_headers(raw) == [(b"X-A", b"1")]
    for other in (b"bearer x", b"Token x", b"Basicx", b""):
        assert forwarded_headers([(b"authorization", other)]) == []
    # envd's own: the user a command runs as (`user="root"` in the SDK).
    basic = [(b"Authorization", b"Basic cm9vdDo=")]
    assert forwarded_headers(basic) == basic
