"""Kubernetes tokens as credentials: TokenReview and SubjectAccessReview against the fake cluster.

The gateway runs over the real `kubernetes` client and the fake API server, whose table of
tokens and grants each test sets; the stand-in platform runs a real agent per sandbox.
"""

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from e2b import Sandbox
from e2b.exceptions import AuthenticationException, RateLimitException, SandboxException
from kubernetes import client, config
from workspace_gateway import not_offered
from workspace_gateway.app import build_app
from workspace_gateway.control import Control
from workspace_gateway.errors import GatewayError
from workspace_gateway.kubernetes.backend import KubernetesBackend
from workspace_gateway.kubernetes.objects import PLURAL, Settings
from workspace_gateway.kubernetes.tokens import (
    MAX_STRANGERS_IN_FLIGHT,
    VERBS,
    Cache,
    TokenReviews,
    User,
    namespace_for,
)

from tests.gateway import kube_fake
from tests.gateway.stand_in import BASE, SEED, Platform
from tests.ports import free_port

pytestmark = pytest.mark.e2e  # starts agents or gateways

# ruff: noqa: S105  # made-up tokens the fake cluster knows
TOKEN_A = "eyJhbGciOiJSUzI1NiJ9.team-a-token.signature"
TOKEN_B = "eyJhbGciOiJSUzI1NiJ9.team-b-token.signature"
TOKEN_ALICE = "eyJhbGciOiJSUzI1NiJ9.alice-oidc.signature"
SA_A = "system:serviceaccount:team-a:agent"
SA_B = "system:serviceaccount:team-b:agent"
EVERY_VERB = ("create", "get", "list", "patch", "delete")


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    cluster: kube_fake.Cluster
    http: httpx.AsyncClient
    reviews: TokenReviews
    clock: Clock

    async def call(
        self, method: str, path: str, token: str, headers: dict[str, str] | None = None, **kw: Any
    ) -> httpx.Response:
        sent = {"X-API-Key": token, **(headers or {})}
        return await self.http.request(method, path, headers=sent, **kw)

    def grant(self, subject: str, namespace: str, *verbs: str) -> None:
        self.cluster.authority.grants |= {(subject, namespace, v) for v in verbs}

    def verbs_reviewed(self) -> list[tuple[str, str, str]]:
        return [
            (
                r["spec"]["user"],
                r["spec"]["resourceAttributes"]["namespace"],
                r["spec"]["resourceAttributes"]["verb"],
            )
            for r in self.cluster.authority.access_reviews
        ]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    with kube_fake.serve() as (cluster, url):
        cluster.authority.tokens.update(
            {
                TOKEN_A: {"username": SA_A, "uid": "u-a", "groups": ["system:serviceaccounts"]},
                TOKEN_B: {"username": SA_B, "uid": "u-b"},
                TOKEN_ALICE: {"username": "alice@example.com", "groups": ["developers"]},
            }
        )
        api = config.new_client_from_config(config_file=str(kube_fake.kubeconfig(url, tmp_path)))
        platform = Platform(cluster, tmp_path)
        settings = Settings(
            templates={"base": BASE},
            seed=SEED,
            agent_port=platform.port,
            workdir=".",
            ready_seconds=15,
        )
        backend = KubernetesBackend(client.CustomObjectsApi(api), settings, httpx.AsyncClient())
        clock = Clock()
        reviews = TokenReviews(
            client.AuthenticationV1Api(api), client.AuthorizationV1Api(api), clock=clock
        )
        controller = asyncio.create_task(platform.run())
        async with httpx.AsyncClient(timeout=30) as upstream:
            app = build_app(backend, upstream, keys=reviews, domain="sbx.example.com")
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://api.sbx.example.com"
            ) as http:
                yield World(cluster, http, reviews, clock)
        controller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await controller
        await platform.close()
        gc.collect()
        await backend.close()
        api.close()


