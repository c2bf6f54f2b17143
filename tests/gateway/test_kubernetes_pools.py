"""Warm pools on a cluster: two gateway replicas over the fake API server and the stand-in platform.

Each replica is a `KubernetesBackend` of its own (its own client, watch and cache) and its own
app, as two pods would be; their API calls run on threads, so their claims really race at the
fake API server. Every `/init` the gateways send is recorded, to show what reached which agent.
"""

import asyncio
import contextlib
import gc
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config
from prometheus_client import generate_latest
from workspace_gateway.app import build_app
from workspace_gateway.backend import NewSandbox
from workspace_gateway.keys import StaticKeys
from workspace_gateway.kubernetes import sealed
from workspace_gateway.kubernetes.backend import KubernetesBackend
from workspace_gateway.kubernetes.objects import (
    ENV_VARS,
    MADE_NOTE,
    PLURAL,
    POOL_LABEL,
    POOL_TEMPLATE_LABEL,
    READY_NOTE,
    Settings,
    access_token,
)
from workspace_gateway.kubernetes.pools import (
    LIMITS_CONFIGMAP,
    plan,
    pooled_namespaces,
    size_of,
    tenant_sizes,
)
from workspace_gateway.kubernetes.templates import Pool, Template, TemplateError, parse
from workspace_gateway.metrics import Metrics

from tests.gateway import kube_fake
from tests.gateway.stand_in import BASE, KEY_A, KEY_B, SEED, Platform, xrd
from tests.schemas import validate_xrd_object

pytestmark = pytest.mark.e2e  # starts agents or gateways

NS = "team-a"
MEMBER_SELECTOR = f"{POOL_LABEL}=member"


def pooled(size: int, temperature: str = "running") -> Template:
    return Template(
        image=BASE.image,
        preset=BASE.preset,
        resources=BASE.resources,
        pool=Pool(size=size, temperature=temperature),
    )


@dataclass
class Replica:
    backend: KubernetesBackend
    http: httpx.AsyncClient
    metrics: Metrics
    upstream: httpx.AsyncClient

    async def call(self, method: str, path: str, key: str = KEY_A, **kw: Any) -> httpx.Response:
        return await self.http.request(method, path, headers={"X-API-Key": key}, **kw)

    def figure(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return value or 0.0


@dataclass
class World:
    cluster: kube_fake.Cluster
    platform: Platform
    replicas: list[Replica]
    inits: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """Every `/init` sent: the agent's host, and the body."""

    def members(self, namespace: str = NS) -> list[dict[str, Any]]:
        """What `kubectl get wss -l gateway.sandbox.cozystack.io/pool=member` lists."""
        return [
            o
            for (r, n, _), o in self.cluster.objects.items()
            if r == PLURAL and n == namespace and kube_fake.selected(o, MEMBER_SELECTOR)
        ]

    def ready(self, namespace: str = NS) -> list[str]:
        return sorted(
            o["metadata"]["name"]
            for o in self.members(namespace)
            if o["metadata"]["annotations"].get(READY_NOTE) == "true"
        )

    async def seen_by_all(self, names: list[str]) -> None:
        """Until every replica's cache holds these members as ready."""
        for replica in self.replicas:
            assert await replica.backend.ready()
        for _ in range(200):
            if all(
                {
                    k[1]
                    for k, o in r.backend.cache.objects.items()
                    if (o["metadata"].get("annotations") or {}).get(READY_NOTE) == "true"
                }
                >= set(names)
                for r in self.replicas
            ):
                return
            await asyncio.sleep(0.02)
        raise AssertionError("the caches never saw the members")

    async def refill(self) -> None:
        await self.replicas[0].backend.refill(lambda: True)
        await self.seen_by_all(self.ready())


@contextlib.asynccontextmanager
async def two_replicas(
    tmp_path: Path, templates: dict[str, Template], replicas: int = 2
) -> AsyncIterator[World]:
    with kube_fake.serve() as (cluster, url):
        kubeconfig = str(kube_fake.kubeconfig(url, tmp_path))
        platform = Platform(cluster, tmp_path)
        world = World(cluster, platform, [])

        async def record(request: httpx.Request) -> None:
            if request.url.path == "/init":
                world.inits.append((request.url.host, json.loads(request.content)))

        apis = []
        for _ in range(replicas):
            api = config.new_client_from_config(config_file=kubeconfig)
            apis.append(api)
            settings = Settings(
                templates=templates,
                seed=SEED,
                agent_port=platform.port,
                workdir=".",
                ready_seconds=15,
            )
            metrics = Metrics()
            backend = KubernetesBackend(
                client.CustomObjectsApi(api),
                settings,
                httpx.AsyncClient(event_hooks={"request": [record]}),
                metrics=metrics,
                core=client.CoreV1Api(api),
            )
            backend.LIMITS_EVERY = 0.0
            upstream = httpx.AsyncClient(timeout=30)
            app = build_app(
                backend,
                upstream,
                keys=StaticKeys({KEY_A: NS, KEY_B: "team-b"}),
                domain="sbx.example.com",
            )
            http = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://api.sbx.example.com",
                timeout=30,
            )
            world.replicas.append(Replica(backend, http, metrics, upstream))
        controller = asyncio.create_task(platform.run())
        try:
            yield world
        finally:
            controller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await controller
            await platform.close()
            gc.collect()
            for replica in world.replicas:
                await replica.http.aclose()
                await replica.upstream.aclose()
                await replica.backend.close()
            for api in apis:
                api.close()
        assert not [t for t in threading.enumerate() if t.name == "sandbox-watch"]
        for obj in cluster.written:
            if obj["kind"] == "WorkspaceSandbox":
                assert validate_xrd_object(xrd(), obj) == [], obj


