"""The gateway's cluster mode against the real API server, driven by the unmodified `e2b` SDK.

Gateways are `workspace-sandbox-gateway --kubernetes` processes with a token of their own
ServiceAccount, so deploy/gateway/'s RBAC is what they may do; Crossplane serves the XRD and
holds its finalizer on every sandbox. The stand-in platform (`gateway.Platform`) starts a local
agent for each running sandbox, and `gateway.report_status` alone plays the controllers that
would report where it is: every test that makes a sandbox relies on it.
"""

import asyncio
import functools
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2b import Sandbox
from e2b.exceptions import AuthenticationException, SandboxException, SandboxNotFoundException
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from workspace_gateway.backend import NewSandbox
from workspace_gateway.errors import GatewayError
from workspace_gateway.kubernetes import lease
from workspace_gateway.kubernetes.backend import KubernetesBackend
from workspace_gateway.kubernetes.objects import (
    END,
    GROUP,
    HANDED_OUT,
    MARK,
    MEMBER,
    PLURAL,
    POOL_LABEL,
    READY_NOTE,
    VERSION,
    Settings,
    manifest,
)
from workspace_gateway.kubernetes.templates import Template

from tests.control_plane import gateway as gw
from tests.control_plane.install import Installed
from tests.control_plane.server import ControlPlane

pytestmark = pytest.mark.control_plane

TENANT_A, TENANT_B = "gw-team-a", "gw-team-b"
HOLD = "test.cozystack.io/hold"  # a finalizer of the test's, beside Crossplane's
CROSSPLANE_FINALIZER = "composite.apiextensions.crossplane.io"
SETTLED_SECONDS = 60.0