async def test_a_token_acts_in_its_service_account_s_namespace_and_sees_nothing_else(
    world: World,
) -> None:
    world.grant(SA_A, "team-a", *EVERY_VERB)
    world.grant(SA_B, "team-b", *EVERY_VERB)
    created = await world.call("POST", "/v2/sandboxes", TOKEN_A, json={"metadata": {"k": "v"}})
    assert created.status_code == 201, created.text
    sandbox_id = created.json()["sandboxID"]
    assert (PLURAL, "team-a", sandbox_id) in world.cluster.objects
    mine = await world.call("GET", "/v2/sandboxes", TOKEN_A)
    assert [s["sandboxID"] for s in mine.json()] == [sandbox_id]

    assert (await world.call("GET", "/v2/sandboxes", TOKEN_B)).json() == []
    for method, path in [
        ("GET", f"/sandboxes/{sandbox_id}"),
        ("POST", f"/sandboxes/{sandbox_id}/pause"),
        ("POST", f"/sandboxes/{sandbox_id}/connect"),
        ("DELETE", f"/sandboxes/{sandbox_id}"),
    ]:
        theirs = await world.call(method, path, TOKEN_B)
        assert theirs.status_code == 404, (method, path)
        assert theirs.json() == {"code": 404, "message": f"sandbox {sandbox_id!r} not found"}
    assert world.cluster.objects[PLURAL, "team-a", sandbox_id]["spec"]["power"] == "Running"

    # Naming A's namespace gets B nowhere without a grant there: 403, before any lookup.
    named = await world.call(
        "GET", f"/sandboxes/{sandbox_id}", TOKEN_B, {"X-Sandbox-Namespace": "team-a"}
    )
    assert named.status_code == 403
    assert named.json() == {
        "code": 403,
        "message": f"{SA_B} may not get workspacesandboxes in namespace 'team-a'",
    }
    assert (await world.call("DELETE", f"/sandboxes/{sandbox_id}", TOKEN_A)).status_code == 204


@pytest.mark.parametrize(
    ("role", "verbs", "gets_token"),
    [
        # deploy/rbac-tenants.yaml: what Cozystack's tenant roles aggregate.
        ("cozy:tenant:view", ("get", "list", "watch"), False),
        (
            "cozy:tenant:admin",
            ("get", "list", "watch", "create", "update", "patch", "delete"),
            True,
        ),
    ],
)
async def test_a_read_only_role_reads_a_sandbox_without_its_access_token(
    world: World, role: str, verbs: tuple[str, ...], gets_token: bool
) -> None:
    world.grant(SA_A, "team-a", *EVERY_VERB)
    created = await world.call("POST", "/sandboxes", TOKEN_A, json={"envVars": {"K": "secret"}})
    assert created.status_code == 201, created.text
    sandbox_id, token = created.json()["sandboxID"], created.json()["envdAccessToken"]
    world.grant("group:developers", "team-a", *verbs)
    read = await world.call(
        "GET", f"/sandboxes/{sandbox_id}", TOKEN_ALICE, {"X-Sandbox-Namespace": "team-a"}
    )
    assert read.status_code == 200, (role, read.text)
    assert read.json()["sandboxID"] == sandbox_id
    assert ("envdAccessToken" in read.json()) is gets_token, role
    if gets_token:
        assert read.json()["envdAccessToken"] == token
    assert world.verbs_reviewed()[-1] == ("alice@example.com", "team-a", "update")
    # Without the token, the data plane stays shut to the reader.
    plane = await world.http.get("/health", headers={"E2b-Sandbox-Id": sandbox_id})
    assert plane.status_code == 401


