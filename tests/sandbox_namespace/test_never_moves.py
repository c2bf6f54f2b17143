"""A sandbox never moves into, out of or within its namespace of its own; its disk grows there."""

from typing import Any

import pytest

from function.errors import FieldError
from function.render import render
from tests.cluster import Observed, applied
from tests.plane.provider import SHARED, plane_world, settled_in_plane
from tests.sandbox_namespace.world import (
    HOME,
    ISOLATED,
    ISOLATED_KATA,
    carried,
    run,
    settled_in_namespace,
)
from tests.support import NOW, owned, platform, platform_input, workspace

KEEP = "Keep the preset, or create a new sandbox"


def _in_the_tenants_namespace(preset: str) -> Observed:
    now: Observed = {}
    for _ in range(8):
        after = applied(render(workspace({"preset": preset}), platform(), owned(now), NOW))
        if after == now:
            return now
        now = after
    raise AssertionError("never settled")


def _where(preset: str) -> Observed:
    if preset in (ISOLATED, ISOLATED_KATA):
        return settled_in_namespace(preset)[1]
    if preset == "shared-plane":
        _, observed = settled_in_plane(SHARED)
        return observed
    return _in_the_tenants_namespace(preset)


MOVES = [
    pytest.param(
        "standard",
        ISOLATED,
        "preset 'isolated' runs kubevirt in a namespace of its own, but this sandbox's "
        f"workspace lives on kubevirt; switching would leave it behind. {KEEP}",
        id="standard-to-isolated",
    ),
    pytest.param(
        ISOLATED,
        "standard",
        "preset 'standard' runs kubevirt, but this sandbox's workspace lives on kubevirt in a "
        f"namespace of its own; switching would leave it behind. {KEEP}",
        id="isolated-to-standard",
    ),
    pytest.param(
        "kata",
        ISOLATED_KATA,
        "preset 'isolated-kata' runs kata in a namespace of its own, but this sandbox's "
        f"workspace lives on a pod runtime; switching would leave it behind. {KEEP}",
        id="kata-to-isolated-kata",
    ),
    pytest.param(
        ISOLATED_KATA,
        "kata",
        "preset 'kata' runs kata, but this sandbox's workspace lives on a pod runtime in a "
        f"namespace of its own; switching would leave it behind. {KEEP}",
        id="isolated-kata-to-kata",
    ),
    pytest.param(
        ISOLATED,
        ISOLATED_KATA,
        "preset 'isolated-kata' runs kata in a namespace of its own, but this sandbox's "
        "workspace lives on kubevirt in a namespace of its own; switching would leave it "
        f"behind. {KEEP}",
        id="isolated-to-isolated-kata",
    ),
    pytest.param(
        ISOLATED,
        "shared-plane",
        "preset 'shared-plane' runs SharedComputePlane, but this sandbox's workspace lives on "
        f"kubevirt in a namespace of its own; switching would leave it behind. {KEEP}",
        id="isolated-to-shared-plane",
    ),
    pytest.param(
        "shared-plane",
        ISOLATED,
        "preset 'isolated' runs kubevirt in a namespace of its own, but this sandbox's "
        f"workspace lives on a ComputePlane; switching would leave it behind. {KEEP}",
        id="shared-plane-to-isolated",
    ),
]


@pytest.mark.parametrize(("was", "now", "message"), MOVES)
def test_switching_where_the_workspace_lives_is_one_fatal_naming_the_preset(
    was: str, now: str, message: str
) -> None:
    observed = _where(was)
    _, required = plane_world(SHARED)
    with pytest.raises(FieldError) as err:
        render(workspace({"preset": now}), platform(), owned(observed), NOW, required)
    assert err.value.path == "spec.preset"
    assert err.value.message == message


@pytest.mark.parametrize("preset", [ISOLATED, ISOLATED_KATA])
def test_a_restore_is_refused_naming_restore_from(preset: str) -> None:
    with pytest.raises(FieldError) as err:
        run(preset, {"restoreFrom": {"snapshot": "bob-frontend-nightly"}})
    assert str(err.value) == (
        f"spec.restoreFrom: preset {preset!r} places each sandbox in a namespace of its own, "
        "and a disk can only be restored from a snapshot in its own namespace; restore into a "
        "sandbox of a Namespace preset"
    )


def test_a_sandbox_namespace_preset_with_passt_is_refused() -> None:
    presets = platform_input()["presets"]
    passt = {
        **presets[ISOLATED],
        "kubevirt": {**presets[ISOLATED]["kubevirt"], "networkBinding": "passt"},
    }
    with pytest.raises(FieldError) as err:
        platform(presets={**presets, ISOLATED: passt})
    assert err.value.path.startswith(f"input.presets.{ISOLATED}")
    assert "kubevirt.networkBinding passt needs a privileged namespace" in err.value.message
    # The same binding is fine where the namespace isn't restricted by the placement.
    standard = {**presets["standard"], "kubevirt": passt["kubevirt"]}
    assert platform(presets={**presets, "standard": standard}).presets["standard"]


def test_a_sandbox_namespace_preset_with_an_instancetype_is_refused() -> None:
    presets = platform_input()["presets"]
    sized = {"kind": "VirtualMachineClusterInstancetype", "name": "u1.xlarge"}
    typed = {
        **presets[ISOLATED],
        "kubevirt": {**presets[ISOLATED]["kubevirt"], "instancetype": sized},
    }
    with pytest.raises(FieldError) as err:
        platform(presets={**presets, ISOLATED: typed})
    assert err.value.path.startswith(f"input.presets.{ISOLATED}")
    assert "kubevirt.instancetype sizes the VM past the sandbox's resources" in err.value.message
    # In the tenant's namespace no quota of the function's is sized from it.
    standard = {**presets["standard"], "kubevirt": typed["kubevirt"]}
    assert platform(presets={**presets, "standard": standard}).presets["standard"]


def test_a_grown_disk_is_patched_in_the_sandbox_namespace_through_its_config() -> None:
    spec: dict[str, Any] = {"resources": {"disk": "20Gi"}}
    _, observed = settled_in_namespace(ISOLATED, spec)
    out = run(ISOLATED, {"resources": {"disk": "60Gi"}}, observed)
    grow = out.resources["workspace-volume-size"]
    assert grow["spec"]["managementPolicies"] == ["Observe", "Update"]
    assert grow["spec"]["providerConfigRef"] == {
        "kind": "ClusterProviderConfig",
        "name": "workspace-sandbox-namespaces",
    }
    assert carried(out, "workspace-volume-size") == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": carried(out, "workspace-volume")["metadata"]["name"],
            "namespace": HOME,
        },
        "spec": {"resources": {"requests": {"storage": "60Gi"}}},
    }
    # Once it has grown the claim, it stays, asking the same size.
    again = run(ISOLATED, {"resources": {"disk": "60Gi"}}, {**observed, **applied(out)})
    assert carried(again, "workspace-volume-size") == carried(out, "workspace-volume-size")