@dataclass
class World:
    plane: ControlPlane
    folder: Path
    kubeconfig: Path
    """The gateway's ServiceAccount's."""
    platform: gw.Platform
    gateway: gw.Gateway
    keys: dict[str, str]

    @functools.cached_property
    def custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.plane.client())

    def xr(self, tenant: str, sandbox_id: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, tenant, PLURAL, sandbox_id
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return found

    def sdk(self, gateway: gw.Gateway | None = None, key: str = "") -> dict[str, Any]:
        """What the SDK's calls take to reach a gateway, with a tenant's key."""
        url = (gateway or self.gateway).url
        return {"api_key": key or self.keys[TENANT_A], "api_url": url, "sandbox_url": url}


def eventually(check: Callable[[], Any], seconds: float = SETTLED_SECONDS, what: str = "") -> Any:
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, what or "not within the time"
        time.sleep(0.1)
    return found


@pytest.fixture(scope="module")
def world(crossplane: Installed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    plane = crossplane.plane
    folder = tmp_path_factory.mktemp("gateway")
    tenants = {gw.namespace(plane, n) for n in (TENANT_A, TENANT_B, "gw-tokens", "gw-pools")}
    keys = {t: gw.api_key(plane, t) for t in (TENANT_A, TENANT_B, "gw-pools")}
    kubeconfig = gw.account_kubeconfig(plane)
    with gw.platform(plane, folder, tenants) as platform:
        gateway = gw.start_gateway(folder, kubeconfig, gw.templates(folder), platform.port)
        try:
            yield World(plane, folder, kubeconfig, platform, gateway, keys)
        finally:
            gateway.stop()
    assert "Traceback" not in gateway.output(), gateway.output()[-4000:]


def test_the_sdk_cycle_with_keys_and_the_gateway_s_own_rbac(world: World) -> None:
    sdk = world.sdk()
    sandbox = Sandbox.create(envs={"GREETING": "hello"}, metadata={"who": "sdk"}, **sdk)
    sandbox_id = sandbox.sandbox_id
    xr = world.xr(TENANT_A, sandbox_id)
    assert xr is not None
    assert xr["metadata"]["annotations"][MARK]
    assert "hello" not in str(xr)  # sealed
    assert sandbox.commands.run("echo $GREETING").stdout == "hello\n"
    sandbox.files.write("kept.txt", "kept")
    assert [s.sandbox_id for s in Sandbox.list(**sdk).next_items()] == [sandbox_id]
    assert Sandbox.list(**world.sdk(key=world.keys[TENANT_B])).next_items() == []
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sandbox_id, **world.sdk(key=world.keys[TENANT_B]))
    # Crossplane holds its finalizer on every XR: a kill waits for it (below).
    eventually(
        lambda: (
            CROSSPLANE_FINALIZER
            in (world.xr(TENANT_A, sandbox_id) or {}).get("metadata", {}).get("finalizers", [])
        )
    )

    sandbox.set_timeout(600)
    assert sandbox.pause() is True
    assert sandbox.pause() is False
    assert (world.xr(TENANT_A, sandbox_id) or {})["spec"]["power"] == "Suspended"
    resumed = Sandbox.connect(sandbox_id, **sdk)
    assert resumed.files.read("kept.txt") == "kept"
    assert resumed.commands.run("echo $GREETING").stdout == "hello\n"
    assert Sandbox.get_info(sandbox_id, **sdk).metadata == {"who": "sdk"}

    assert resumed.kill() is True
    eventually(lambda: world.xr(TENANT_A, sandbox_id) is None, what="Crossplane let it go")
    assert resumed.kill() is False


def test_a_sandbox_being_deleted_answers_as_a_killed_one(world: World) -> None:
    sdk = world.sdk()
    sandbox = Sandbox.create(**sdk)
    sandbox_id = sandbox.sandbox_id
    hold = {"metadata": {"finalizers": [CROSSPLANE_FINALIZER, HOLD]}}
    eventually(lambda: CROSSPLANE_FINALIZER in str(world.xr(TENANT_A, sandbox_id)))
    world.custom.patch_namespaced_custom_object(
        GROUP, VERSION, TENANT_A, PLURAL, sandbox_id, hold
    )  # a controller still busy with what it made
    assert sandbox.kill() is True
    held = eventually(
        lambda: (
            (world.xr(TENANT_A, sandbox_id) or {}).get("metadata", {}).get("finalizers") == [HOLD]
        ),
        what="Crossplane did not take its finalizer off",
    )
    assert held
    xr = world.xr(TENANT_A, sandbox_id)
    assert xr is not None
    assert xr["metadata"]["deletionTimestamp"]
    assert world.platform.agents.get((TENANT_A, sandbox_id)) is not None  # its agent still up

    assert sandbox.kill() is False  # killed already: E2B's 404
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(sandbox_id, **sdk)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sandbox_id, **sdk)
    with pytest.raises(SandboxNotFoundException):
        sandbox.set_timeout(60)
    assert Sandbox.list(**sdk).next_items() == []
    assert sandbox.is_running() is False  # the data plane routes nothing to it
    with pytest.raises(SandboxException):
        sandbox.commands.run("true")

    world.custom.patch_namespaced_custom_object(
        GROUP, VERSION, TENANT_A, PLURAL, sandbox_id, {"metadata": {"finalizers": None}}
    )
    assert world.xr(TENANT_A, sandbox_id) is None


# --- Kubernetes tokens: TokenReview and SubjectAccessReview against the shipped tenant roles.

TOKENS = "gw-tokens"
ROLES = {
    "editor": "function-workspace-sandbox:tenant-admin",
    "viewer": "function-workspace-sandbox:tenant-view",
}


def may(plane: ControlPlane, account: str, verb: str) -> bool:
    review = k8s.AuthorizationV1Api(plane.client()).create_subject_access_review(
        {
            "spec": {
                "user": f"system:serviceaccount:{TOKENS}:{account}",
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "resourceAttributes": {
                    "verb": verb,
                    "group": GROUP,
                    "resource": PLURAL,
                    "namespace": TOKENS,
                },
            }
        }
    )
    return bool(review.status.allowed)