async def test_a_restore_or_a_fork_needs_the_right_to_act_not_only_to_create(
    world: World,
) -> None:
    """A copy of a sandbox's files with the copy's token is as much as the source's token: a
    role that may create and patch, but not update, gets neither."""
    world.grant(SA_A, "team-a", *EVERY_VERB)
    created = await world.call("POST", "/sandboxes", TOKEN_A, json={})
    sandbox_id = created.json()["sandboxID"]
    taken = await world.call("POST", f"/sandboxes/{sandbox_id}/snapshots", TOKEN_A, json={})
    assert taken.status_code == 201, taken.text
    world.grant("group:developers", "team-a", "get", "list", "create", "patch")
    named = {"X-Sandbox-Namespace": "team-a"}
    restore = {"templateID": taken.json()["snapshotID"]}
    for method, path, body in (
        ("POST", "/sandboxes", restore),
        ("POST", f"/sandboxes/{sandbox_id}/fork", {}),
    ):
        answer = await world.call(method, path, TOKEN_ALICE, named, json=body)
        assert answer.status_code == 403, (path, answer.text)
        assert "needs the right to act on the namespace's sandboxes" in answer.json()["message"]
    made = [k[2] for k in world.cluster.objects if k[:2] == (PLURAL, "team-a")]
    assert made == [sandbox_id]
    # Whoever may act gets the copy.
    world.grant(SA_A, "team-a", "update")
    restored = await world.call("POST", "/sandboxes", TOKEN_A, json=restore)
    assert restored.status_code == 201, restored.text


async def test_a_token_without_create_gets_403_and_nothing_is_written(world: World) -> None:
    world.grant(SA_A, "team-a", "get", "list")
    answer = await world.call("POST", "/sandboxes", TOKEN_A, json={})
    assert answer.status_code == 403
    assert answer.json() == {
        "code": 403,
        "message": f"{SA_A} may not create workspacesandboxes in namespace 'team-a'",
    }
    assert world.cluster.written == []
    assert (await world.call("GET", "/v2/sandboxes", TOKEN_A)).status_code == 200


@pytest.mark.parametrize(
    "given",
    [
        {"X-API-Key": "eyJhbGciOiJSUzI1NiJ9.made-up.signature"},
        {"Authorization": "Bearer eyJhbGciOiJSUzI1NiJ9.made-up.signature"},
        {"X-API-Key": "short"},
        {"X-API-Key": "has a space in it, so it is no token"},
        {},
    ],
)
async def test_an_invalid_or_missing_token_is_401_as_e2b(
    world: World, given: dict[str, str]
) -> None:
    world.grant(SA_A, "team-a", *EVERY_VERB)
    answer = await world.http.get("/v2/sandboxes", headers=given)
    assert answer.status_code == 401
    assert answer.json() == {
        "code": 401,
        "message": "Invalid API key, please check your X-API-Key header",
    }
    assert world.cluster.authority.access_reviews == []


async def test_a_bearer_token_is_accepted_where_no_api_key_is_sent(world: World) -> None:
    world.grant(SA_A, "team-a", "list")
    answer = await world.http.get("/v2/sandboxes", headers={"Authorization": f"Bearer {TOKEN_A}"})
    assert (answer.status_code, answer.json()) == (200, [])


async def test_a_user_that_is_no_service_account_names_its_namespace(world: World) -> None:
    world.grant("group:developers", "team-a", "list")
    unnamed = await world.call("GET", "/v2/sandboxes", TOKEN_ALICE)
    assert unnamed.status_code == 400
    assert unnamed.json()["message"] == (
        "name the namespace to act in with the x-sandbox-namespace header"
    )
    named = await world.call("GET", "/v2/sandboxes", TOKEN_ALICE, {"X-Sandbox-Namespace": "team-a"})
    assert (named.status_code, named.json()) == (200, [])
    review = world.cluster.authority.access_reviews[-1]["spec"]
    assert (review["user"], review["groups"]) == ("alice@example.com", ["developers"])
    other = await world.call("GET", "/v2/sandboxes", TOKEN_ALICE, {"X-Sandbox-Namespace": "team-b"})
    assert other.status_code == 403
    bad = await world.call("GET", "/v2/sandboxes", TOKEN_ALICE, {"X-Sandbox-Namespace": "../x"})
    assert bad.status_code == 400