async def open_namespace(world: World, key: str = KEY_A) -> str:
    """A first, cold, create: the gateway is in use here now, so the namespace gets pools."""
    made = await world.replicas[0].call("POST", "/sandboxes", key, json={})
    assert made.status_code == 201, made.text
    return str(made.json()["sandboxID"])


async def test_two_replicas_never_hand_out_the_same_member(tmp_path: Path) -> None:
    """Round after round, four creates race on two replicas for a pool of three."""
    async with two_replicas(tmp_path, {"base": pooled(3)}) as world:
        await world.replicas[0].call("POST", "/sandboxes", json={})  # kept: the namespace's use
        handed: list[str] = []
        for _ in range(5):
            await world.refill()
            members = world.ready()
            assert len(members) == 3
            creates = [
                world.replicas[i % 2].call(
                    "POST", "/sandboxes", json={"envVars": {"N": str(i)}, "metadata": {"n": str(i)}}
                )
                for i in range(4)
            ]
            answers = await asyncio.gather(*creates)
            assert [a.status_code for a in answers] == [201] * 4, [a.text for a in answers]
            ids = [a.json()["sandboxID"] for a in answers]
            assert len(set(ids)) == 4
            hits = [i for i in ids if i in members]
            assert sorted(hits) == members  # each member handed out once, the fourth cold
            for i, answer in enumerate(answers):
                got = answer.json()
                xr = world.cluster.objects[PLURAL, NS, got["sandboxID"]]
                assert got["envdAccessToken"] == access_token(SEED, NS, got["sandboxID"])
                notes = xr["metadata"]["annotations"]
                opened = sealed.unseal(SEED, NS, got["sandboxID"], notes[ENV_VARS])
                assert opened == {"N": str(i)}
            handed += hits
            for sandbox_id in ids:
                await world.replicas[1].call("DELETE", f"/sandboxes/{sandbox_id}")
        assert len(handed) == len(set(handed)) == 15
        hits_total = sum(
            r.figure("workspace_gateway_pool_hits_total", namespace=NS, template="base")
            for r in world.replicas
        )
        misses = sum(
            r.figure("workspace_gateway_pool_misses_total", namespace=NS, template="base")
            for r in world.replicas
        )
        assert (hits_total, misses) == (15, 5 + 1)