@pytest.fixture
def reviewed(world: World) -> Iterator[tuple[gw.Gateway, dict[str, str]]]:
    """A gateway with `--auth kubernetes-tokens`, and tokens of an editor and a viewer of
    gw-tokens, bound to the roles deploy/rbac-tenants.yaml ships."""
    api = world.plane.client()
    core, rbac = k8s.CoreV1Api(api), k8s.RbacAuthorizationV1Api(api)
    for account, role in ROLES.items():
        core.create_namespaced_service_account(TOKENS, {"metadata": {"name": account}})
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
        subject = {"kind": "ServiceAccount", "name": account, "namespace": TOKENS}
        rbac.create_namespaced_role_binding(
            TOKENS, {"metadata": {"name": account}, "roleRef": ref, "subjects": [subject]}
        )
    eventually(lambda: may(world.plane, "editor", "create"), 30, "the binding did not act")
    tokens = {a: gw.token(world.plane, TOKENS, a) for a in ROLES}
    mapping = gw.templates(world.folder)
    served = gw.start_gateway(
        world.folder,
        world.kubeconfig,
        mapping,
        world.platform.port,
        *("--auth", "kubernetes-tokens"),
        name="gateway-tokens",
    )
    try:
        yield served, tokens
    finally:
        served.stop()
    assert "Traceback" not in served.output(), served.output()[-4000:]


def test_tokens_act_as_far_as_the_tenant_roles_let_them(
    world: World, reviewed: tuple[gw.Gateway, dict[str, str]]
) -> None:
    served, tokens = reviewed
    editor, viewer = (world.sdk(served, tokens[a]) for a in ("editor", "viewer"))
    sandbox = Sandbox.create(metadata={"by": "editor"}, **editor)
    assert sandbox.commands.run("echo reviewed").stdout == "reviewed\n"
    assert [s.sandbox_id for s in Sandbox.list(**viewer).next_items()] == [sandbox.sandbox_id]
    assert Sandbox.get_info(sandbox.sandbox_id, **viewer).metadata == {"by": "editor"}
    with pytest.raises(SandboxException, match="403"):
        Sandbox.create(**viewer)
    with pytest.raises(SandboxException, match="403"):
        Sandbox.kill(sandbox.sandbox_id, **viewer)
    elsewhere = {**editor, "api_headers": {"X-Sandbox-Namespace": TENANT_B}}
    with pytest.raises(SandboxException, match="403"):
        Sandbox.list(**elsewhere).next_items()
    with pytest.raises(AuthenticationException):
        Sandbox.list(**world.sdk(served, "eyJ.not-a-token-anyone-knows")).next_items()
    # A key is no token: the API server's TokenReview knows nothing of it.
    with pytest.raises(AuthenticationException):
        Sandbox.list(**world.sdk(served, world.keys[TENANT_A])).next_items()
    assert Sandbox.kill(sandbox.sandbox_id, **editor) is True


# --- The gateway's own calls, in process with its ServiceAccount's client.


def settings(world: World) -> Settings:
    seed = (world.folder / "seed").read_bytes().strip()
    return Settings(templates={"base": BASE}, seed=seed, agent_port=world.platform.port)


BASE = Template(image="ubuntu-24.04")


def sandbox_manifest(world: World, tenant: str, sandbox_id: str, **notes: str) -> dict[str, Any]:
    """A WorkspaceSandbox as the gateway makes it, with the gateway's seed."""
    request = NewSandbox(template="base", timeout=300)
    body = manifest(
        (tenant, sandbox_id), "base", BASE, request, datetime.now(UTC), seed=settings(world).seed
    )
    body["metadata"]["annotations"] |= notes
    return body


@pytest.fixture
async def backend(world: World) -> AsyncIterator[KubernetesBackend]:
    api = k8s_config.new_client_from_config(config_file=str(world.kubeconfig))
    made = KubernetesBackend(
        Recorded(k8s.CustomObjectsApi(api)), settings(world), httpx.AsyncClient()
    )
    yield made
    await made.close()
    api.close()


class Recorded:
    """The client's CustomObjectsApi, every cluster-wide list (watches too) noted on its way."""

    def __init__(self, custom: k8s.CustomObjectsApi) -> None:
        self.custom = custom
        self.lists: list[dict[str, Any]] = []

    def list_cluster_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        self.lists.append(kwargs)
        return self.custom.list_cluster_custom_object(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.custom, name)


async def settle(check: Callable[[], Any], seconds: float = SETTLED_SECONDS, what: str = "") -> Any:
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, what or "not within the time"
        await asyncio.sleep(0.1)
    return found