ROUTES = [
    ("POST", "/v2/sandboxes", ["create"]),
    ("POST", "/sandboxes", ["create"]),
    ("GET", "/v2/sandboxes", ["list"]),
    ("GET", "/sandboxes", ["list"]),
    ("POST", "/v2/sandboxes/{id}/connect", ["get", "patch"]),
    ("POST", "/sandboxes/{id}/connect", ["get", "patch"]),
    ("GET", "/sandboxes/{id}", ["get"]),
    ("DELETE", "/sandboxes/{id}", ["delete"]),
    ("POST", "/sandboxes/{id}/timeout", ["patch"]),
    ("POST", "/sandboxes/{id}/pause", ["patch"]),
    ("GET", "/sandboxes/{id}/metrics", ["get"]),
    ("GET", "/templates/aliases/base", ["list"]),
    ("POST", "/sandboxes/{id}/snapshots", ["patch"]),
    ("POST", "/sandboxes/{id}/fork", ["get", "patch", "create"]),
    ("GET", "/snapshots", ["list"]),
    ("DELETE", f"/templates/snapshot-{'z' * 20}-one", ["patch"]),
    ("GET", "/templates", ["list"]),
    ("GET", "/templates/base", ["list"]),
    ("GET", "/templates/base/tags", ["list"]),
]


@pytest.mark.parametrize(("method", "path", "verbs"), ROUTES)
async def test_every_route_asks_for_its_verbs(
    world: World, method: str, path: str, verbs: list[str]
) -> None:
    world.grant(SA_A, "team-a", *EVERY_VERB)
    # An unknown template or sandbox (or an empty list): reviewed, and nothing made.
    body = {"templateID": "none", "timeout": 10}
    answer = await world.call(method, path.replace("{id}", "z" * 20), TOKEN_A, json=body)
    assert answer.status_code in {200, 400, 404}, answer.text
    assert world.verbs_reviewed() == [(SA_A, "team-a", v) for v in verbs]

    # Without the last of them, the route is refused.
    world.cluster.authority.grants.discard((SA_A, "team-a", verbs[-1]))
    world.clock.now += 60  # past the cache
    refused = await world.call(method, path.replace("{id}", "z" * 20), TOKEN_A, json=body)
    assert refused.status_code == 403
    assert f"may not {verbs[-1]} workspacesandboxes" in refused.json()["message"]


def test_the_verb_table_covers_every_control_route() -> None:
    control = Control(backend=None, domain="x")  # type: ignore[arg-type]  # routes only
    named = {control.resolve(m, p.replace("{id}", "z" * 20))[0] for m, p, _ in ROUTES}
    every = {f"{verb} {template}" for verb, _, template, _ in control.routes}
    refused = {f"{r.method} {r.template}" for r in not_offered.ROUTES}
    assert named == every - refused
    assert named == set(VERBS)


