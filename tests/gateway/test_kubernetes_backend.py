"""The Kubernetes backend, through the real client against a fake API server and a real agent.

A small controller stands in for the platform: it marks a Running WorkspaceSandbox Ready with
`status.endpoint` at a real local agent, and a Suspended one Suspended, so create and connect
wait, `/health` and `/init` happen for real, and the SDK's token then opens the agent.
"""

import asyncio
import contextlib
import copy
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from workspace_gateway.kubernetes.objects import (
    ID_LABEL,
    PLURAL,
    access_token,
    preview_ports,
)
from workspace_gateway.kubernetes.templates import Template, TemplateError, parse, quantity

from tests.gateway import kube_fake, stand_in
from tests.gateway.stand_in import KEY_A, KEY_B, SEED, World

pytestmark = pytest.mark.e2e  # starts agents or gateways

world = stand_in.world  # the fake cluster, the stand-in platform and a gateway with API keys


async def test_create_writes_a_valid_xr_waits_for_the_agent_and_initialises_it(
    world: World,
) -> None:
    body = {"templateID": "base", "timeout": 120, "metadata": {"who": "me"}, "envVars": {"A": "1"}}
    answer = await world.call("POST", "/v2/sandboxes", KEY_A, json=body)
    assert answer.status_code == 201, answer.text
    sandbox_id = answer.json()["sandboxID"]
    token = answer.json()["envdAccessToken"]
    assert len(sandbox_id) == 20
    assert sandbox_id.isalnum()
    assert sandbox_id == sandbox_id.lower()
    assert token == access_token(SEED, "team-a", sandbox_id)
    xr = world.xr("team-a", sandbox_id)
    assert xr["metadata"]["labels"] == {ID_LABEL: sandbox_id}
    assert xr["spec"] == {
        "image": "ubuntu-24.04",
        "preset": "standard",
        "resources": {"cpu": "1500m", "memory": "4Gi", "disk": "20Gi"},
        "power": "Running",
    }
    assert token not in str(xr)
    assert world.cluster.written  # and each one is checked against the XRD at teardown

    # /init ran: the token opens the agent, files are read from the workdir.
    (world.platform.roots["team-a", sandbox_id] / "hello.txt").write_text("hi")
    plane = {"E2b-Sandbox-Id": sandbox_id}
    read = await world.http.get("/files?path=hello.txt", headers={**plane, "X-Access-Token": token})
    assert (read.status_code, read.text) == (200, "hi")
    wrong = await world.http.get("/files?path=hello.txt", headers={**plane, "X-Access-Token": "x"})
    assert wrong.status_code == 401

    info = await world.call("GET", f"/sandboxes/{sandbox_id}", KEY_A)
    assert info.json()["metadata"] == {"who": "me"}
    assert (info.json()["cpuCount"], info.json()["memoryMB"], info.json()["diskSizeMB"]) == (
        2,
        4096,
        20480,
    )
    assert info.json()["state"] == "running"


async def test_create_hears_of_readiness_from_the_watch_not_by_polling(world: World) -> None:
    world.platform.delay = 2.0  # several of the old half-second polls
    started = len(world.cluster.requests)
    answer = await world.call("POST", "/sandboxes", KEY_A, json={})
    assert answer.status_code == 201, answer.text
    sandbox_id, token = answer.json()["sandboxID"], answer.json()["envdAccessToken"]
    item = f"/apis/sandbox.cozystack.io/v1alpha1/namespaces/team-a/{PLURAL}/{sandbox_id}"
    seen = world.cluster.requests[started:]
    assert [m for m, p, _ in seen if p == item] == []  # not one GET of the object
    assert len(seen) <= 3  # the create, and the watch's list and watch when it starts
    plane = {"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": token}
    read = await world.http.get("/health", headers=plane)
    assert read.status_code == 204, read.text
    assert len(world.cluster.requests) == started + len(seen)  # found in the cache


async def test_an_unknown_template_is_a_404_and_writes_nothing(world: World) -> None:
    answer = await world.call("POST", "/sandboxes", KEY_A, json={"templateID": "gpu"})
    assert answer.status_code == 404
    assert answer.json() == {"code": 404, "message": "template 'gpu' not found"}
    assert world.cluster.written == []