async def test_writes_at_a_stale_resource_version_are_refused_and_retried(
    world: World, backend: KubernetesBackend
) -> None:
    sandbox_id = "rv" + "0" * 18
    world.custom.create_namespaced_custom_object(
        GROUP, VERSION, TENANT_B, PLURAL, sandbox_manifest(world, TENANT_B, sandbox_id)
    )
    read = await backend._get(TENANT_B, sandbox_id)
    stale = read["metadata"]["resourceVersion"]
    moved = {"metadata": {"annotations": {"test.cozystack.io/moved": "1"}}}
    world.custom.patch_namespaced_custom_object(GROUP, VERSION, TENANT_B, PLURAL, sandbox_id, moved)

    end = {
        "metadata": {"resourceVersion": stale, "annotations": {END: "2000-01-01T00:00:00+00:00"}}
    }
    with pytest.raises(GatewayError) as refused:
        await backend._patch(TENANT_B, sandbox_id, end)
    assert refused.value.status == 409
    with pytest.raises(GatewayError) as refused:
        await backend._delete(TENANT_B, sandbox_id, stale)
    assert refused.value.status == 409
    assert world.xr(TENANT_B, sandbox_id) is not None

    # A write between the gateway's read and its patch: the patch is refused, read again, made.
    decided: list[str] = []

    def change(obj: Any) -> dict[str, Any]:
        decided.append(obj["metadata"]["resourceVersion"])
        if len(decided) == 1:
            world.custom.patch_namespaced_custom_object(
                GROUP, VERSION, TENANT_B, PLURAL, sandbox_id, {"metadata": {"labels": {"x": "1"}}}
            )
        return {"metadata": {"annotations": {END: "2100-01-01T00:00:00+00:00"}}}

    await backend._update(TENANT_B, sandbox_id, change)
    # Read again after the refusal; Crossplane, which writes the same object, may cost a third.
    assert len(decided) >= 2
    assert decided[0] != decided[1]
    assert (world.xr(TENANT_B, sandbox_id) or {})["metadata"]["annotations"][END].startswith("2100")
    # A delete at the current version is made; Crossplane, writing the same object, may move
    # it between the read and the delete, so a refusal is read again, a few times at most.
    for _ in range(5):
        current = (world.xr(TENANT_B, sandbox_id) or {})["metadata"]["resourceVersion"]
        try:
            await backend._delete(TENANT_B, sandbox_id, current)
            break
        except GatewayError as err:
            assert err.status == 409
    else:
        pytest.fail("the delete at the current resourceVersion was refused five times")
    eventually(lambda: world.xr(TENANT_B, sandbox_id) is None)


async def test_the_watch_lists_again_after_a_410(world: World, backend: KubernetesBackend) -> None:
    assert await backend.ready()
    recorded = backend.custom
    assert isinstance(recorded, Recorded)

    def lists() -> int:
        return sum(1 for c in recorded.lists if not c.get("watch"))

    assert lists() == 1
    gw.crd_storage_reset(world.plane)
    await settle(lambda: lists() >= 2, 90, "no list again after the storage was made anew")
    # And the watch goes on: a sandbox made now reaches the cache without a list.
    before = lists()
    sandbox_id = "watch" + "0" * 15
    world.custom.create_namespaced_custom_object(
        GROUP, VERSION, TENANT_B, PLURAL, sandbox_manifest(world, TENANT_B, sandbox_id)
    )
    await settle(lambda: (TENANT_B, sandbox_id) in backend.cache.objects, 30, "not heard")
    world.custom.delete_namespaced_custom_object(GROUP, VERSION, TENANT_B, PLURAL, sandbox_id)
    await settle(lambda: (TENANT_B, sandbox_id) not in backend.cache.objects, 30, "not heard")
    assert lists() - before <= 1  # Crossplane's own CRD write may reset it once more


# --- Several replicas: the reaper's Lease, and warm pools. Each test's replicas are the only
# ones: the module's gateway is stopped first (and hands its Lease over as it stops), so these
# tests come last.


def holder(world: World) -> str:
    coordination = k8s.CoordinationV1Api(world.plane.client())
    found = coordination.read_namespaced_lease(lease.NAME, gw.GATEWAY_NAMESPACE)
    return str(found.spec.holder_identity or "")