async def test_members_are_invisible_until_handed_out_then_only_their_callers(
    tmp_path: Path,
) -> None:
    async with two_replicas(tmp_path, {"base": pooled(2)}) as world:
        a = world.replicas[0]
        await a.backend.refill(lambda: True)
        assert world.members() == []  # nobody used the gateway here yet: no pool
        cold = await open_namespace(world)
        await world.refill()
        members = world.ready()
        assert len(members) == 2
        assert len(world.inits) == 1  # the cold create's: members get none
        for obj in world.members():
            assert obj["metadata"]["labels"][POOL_TEMPLATE_LABEL] == "base"
            assert ENV_VARS not in obj["metadata"]["annotations"]
        for sandbox_id in members:
            for method, path in (
                ("GET", f"/sandboxes/{sandbox_id}"),
                ("DELETE", f"/sandboxes/{sandbox_id}"),
                ("POST", f"/sandboxes/{sandbox_id}/connect"),
                ("POST", f"/sandboxes/{sandbox_id}/pause"),
            ):
                answer = await a.call(method, path, json={})
                assert answer.status_code == 404, (method, answer.text)
            # Not even with the token it will have once handed out.
            would_be = access_token(SEED, NS, sandbox_id)
            plane = await a.http.get(
                "/health", headers={"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": would_be}
            )
            assert plane.status_code == 502
            assert await a.backend.locate(sandbox_id) == ()
        assert [s["sandboxID"] for s in (await a.call("GET", "/v2/sandboxes")).json()] == [cold]
        assert [s["sandboxID"] for s in (await a.call("GET", "/sandboxes")).json()] == [cold]
        await a.backend.reap(datetime.now(UTC) + timedelta(days=1))  # members have no end
        assert world.ready() == members
        assert (PLURAL, NS, cold) not in world.cluster.objects

        first = await a.call("POST", "/sandboxes", json={"envVars": {"SECRET": "one"}})
        second = await world.replicas[1].call(
            "POST", "/sandboxes", json={"envVars": {"SECRET": "two"}}
        )
        one, two = first.json(), second.json()
        assert sorted([one["sandboxID"], two["sandboxID"]]) == members
        assert world.members() == []
        listed = (await a.call("GET", "/v2/sandboxes")).json()
        assert sorted(s["sandboxID"] for s in listed) == members
        assert (await a.call("GET", f"/sandboxes/{one['sandboxID']}", KEY_B)).status_code == 404

        # /init went to each sandbox's own agent, with its own token and env vars only.
        endpoints = {
            s["sandboxID"]: world.cluster.objects[PLURAL, NS, s["sandboxID"]]["status"]["endpoint"]
            for s in (one, two)
        }
        for sandbox, secret in ((one, "one"), (two, "two")):
            sent = [body for host, body in world.inits if host == endpoints[sandbox["sandboxID"]]]
            assert len(sent) == 1
            assert sent[0]["envVars"] == {"SECRET": secret}
            assert sent[0]["accessToken"] == sandbox["envdAccessToken"]
        assert one["envdAccessToken"] != two["envdAccessToken"]
        for sandbox, other in ((one, two), (two, one)):
            (world.platform.roots[NS, sandbox["sandboxID"]] / "hello.txt").write_text("hi")
            plane = {"E2b-Sandbox-Id": sandbox["sandboxID"]}
            own = await a.http.get(
                "/files?path=hello.txt",
                headers={**plane, "X-Access-Token": sandbox["envdAccessToken"]},
            )
            theirs = await a.http.get(
                "/files?path=hello.txt",
                headers={**plane, "X-Access-Token": other["envdAccessToken"]},
            )
            assert (own.status_code, theirs.status_code) == (200, 401)

        await world.refill()  # topped up again
        assert len(world.ready()) == 2
        assert set(world.ready()).isdisjoint(members)
        figures = generate_latest(a.metrics.registry).decode()
        assert "workspace_gateway_pool_topup_seconds_count" in figures
        members_now = a.figure(
            "workspace_gateway_pool_members", namespace=NS, template="base", temperature="running"
        )
        assert members_now == 2