async def test_reviews_are_cached_per_token_namespace_and_verb_for_a_short_time(
    world: World,
) -> None:
    world.grant(SA_A, "team-a", "list", "get")
    world.grant(SA_A, "team-b", "list")
    authority = world.cluster.authority
    for _ in range(3):
        assert (await world.call("GET", "/v2/sandboxes", TOKEN_A)).status_code == 200
        assert (await world.call("GET", "/sandboxes/" + "z" * 20, TOKEN_A)).status_code == 404
        made_up = await world.call("GET", "/v2/sandboxes", "eyJ.made-up.token-that-is-long")
        assert made_up.status_code == 401
    assert len(authority.token_reviews) == 2
    assert world.verbs_reviewed() == [(SA_A, "team-a", "list"), (SA_A, "team-a", "get")]

    # Another namespace is another question, never answered from the cache.
    elsewhere = await world.call("GET", "/v2/sandboxes", TOKEN_A, {"X-Sandbox-Namespace": "team-b"})
    assert elsewhere.status_code == 200
    assert world.verbs_reviewed()[-1] == (SA_A, "team-b", "list")

    # A revoked grant holds until the cache's time is up, and not a moment longer.
    authority.grants.discard((SA_A, "team-a", "list"))
    world.clock.now += 9.9
    assert (await world.call("GET", "/v2/sandboxes", TOKEN_A)).status_code == 200
    world.clock.now += 0.1
    assert (await world.call("GET", "/v2/sandboxes", TOKEN_A)).status_code == 403
    assert len(authority.token_reviews) == 3  # the token reviewed again after the time
    made_up = await world.call("GET", "/v2/sandboxes", "eyJ.made-up.token-that-is-long")
    assert made_up.status_code == 401
    assert len(authority.token_reviews) == 4  # and a refused one too

    # A token deleted meanwhile stops working at the next review.
    del authority.tokens[TOKEN_A]
    world.clock.now += 10
    assert (await world.call("GET", "/v2/sandboxes", TOKEN_A)).status_code == 401


async def test_audiences_are_asked_for_and_a_token_for_another_one_is_refused(
    world: World,
) -> None:
    world.grant(SA_A, "team-a", "list")
    world.cluster.authority.tokens[TOKEN_A]["audiences"] = ["https://sandboxes.example.com"]
    world.reviews.audiences = ("https://kubernetes.default.svc",)
    assert (await world.call("GET", "/v2/sandboxes", TOKEN_A)).status_code == 401
    assert world.cluster.authority.token_reviews[-1]["spec"]["audiences"] == [
        "https://kubernetes.default.svc"
    ]
    world.reviews.audiences = ("https://sandboxes.example.com",)
    world.clock.now += 60
    assert (await world.call("GET", "/v2/sandboxes", TOKEN_A)).status_code == 200