async def test_pause_connect_and_kill(world: World) -> None:
    created = await world.call("POST", "/sandboxes", KEY_A, json={"autoPause": True, "timeout": 60})
    assert created.status_code == 201, created.text
    sandbox_id, token = created.json()["sandboxID"], created.json()["envdAccessToken"]
    assert "suspendAt" in world.xr("team-a", sandbox_id)["spec"]["lifetime"]

    assert (await world.call("POST", f"/sandboxes/{sandbox_id}/pause", KEY_A)).status_code == 204
    assert world.xr("team-a", sandbox_id)["spec"]["power"] == "Suspended"
    # Answered once the platform has acted, as E2B answers once paused: a connect right after
    # must not find the old phase and the agent about to be stopped.
    assert world.xr("team-a", sandbox_id)["status"]["phase"] == "Suspended"
    again = await world.call("POST", f"/sandboxes/{sandbox_id}/pause", KEY_A)
    assert again.status_code == 409
    listed = await world.call("GET", "/v2/sandboxes?state=paused", KEY_A)
    assert [s["sandboxID"] for s in listed.json()] == [sandbox_id]
    plane = {"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": token}
    down = await world.http.get("/health", headers=plane)
    assert down.status_code == 502

    resumed = await world.call(
        "POST", f"/sandboxes/{sandbox_id}/connect", KEY_A, json={"timeout": 600}
    )
    assert resumed.status_code == 201
    xr = world.xr("team-a", sandbox_id)
    assert xr["spec"]["power"] == "Running"
    assert xr["status"]["phase"] == "Running"
    end = datetime.fromisoformat(xr["spec"]["lifetime"]["suspendAt"])
    assert end > datetime.now(UTC) + timedelta(seconds=500)
    still = await world.call("POST", f"/sandboxes/{sandbox_id}/connect", KEY_A, json={})
    assert still.status_code == 200

    assert (await world.call("DELETE", f"/sandboxes/{sandbox_id}", KEY_A)).status_code == 204
    assert (PLURAL, "team-a", sandbox_id) not in world.cluster.objects
    gone = await world.call("GET", f"/sandboxes/{sandbox_id}", KEY_A)
    assert gone.status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/sandboxes/{}", None),
        ("DELETE", "/sandboxes/{}", None),
        ("POST", "/sandboxes/{}/pause", None),
        ("POST", "/sandboxes/{}/timeout", {"timeout": 10}),
        ("POST", "/sandboxes/{}/connect", {"timeout": 10}),
        ("GET", "/sandboxes/{}/metrics", None),
    ],
)
async def test_another_namespace_s_key_sees_nothing_and_changes_nothing(
    world: World, method: str, path: str, body: dict[str, int] | None
) -> None:
    sandbox_id = (await world.call("POST", "/sandboxes", KEY_A, json={})).json()["sandboxID"]
    before = world.xr("team-a", sandbox_id)["metadata"]["resourceVersion"]
    theirs = await world.call(method, path.format(sandbox_id), KEY_B, json=body)
    unknown_id = "z" * 20
    unknown = await world.call(method, path.format(unknown_id), KEY_B, json=body)
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json() == {"code": 404, "message": f"sandbox {sandbox_id!r} not found"}
    assert unknown.json() == {"code": 404, "message": f"sandbox {unknown_id!r} not found"}
    assert world.xr("team-a", sandbox_id)["metadata"]["resourceVersion"] == before
    assert (await world.call("GET", "/v2/sandboxes", KEY_B)).json() == []