async def test_the_audit_line_says_whether_a_create_came_from_the_pool(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with two_replicas(tmp_path, {"base": pooled(1)}) as world:
        a = world.replicas[0]
        await open_namespace(world)
        await world.refill()
        caplog.set_level(logging.INFO, logger="workspace_gateway.audit")
        caplog.clear()
        for _ in range(2):
            assert (await a.call("POST", "/sandboxes", json={})).status_code == 201
    lines = [
        json.loads(r.getMessage()) for r in caplog.records if r.name == "workspace_gateway.audit"
    ]
    assert [(line["route"], line["pool"]) for line in lines] == [
        ("POST /sandboxes", "hit"),
        ("POST /sandboxes", "miss"),
    ]


async def test_a_suspended_member_resumes_on_hand_out(tmp_path: Path) -> None:
    async with two_replicas(tmp_path, {"base": pooled(1, "suspended")}, replicas=1) as world:
        (a,) = world.replicas
        await open_namespace(world)
        await world.refill()
        (member,) = world.ready()
        for _ in range(100):
            xr = world.cluster.objects[PLURAL, NS, member]
            if (xr.get("status") or {}).get("phase") == "Suspended":
                break
            await asyncio.sleep(0.05)
        assert xr["spec"]["power"] == "Suspended"
        assert (NS, member) not in world.platform.agents  # costs only its disk
        made = await a.call(
            "POST", "/sandboxes", json={"envVars": {"K": "v"}, "autoPause": True, "timeout": 60}
        )
        assert made.status_code == 201, made.text
        assert made.json()["sandboxID"] == member
        xr = world.cluster.objects[PLURAL, NS, member]
        assert xr["spec"]["power"] == "Running"
        assert "suspendAt" in xr["spec"]["lifetime"]
        assert xr["metadata"]["labels"][POOL_LABEL] == "handed-out"
        token = made.json()["envdAccessToken"]
        (world.platform.roots[NS, member] / "hello.txt").write_text("hi")
        plane = {"E2b-Sandbox-Id": member, "X-Access-Token": token}
        assert (await a.http.get("/files?path=hello.txt", headers=plane)).status_code == 200
        assert world.inits[-1][1]["envVars"] == {"K": "v"}
        assert a.figure("workspace_gateway_pool_hits_total", namespace=NS, template="base") == 1


async def test_a_member_failing_its_health_check_is_deleted_not_handed_out(
    tmp_path: Path,
) -> None:
    async with two_replicas(tmp_path, {"base": pooled(1)}, replicas=1) as world:
        (a,) = world.replicas
        await open_namespace(world)
        await world.refill()
        (member,) = world.ready()
        await world.platform.stop((NS, member))  # its agent is gone; the status still says Ready
        made = await a.call("POST", "/sandboxes", json={})
        assert made.status_code == 201, made.text
        assert made.json()["sandboxID"] != member  # a cold create instead
        assert (PLURAL, NS, member) not in world.cluster.objects
        assert not [
            host
            for host, body in world.inits
            if body.get("accessToken") == access_token(SEED, NS, member)
        ]
        assert a.figure("workspace_gateway_pool_misses_total", namespace=NS, template="base") == 2


async def test_a_tenant_lowers_its_pool_and_cannot_raise_it(tmp_path: Path) -> None:
    async with two_replicas(tmp_path, {"base": pooled(2)}, replicas=1) as world:
        await open_namespace(world)
        limits = ("configmaps", NS, LIMITS_CONFIGMAP)

        def tenant_writes(data: dict[str, str]) -> None:
            body = {"apiVersion": "v1", "kind": "ConfigMap", "data": data}
            world.cluster.put(
                limits, {**body, "metadata": {"name": LIMITS_CONFIGMAP, "namespace": NS}}
            )

        tenant_writes({"base": "1"})
        await world.refill()
        assert len(world.ready()) == 1
        tenant_writes({"base": "50"})
        await world.refill()
        assert len(world.ready()) == 2
        tenant_writes({"base": "none, please"})
        await world.refill()
        await world.refill()
        assert world.members() == []
        del world.cluster.objects[limits]
        await world.refill()
        assert len(world.ready()) == 2
        # Another tenant's ConfigMap is read for its own namespace only.
        assert world.members("team-b") == []


async def test_old_and_surplus_members_are_removed_and_replaced(tmp_path: Path) -> None:
    templates = {"base": pooled(2)}
    async with two_replicas(tmp_path, templates, replicas=1) as world:
        (a,) = world.replicas
        await open_namespace(world)
        await world.refill()
        old, young = world.ready()
        long_ago = (datetime.now(UTC) - timedelta(hours=25)).isoformat()
        world.cluster.update(
            (PLURAL, NS, old), lambda o: o["metadata"]["annotations"].update({MADE_NOTE: long_ago})
        )
        await world.seen_by_all([old, young])
        for _ in range(100):
            cached = a.backend.cache.get((NS, old)) or {}
            if cached["metadata"]["annotations"][MADE_NOTE] == long_ago:
                break
            await asyncio.sleep(0.02)
        await world.refill()
        assert old not in world.ready()
        assert young in world.ready()
        assert len(world.ready()) == 2
        # The platform lowers the size: the surplus goes, oldest first.
        settings = a.backend.settings
        a.backend.settings = Settings(**{**settings.__dict__, "templates": {"base": pooled(1)}})
        newest = max(world.members(), key=lambda o: o["metadata"]["annotations"][MADE_NOTE])
        await world.refill()
        assert world.ready() == [newest["metadata"]["name"]]


async def test_a_pool_member_is_never_handed_to_another_namespace(tmp_path: Path) -> None:
    async with two_replicas(tmp_path, {"base": pooled(1)}, replicas=1) as world:
        (a,) = world.replicas
        await open_namespace(world)
        await world.refill()
        (member,) = world.ready()
        made = await a.call("POST", "/sandboxes", KEY_B, json={})
        assert made.status_code == 201
        assert made.json()["sandboxID"] != member
        assert world.ready() == [member]
        created = await a.backend.create(NS, NewSandbox(template="base", timeout=60))
        assert created.sandbox_id == member


# --- The plain decisions


def test_the_pool_settings_are_checked() -> None:
    text = "templates:\n  base:\n    image: x\n    pool: {size: 3, temperature: running}\n"
    assert parse(text, "m.yaml")["base"].pool == Pool(size=3, temperature="running")
    assert parse("templates: {base: {image: x}}", "m.yaml")["base"].pool == Pool(0, "suspended")
    bad = {
        "templates: {base: {image: x, pool: 3}}": "m.yaml: templates.base.pool must be a mapping such as {size: 2}",
        "templates: {base: {image: x, pool: {size: -1}}}": "m.yaml: templates.base.pool.size must be a whole number from 0 to 100",
        "templates: {base: {image: x, pool: {size: true}}}": "m.yaml: templates.base.pool.size must be a whole number from 0 to 100",
        "templates: {base: {image: x, pool: {size: '2'}}}": "m.yaml: templates.base.pool.size must be a whole number from 0 to 100",
        "templates: {base: {image: x, pool: {size: 1, temperature: warm}}}": "m.yaml: templates.base.pool.temperature must be one of ['running', 'suspended']",
        "templates: {base: {image: x, pool: {sizes: 1}}}": "m.yaml: templates.base.pool has unknown fields ['sizes']",
    }
    for text_, message in bad.items():
        with pytest.raises(TemplateError) as e:
            parse(text_, "m.yaml")
        assert str(e.value) == message


def test_a_tenant_only_lowers() -> None:
    assert tenant_sizes({"base": "1", "gpu": " 0 ", "big": "9", "bad": "x", "neg": "-3"}) == {
        "base": 1,
        "gpu": 0,
        "big": 9,
        "bad": 0,
        "neg": 0,
    }
    assert tenant_sizes(None) == {}
    template = pooled(4)
    assert size_of("base", template, {}) == 4
    assert size_of("base", template, {"base": 2}) == 2
    assert size_of("base", template, {"base": 40}) == 4
    assert size_of("base", None, {"base": 40}) == 0


def member(
    name: str, made: datetime, *, ready: bool = True, spec: Template = BASE
) -> dict[str, Any]:
    notes = {MADE_NOTE: made.isoformat(), **({READY_NOTE: "true"} if ready else {})}
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {POOL_LABEL: "member"},
            "annotations": notes,
        },
        "spec": {**spec.spec(), "power": "Suspended"},
    }


