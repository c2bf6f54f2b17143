"""The gateway's cluster mode against the real API server, driven by the unmodified `e2b` SDK.

Gateways are `workspace-sandbox-gateway --kubernetes` processes with a token of their own
ServiceAccount, so deploy/gateway/'s RBAC is what they may do; Crossplane serves the XRD and
holds its finalizer on every sandbox. The stand-in platform (`gateway.Platform`) starts a local
agent for each running sandbox, and `gateway.report_status` alone plays the controllers that
would report where it is: every test that makes a sandbox relies on it.
"""

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2b import Sandbox
from e2b.exceptions import SandboxException, SandboxNotFoundException
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from workspace_gateway.kubernetes_backend import (
    GROUP,
    MARK,
    PLURAL,
    VERSION,
)

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
    kubeconfig = gw.account_kubeconfig(plane, folder)
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
    # Crossplane holds its finalizer on every XR, and writes its own spec and status.
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