async def test_a_same_named_sandbox_in_another_namespace_never_gets_the_traffic(
    world: World,
) -> None:
    created = (await world.call("POST", "/sandboxes", KEY_A, json={})).json()
    sandbox_id, token = created["sandboxID"], created["envdAccessToken"]
    (world.platform.roots["team-a", sandbox_id] / "hello.txt").write_text("mine")
    # Tenant B saw the ID and made a WorkspaceSandbox of that name by hand, label and all.
    squat = copy.deepcopy(world.xr("team-a", sandbox_id))
    del squat["status"]
    squat["metadata"]["namespace"] = "team-b"
    world.cluster.put((PLURAL, "team-b", sandbox_id), squat)
    for _ in range(100):
        if world.xr("team-b", sandbox_id).get("status"):
            break
        await asyncio.sleep(0.05)
    (world.platform.roots["team-b", sandbox_id] / "hello.txt").write_text("theirs")
    # Its agent is up; /init-ed by whoever reaches it first (here, tenant B), it serves them.
    theirs = f"http://{world.xr('team-b', sandbox_id)['status']['endpoint']}:{world.platform.port}"
    async with httpx.AsyncClient() as direct:
        for _ in range(100):
            with contextlib.suppress(httpx.TransportError):
                answer = await direct.post(theirs + "/init", json={"accessToken": "squatter"})
                break
            await asyncio.sleep(0.05)
        assert answer.status_code == 204, answer.text
        answer = await direct.get(
            theirs + "/files?path=hello.txt", headers={"X-Access-Token": "squatter"}
        )
        assert answer.text == "theirs"
    plane = {"E2b-Sandbox-Id": sandbox_id}
    for _ in range(5):
        read = await world.http.get(
            "/files?path=hello.txt", headers={**plane, "X-Access-Token": token}
        )
        assert (read.status_code, read.text) == (200, "mine")
    # The look-alike carries team-a's mark, which does not open in team-b: it is not the
    # gateway's, so it is neither cached nor a candidate, and nothing reaches it.
    assert (PLURAL, "team-b", sandbox_id) in world.cluster.objects
    assert ("team-b", sandbox_id) not in world.backend.cache.objects
    assert [s.namespace for s in await world.backend.locate(sandbox_id)] == ["team-a"]
    anonymous = await world.http.get("/files?path=hello.txt", headers=plane)
    assert anonymous.status_code == 401
    guessed = await world.http.get(
        "/files?path=hello.txt", headers={**plane, "X-Access-Token": "x"}
    )
    assert guessed.status_code == 401
    listed = await world.call("GET", "/v2/sandboxes", KEY_B)
    assert listed.json() == []


def test_the_mapping_file_is_checked() -> None:
    text = "templates:\n  base:\n    image: ubuntu-24.04\n    resources: {cpu: 2, memory: 512Mi}\n"
    assert parse(text, "m.yaml") == {
        "base": Template(image="ubuntu-24.04", resources={"cpu": "2", "memory": "512Mi"})
    }
    assert parse(text, "m.yaml")["base"].figures() == (2, 512, 0)
    bad = {
        "templates: []": "m.yaml: expected a non-empty 'templates' mapping",
        "templates: {base: {}}": "m.yaml: templates.base.image must be an image name",
        "templates: {base: {image: x, gpu: 1}}": "m.yaml: templates.base has unknown fields ['gpu']",
        "templates: {base: {image: x, preset: Big}}": "m.yaml: templates.base.preset must be a preset name",
        "templates: {base: {image: x, resources: {cpu: 0}}}": "m.yaml: templates.base.resources.cpu: 0 is not a quantity more than zero such as 2, 1500m or 4Gi",
        "templates: {base: {image: x, resources: {memory: 1e3}}}": "m.yaml: templates.base.resources.memory: '1e3' is not a quantity more than zero such as 2, 1500m or 4Gi",
        "templates: {'a b': {image: x}}": "m.yaml: 'a b' is not a template name",
        "templates: [": None,
    }
    for text_, message in bad.items():
        with pytest.raises(TemplateError) as e:
            parse(text_, "m.yaml")
        if message:
            assert str(e.value) == message


@pytest.mark.parametrize(
    ("text", "value"), [("2", 2), ("1500m", 1.5), ("4Gi", 4 * 2**30), ("1k", 1000), ("0.5", 0.5)]
)
def test_quantities(text: str, value: float) -> None:
    assert float(quantity(text)) == value


