"""A sandbox killed while its finalizers are held: E2B's API answers for it as for a killed one.

On a cluster a delete of a WorkspaceSandbox only sets its `deletionTimestamp` while Crossplane
holds its finalizer (it deletes what it composed first), so the object outlives the kill for a
while; the real API server's answers are in `tests/control_plane/test_gateway.py`.
"""

from datetime import UTC, datetime, timedelta

import pytest
from workspace_gateway.kubernetes.calls import MERGE_PATCH
from workspace_gateway.kubernetes.objects import PLURAL

from tests.gateway import kube_fake, stand_in
from tests.gateway.stand_in import KEY_A, World, eventually

pytestmark = pytest.mark.e2e  # starts agents or gateways

world = stand_in.world  # the fake cluster, the stand-in platform and a gateway with API keys

FINALIZER = "composite.apiextensions.crossplane.io"  # Crossplane's, on every XR


def path(sandbox_id: str) -> str:
    return f"/apis/sandbox.cozystack.io/v1alpha1/namespaces/team-a/{PLURAL}/{sandbox_id}"


def write(world: World, method: str, sandbox_id: str, body: object = None) -> kube_fake.Answer:
    """A request to the fake API server as another client (Crossplane, an operator) makes it."""
    with world.cluster.lock:
        return kube_fake.answer(world.cluster, method, path(sandbox_id), lambda: body, MERGE_PATCH)


async def test_a_sandbox_being_deleted_is_gone_for_every_route(world: World) -> None:
    created = (await world.call("POST", "/sandboxes", KEY_A, json={"timeout": 60})).json()
    sandbox_id, token = created["sandboxID"], created["envdAccessToken"]
    plane = {"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": token}
    assert (await world.http.get("/health", headers=plane)).status_code == 204
    code, _ = write(world, "PATCH", sandbox_id, {"metadata": {"finalizers": [FINALIZER]}})
    assert code == 200

    assert (await world.call("DELETE", f"/sandboxes/{sandbox_id}", KEY_A)).status_code == 204
    held = world.xr("team-a", sandbox_id)  # still there, as its finalizer is
    assert held["metadata"]["deletionTimestamp"]
    await eventually(lambda: ("team-a", sandbox_id) not in world.backend.cache.objects)

    gone = {"code": 404, "message": f"sandbox {sandbox_id!r} not found"}
    for method, route, body in [
        ("GET", "/sandboxes/{}", None),
        ("DELETE", "/sandboxes/{}", None),  # killed already: the SDK's kill() says False
        ("POST", "/sandboxes/{}/connect", {"timeout": 10}),
        ("POST", "/sandboxes/{}/timeout", {"timeout": 10}),
        ("POST", "/sandboxes/{}/pause", None),
    ]:
        answer = await world.call(method, route.format(sandbox_id), KEY_A, json=body)
        assert (answer.status_code, answer.json()) == (404, gone), (method, route)
    assert (await world.call("GET", "/v2/sandboxes", KEY_A)).json() == []
    assert (await world.http.get("/health", headers=plane)).status_code == 502
    assert world.xr("team-a", sandbox_id)["metadata"] == held["metadata"]  # nothing written

    # Past its end the reaper leaves it alone too: it is on its way out already.
    deletes = sum(1 for m, _, _ in world.cluster.requests if m == "DELETE")
    await world.backend.reap(datetime.now(UTC) + timedelta(hours=1))
    assert sum(1 for m, _, _ in world.cluster.requests if m == "DELETE") == deletes

    # Crossplane done, its finalizer removed: the object goes, as the API server deletes it.
    assert write(world, "PATCH", sandbox_id, {"metadata": {"finalizers": None}})[0] == 200
    assert (PLURAL, "team-a", sandbox_id) not in world.cluster.objects


async def test_a_sandbox_deleted_by_another_client_leaves_the_cache_at_once(
    world: World,
) -> None:
    # `kubectl delete`, or the namespace going: the watch hears the deletionTimestamp.
    sandbox_id = (await world.call("POST", "/sandboxes", KEY_A, json={})).json()["sandboxID"]
    write(world, "PATCH", sandbox_id, {"metadata": {"finalizers": [FINALIZER]}})
    assert write(world, "DELETE", sandbox_id)[0] == 200
    await eventually(lambda: ("team-a", sandbox_id) not in world.backend.cache.objects)
    assert (PLURAL, "team-a", sandbox_id) in world.cluster.objects
    assert await world.backend.locate(sandbox_id) == ()