def test_the_plan_removes_old_stale_stuck_and_surplus_members_then_tops_up() -> None:
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    boot = timedelta(minutes=10)
    hour: Callable[[float], datetime] = lambda h: now - timedelta(hours=h)  # noqa: E731
    members = [
        member("old", hour(25)),
        member("stuck", hour(1), ready=False),
        member("booting", now - timedelta(minutes=1), ready=False),
        member("stale", hour(1), spec=Template(image="other")),
        member("a", hour(3)),
        member("b", hour(2)),
    ]
    # What Crossplane adds to an XR's spec makes no member stale.
    members[5]["spec"]["crossplane"] = {"compositionRef": {"name": "workspacesandbox"}}
    got = plan(members, pooled(2), 2, now, boot)
    removed = [o["metadata"]["name"] for o in got.remove]
    assert removed == ["old", "stuck", "stale", "a"]
    assert (got.make, got.ready) == (0, 1)
    assert plan(members[4:], pooled(5), 5, now, boot).make == 3
    assert [o["metadata"]["name"] for o in plan(members[4:], None, 0, now, boot).remove] == [
        "a",
        "b",
    ]


def test_only_namespaces_in_use_get_pools() -> None:
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    sandbox = {"metadata": {"name": "s", "namespace": "used", "labels": {}}}
    fresh = member("m", now - timedelta(hours=1))
    fresh["metadata"]["namespace"] = "pooled"
    old = member("o", now - timedelta(hours=30))
    old["metadata"]["namespace"] = "idle"
    assert pooled_namespaces([sandbox, fresh, old], now) == {"used", "pooled"}


async def test_a_create_that_restricts_egress_is_never_a_member(tmp_path: Path) -> None:
    """A member runs with its template's network; one asked for with less is made cold."""
    async with two_replicas(tmp_path, {"base": pooled(1)}, replicas=1) as world:
        await world.replicas[0].call("POST", "/sandboxes", json={})  # kept: the namespace's use
        await world.refill()
        (member,) = world.ready()
        made = await world.replicas[0].call(
            "POST", "/sandboxes", json={"allow_internet_access": False}
        )
        assert made.status_code == 201, made.text
        sandbox_id = made.json()["sandboxID"]
        assert sandbox_id != member
        assert world.cluster.objects[PLURAL, NS, sandbox_id]["spec"]["network"] == {
            "egress": "None"
        }
        assert world.ready() == [member]
        assert "network" not in world.cluster.objects[PLURAL, NS, member]["spec"]