async def test_the_reaper_kills_expired_sandboxes_and_leaves_auto_pause_to_the_platform(
    world: World,
) -> None:
    doomed = (await world.call("POST", "/sandboxes", KEY_A, json={})).json()["sandboxID"]
    kept = (await world.call("POST", "/sandboxes", KEY_A, json={"autoPause": True})).json()
    alive = (await world.call("POST", "/sandboxes", KEY_B, json={"timeout": 600})).json()
    paused = (await world.call("POST", "/sandboxes", KEY_B, json={})).json()["sandboxID"]
    assert (await world.call("POST", f"/sandboxes/{paused}/pause", KEY_B)).status_code == 204
    past = datetime.now(UTC) - timedelta(seconds=1)
    await world.backend.set_end("team-b", paused, past)
    await world.backend.set_end("team-a", doomed, past)
    await world.backend.set_end("team-a", kept["sandboxID"], past)
    assert world.xr("team-a", kept["sandboxID"])["spec"]["lifetime"]["suspendAt"] == (
        past.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    await world.backend.reap(datetime.now(UTC))
    assert (PLURAL, "team-a", doomed) not in world.cluster.objects
    assert (PLURAL, "team-a", kept["sandboxID"]) in world.cluster.objects
    assert (PLURAL, "team-b", alive["sandboxID"]) in world.cluster.objects
    assert (PLURAL, "team-b", paused) in world.cluster.objects


async def test_sandbox_ids_that_are_not_ids_never_reach_the_cluster(world: World) -> None:
    before = len(world.cluster.requests)
    for bad in ("x,y", "a" * 21, "../team-b", "!label"):
        plane = {"E2b-Sandbox-Id": bad, "X-Access-Token": "0" * 64}
        answer = await world.http.get("/health", headers=plane)
        assert answer.status_code == 502
        assert await world.backend.locate(bad) == ()
    answer = await world.call("GET", "/sandboxes/..%2Fteam-b", KEY_A)
    assert answer.status_code == 404
    assert len(world.cluster.requests) == before


async def test_what_the_cluster_refuses_is_a_400_that_says_why(world: World) -> None:
    invalid = "spec.image: Invalid value: must be at most 63 characters"
    world.cluster.authority.refusals[PLURAL] = kube_fake.status(422, "Invalid", invalid)
    answer = await world.call("POST", "/sandboxes", KEY_A, json={})
    assert answer.status_code == 400
    assert answer.json()["message"] == f"the platform refused the sandbox: {invalid}"
    assert world.cluster.resource(PLURAL) == []


async def test_metadata_and_env_vars_past_what_the_cache_keeps_are_refused_first(
    world: World,
) -> None:
    huge = {"notes": "x" * 300_000}
    answer = await world.call("POST", "/sandboxes", KEY_A, json={"metadata": huge})
    assert answer.status_code == 400
    assert answer.json()["message"].startswith("metadata and envVars are too large: ")
    assert not [p for m, p, _ in world.cluster.requests if m == "POST" and p.endswith(PLURAL)]


async def test_snapshots_are_spec_snapshots_and_a_restore_is_spec_restore_from(
    world: World,
) -> None:
    made = await world.call("POST", "/v2/sandboxes", KEY_A, json={"templateID": "base"})
    source = made.json()["sandboxID"]
    (world.platform.roots["team-a", source] / "kept.txt").write_text("before")
    taken = await world.call("POST", f"/sandboxes/{source}/snapshots", KEY_A, json={"name": "one"})
    assert taken.status_code == 201, taken.text
    snapshot_id = f"snapshot-{source}-one"
    assert taken.json() == {
        "snapshotID": snapshot_id,
        "names": ["one"],
        "sandboxID": source,
        "memory": False,
        "kind": "filesystem",
        "readyToUse": True,
    }
    assert world.xr("team-a", source)["spec"]["snapshots"] == [{"name": "one"}]
    (world.platform.roots["team-a", source] / "kept.txt").write_text("after")
    listed = await world.call("GET", "/snapshots", KEY_A)
    assert [s["snapshotID"] for s in listed.json()] == [snapshot_id]
    # Another tenant sees none of it, and cannot restore it.
    assert (await world.call("GET", "/snapshots", KEY_B)).json() == []
    theirs = await world.call("POST", "/v2/sandboxes", KEY_B, json={"templateID": snapshot_id})
    assert theirs.status_code == 404

    restored = await world.call("POST", "/v2/sandboxes", KEY_A, json={"templateID": snapshot_id})
    assert restored.status_code == 201, restored.text
    copy = restored.json()["sandboxID"]
    spec = world.xr("team-a", copy)["spec"]
    assert spec["restoreFrom"] == {"snapshot": f"{source}-one-vs"}
    assert spec["image"] == world.xr("team-a", source)["spec"]["image"]
    plane = {"E2b-Sandbox-Id": copy, "X-Access-Token": restored.json()["envdAccessToken"]}
    read = await world.http.get("/files?path=kept.txt", headers=plane)
    assert (read.status_code, read.text) == (200, "before")

    path = f"/templates/{snapshot_id}"
    assert (await world.call("DELETE", path, KEY_B)).status_code == 404
    assert (await world.call("DELETE", path, KEY_A)).status_code == 204
    assert world.xr("team-a", source)["spec"]["snapshots"] == []
    assert (await world.call("DELETE", path, KEY_A)).status_code == 404
    refused = await world.call(
        "POST", f"/sandboxes/{source}/snapshots", KEY_A, json={"memory": True}
    )
    assert refused.status_code == 501
    assert refused.json()["message"].startswith("snapshots of memory are not offered")
    other = await world.call("DELETE", "/templates/base", KEY_A)
    assert other.status_code == 501


async def test_a_private_sandbox_is_marked_so_and_its_previews_take_its_traffic_token(
    world: World,
) -> None:
    body = {"templateID": "base", "network": {"allowPublicTraffic": False}}
    made = await world.call("POST", "/v2/sandboxes", KEY_A, json=body)
    assert made.status_code == 201, made.text
    sandbox_id, traffic = made.json()["sandboxID"], made.json()["trafficAccessToken"]
    notes = world.xr("team-a", sandbox_id)["metadata"]["annotations"]
    assert notes["gateway.sandbox.cozystack.io/private-traffic"] == "true"
    assert "network" not in world.xr("team-a", sandbox_id)["spec"]  # egress unchanged
    route = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "3000"}
    assert (await world.http.get("/", headers=route)).status_code == 403
    # With its token it is a preview as any other: here, a port its template does not name.
    opened = await world.http.get("/", headers={**route, "e2b-traffic-access-token": traffic})
    assert opened.status_code == 502