class SlowAuthn:
    """TokenReview that knows one token and holds every other one's review until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.reviews: list[str] = []

    def create_token_review(self, review: client.V1TokenReview) -> Any:
        self.reviews.append(review.spec.token)
        if review.spec.token != TOKEN_A:
            self.release.wait(10)
            return client.V1TokenReview(spec=review.spec, status={"authenticated": False})
        user = client.V1UserInfo(username=SA_A)
        return client.V1TokenReview(
            spec=review.spec, status=client.V1TokenReviewStatus(authenticated=True, user=user)
        )


async def test_a_flood_of_made_up_tokens_neither_holds_up_nor_evicts_a_known_caller() -> None:
    authn, clock = SlowAuthn(), Clock()
    reviews = TokenReviews(authn, None, clock=clock, cache_size=8)
    assert await reviews.user(TOKEN_A) is not None  # seen authenticated once
    flood = [
        asyncio.ensure_future(reviews.user(f"eyJ.made-up-{n:04d}.signature")) for n in range(50)
    ]
    await asyncio.sleep(0.2)  # the first strangers' reviews are under way, the rest wait
    assert len(authn.reviews) == 1 + MAX_STRANGERS_IN_FLIGHT
    clock.now += 60  # the known caller's answer has expired: it must be reviewed again
    began = time.monotonic()
    again = await asyncio.wait_for(reviews.user(TOKEN_A), 5)
    assert again is not None
    assert time.monotonic() - began < 1
    authn.release.set()
    assert await asyncio.gather(*flood) == [None] * 50
    # The refused ones are kept apart: the known caller's answer is still cached.
    before = len(authn.reviews)
    assert await reviews.user(TOKEN_A) is not None
    assert len(authn.reviews) == before


def test_the_cache_keeps_at_most_its_size_and_drops_the_oldest_first() -> None:
    clock = Clock()
    cache: Cache[str, int] = Cache(size=3, seconds=5, clock=clock)
    for n, key in enumerate("abcd"):
        cache.put(key, n)
    assert len(cache) == 3
    assert cache.get("a") == (False, None)
    assert cache.get("d") == (True, 3)
    cache.put("b", 10)  # refreshed: now the newest
    cache.put("e", 4)
    assert [cache.get(k)[0] for k in "bcde"] == [True, False, True, True]
    clock.now = 4.9
    assert cache.get("b") == (True, 10)
    clock.now = 5.0
    assert cache.get("b") == (False, None)
    assert len(cache) == 2


def test_a_negative_answer_is_kept_like_a_positive_one() -> None:
    clock = Clock()
    cache: Cache[str, bool | None] = Cache(size=2, seconds=1, clock=clock)
    cache.put("bad", None)
    assert cache.get("bad") == (True, None)
    clock.now = 1
    assert cache.get("bad") == (False, None)


@pytest.mark.parametrize(
    ("username", "named", "expected"),
    [
        (SA_A, None, "team-a"),
        (SA_A, "team-b", "team-b"),
        ("alice", "team-b", "team-b"),
        ("system:serviceaccount:team-a", None, None),
        ("alice", None, None),
        (SA_A, "Team-B", None),
    ],
)
def test_the_namespace_of_a_call(username: str, named: str | None, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(GatewayError) as caught:
            namespace_for(User(username), named)
        assert caught.value.status == 400
    else:
        assert namespace_for(User(username), named) == expected


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[kube_fake.Cluster, str]]:
    """The gateway with token reviews on a loopback port, for the SDK; no platform needed."""
    port = free_port()
    servers: list[uvicorn.Server] = []

    async def serve(kubeconfig: Path) -> None:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        settings = Settings(templates={"base": BASE}, seed=SEED, ready_seconds=5)
        backend = KubernetesBackend(client.CustomObjectsApi(api), settings, httpx.AsyncClient())
        reviews = TokenReviews(client.AuthenticationV1Api(api), client.AuthorizationV1Api(api))
        async with httpx.AsyncClient() as upstream:
            app = build_app(backend, upstream, keys=reviews, domain="e2b.localhost")
            server = uvicorn.Server(
                uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="error")
            )
            servers.append(server)
            await server.serve()
        await backend.close()
        api.close()

    with kube_fake.serve() as (cluster, url):
        cluster.authority.tokens[TOKEN_A] = {"username": SA_A}
        kubeconfig = kube_fake.kubeconfig(url, tmp_path)
        thread = threading.Thread(target=lambda: asyncio.run(serve(kubeconfig)))
        thread.start()
        deadline = time.monotonic() + 15
        while not (servers and servers[0].started):
            assert time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.05)
        try:
            yield cluster, f"http://127.0.0.1:{port}"
        finally:
            servers[0].should_exit = True
            thread.join(timeout=30)


def test_the_unmodified_sdk_carries_a_token_as_its_api_key(
    served: tuple[kube_fake.Cluster, str],
) -> None:
    cluster, url = served
    given = {"api_url": url, "sandbox_url": url}
    cluster.authority.grants |= {(SA_A, "team-a", "list"), (SA_A, "team-a", "create")}
    assert Sandbox.list(api_key=TOKEN_A, **given).next_items() == []
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key="eyJ.not-a-token-anyone-knows", **given).next_items()
    with pytest.raises(SandboxException, match=r"403: .* may not list workspacesandboxes"):
        Sandbox.list(
            api_key=TOKEN_A, api_headers={"X-Sandbox-Namespace": "team-b"}, **given
        ).next_items()

    # The namespace's ResourceQuota used up: E2B's 429, the SDK's RateLimitException.
    cluster.authority.refusals[PLURAL] = kube_fake.quota_exceeded(PLURAL)
    with pytest.raises(RateLimitException, match="sandbox quota is used up"):
        Sandbox.create(api_key=TOKEN_A, **given)
    assert cluster.written == []