def gone(world: World, tenant: str, sandbox_id: str) -> bool:
    xr = world.xr(tenant, sandbox_id)
    return xr is None or bool(xr["metadata"].get("deletionTimestamp"))


def test_the_lease_passes_to_the_other_replica_once_its_killed_holder_s_term_ends(
    world: World,
) -> None:
    world.gateway.stop()
    mapping = gw.templates(world.folder)
    port = world.platform.port
    replicas = {
        n: gw.start_gateway(world.folder, world.kubeconfig, mapping, port, name=n)
        for n in ("replica-a", "replica-b")
    }
    try:
        first = eventually(
            lambda: next((n for n in replicas if holder(world).startswith(f"{n}_")), None),
            what="neither replica took the Lease",
        )
        (survivor,) = set(replicas) - {first}
        replicas[first].stop(signal.SIGKILL)  # no hand-over: its term must run out
        killed = time.monotonic()
        sandbox_id = "reap" + "0" * 16
        expired = sandbox_manifest(
            world, TENANT_B, sandbox_id, **{END: "2000-01-01T00:00:00+00:00"}
        )
        world.custom.create_namespaced_custom_object(GROUP, VERSION, TENANT_B, PLURAL, expired)
        eventually(lambda: holder(world).startswith(f"{survivor}_"), what="no take-over")
        taken = time.monotonic() - killed
        assert taken >= 5, f"taken {taken:.1f} s after the kill, within the holder's term"
        eventually(lambda: gone(world, TENANT_B, sandbox_id), 30, "the survivor did not reap")
        assert "now reaps" in replicas[survivor].output()
    finally:
        for replica in replicas.values():
            replica.stop()
    assert "Traceback" not in replicas[survivor].output()


def members(world: World, tenant: str) -> list[dict[str, Any]]:
    listed = world.custom.list_namespaced_custom_object(
        GROUP, VERSION, tenant, PLURAL, label_selector=f"{POOL_LABEL}={MEMBER}"
    )
    return [o for o in listed["items"] if o["metadata"].get("annotations", {}).get(READY_NOTE)]


def test_two_replicas_hand_each_pool_member_out_once(world: World) -> None:
    world.gateway.stop()
    tenant, key = "gw-pools", world.keys["gw-pools"]
    mapping = gw.templates(world.folder, pool={"size": 2, "temperature": "running"})
    port = world.platform.port
    replicas = [
        gw.start_gateway(world.folder, world.kubeconfig, mapping, port, name=f"pooled-{n}")
        for n in ("p", "q")
    ]
    try:
        cold = Sandbox.create(**world.sdk(replicas[0], key))  # the namespace is in use now
        ready = eventually(lambda: len(members(world, tenant)) == 2, 90, "no pool")
        assert ready
        made = {o["metadata"]["name"] for o in members(world, tenant)}
        time.sleep(1)  # both replicas' watches have heard them ready
        with ThreadPoolExecutor(2) as both:
            created = list(both.map(lambda r: Sandbox.create(**world.sdk(r, key)), replicas))
        handed = {s.sandbox_id for s in created}
        assert handed == made  # one each: never the same member twice
        for sandbox in created:
            xr = world.xr(tenant, sandbox.sandbox_id) or {}
            assert xr["metadata"]["labels"][POOL_LABEL] == HANDED_OUT
            assert sandbox.commands.run("echo warm").stdout == "warm\n"
        audit = "".join(r.output() for r in replicas)
        assert (audit.count('"pool":"hit"'), audit.count('"pool":"miss"')) == (2, 1)
        # A create with an Idempotency-Key on one replica, retried on the other: the retry
        # finds it by its label on the API server, whether a member was handed out or not.
        first = Sandbox.create(idempotency_key="retry-1", **world.sdk(replicas[0], key))
        again = Sandbox.create(idempotency_key="retry-1", **world.sdk(replicas[1], key))
        assert again.sandbox_id == first.sandbox_id
        assert again.commands.run("echo once").stdout == "once\n"
        for sandbox in (cold, *created, first):
            assert sandbox.kill() is True
    finally:
        for replica in replicas:
            replica.stop()
    for replica in replicas:
        assert "Traceback" not in replica.output()