def test_a_sandboxs_preview_ports_are_its_spec_ports_but_the_agents() -> None:
    obj = {"spec": {"ports": [{"name": "port-3000", "port": 3000}, {"name": "a", "port": 49983}]}}
    assert preview_ports(obj, 49983) == frozenset({3000})
    assert preview_ports({"spec": {"ports": "nonsense"}}, 49983) == frozenset()
    assert preview_ports({}, 49983) == frozenset()


def test_a_templates_ports_are_its_sandboxes_spec_ports() -> None:
    text = "templates:\n  app:\n    image: ubuntu-24.04\n    ports: [8000, 3000]\n"
    template = parse(text, "m.yaml")["app"]
    assert template.ports == (3000, 8000)
    assert template.spec()["ports"] == [
        {"name": "port-3000", "port": 3000},
        {"name": "port-8000", "port": 8000},
    ]
    assert "ports" not in Template(image="x").spec()
    bad = {
        "[49983]": "m.yaml: templates.app.ports: 49983 is the agent's, reached as envd already",
        "[0]": "m.yaml: templates.app.ports: 0 is not a port from 1 to 65535",
        "[true]": "m.yaml: templates.app.ports: True is not a port from 1 to 65535",
        "[3000, 3000]": "m.yaml: templates.app.ports names a port twice",
        "3000": "m.yaml: templates.app.ports must be a list of at most 16 TCP ports",
        str(
            list(range(1, 18))
        ): "m.yaml: templates.app.ports must be a list of at most 16 TCP ports",
    }
    for ports, message in bad.items():
        with pytest.raises(TemplateError) as e:
            parse(f"templates:\n  app:\n    image: x\n    ports: {ports}\n", "m.yaml")
        assert str(e.value) == message


def test_an_interpreter_template_opens_49999_beside_its_ports() -> None:
    text = "templates:\n  ci:\n    image: x\n    interpreter: true\n    ports: [50000, 3000]\n"
    template = parse(text, "m.yaml")["ci"]
    assert template.interpreter
    assert [p["port"] for p in template.spec()["ports"]] == [3000, 49999, 50000]
    alone = parse("templates:\n  ci:\n    image: x\n    interpreter: true\n", "m.yaml")["ci"]
    assert alone.spec()["ports"] == [{"name": "port-49999", "port": 49999}]
    bad = {
        "interpreter: yes-please": "m.yaml: templates.ci.interpreter must be true or false",
        "ports: [49999]": (
            "m.yaml: templates.ci.ports: 49999 is the code interpreter's: set `interpreter: true`"
        ),
        f"interpreter: true\n    ports: {list(range(1, 17))}": (
            "m.yaml: templates.ci.ports: at most 15 beside the interpreter's 49999"
        ),
    }
    for field, message in bad.items():
        with pytest.raises(TemplateError) as e:
            parse(f"templates:\n  ci:\n    image: x\n    {field}\n", "m.yaml")
        assert str(e.value) == message
