import json
from typing import Any

import pytest

from function.compose.names import workspace_volume_name
from function.compose.sizing import size
from function.compose.virtual_machine import virtual_machine
from function.errors import FieldError
from function.model import parse
from function.model.platform import Preset
from tests.support import PLATFORM, platform_input, workspace

STANDARD = platform_input()["presets"]["standard"]


def preset(**changes: Any) -> Preset:
    return parse(Preset, {**STANDARD, **changes}, "input.presets.standard")


def vm(spec: dict[str, Any] | None = None, p: Preset | None = None) -> dict[str, Any]:
    ws, p = workspace(spec), p or PLATFORM.presets["standard"]
    image = PLATFORM.images["ubuntu-24.04"]
    return virtual_machine(ws, p, PLATFORM, size(ws, "standard", p, image))["vm"]


@pytest.mark.parametrize(
    ("resources", "cores", "cpu", "memory"),
    [
        pytest.param({}, 2, "2", "4Gi", id="preset-defaults"),
        pytest.param(
            {"cpu": "500m", "memory": "1024Mi"}, 1, "500m", "1Gi", id="fractional-cpu-gets-one-core"
        ),
        pytest.param({"cpu": "1.5"}, 2, "1500m", "4Gi", id="cores-round-up"),
        pytest.param({"cpu": 4.0, "memory": "8Gi"}, 4, "4", "8Gi", id="struct-number"),
    ],
)
def test_sizes_become_cores_guest_memory_and_equal_requests_and_limits(
    resources: dict[str, Any], cores: int, cpu: str, memory: str
) -> None:
    domain = vm({"resources": resources})["spec"]["template"]["spec"]["domain"]
    assert domain["cpu"] == {"cores": cores}
    assert domain["memory"] == {"guest": memory}
    assert domain["resources"] == {
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"cpu": cpu, "memory": memory},
    }


def test_an_instancetype_preset_sizes_the_vm_and_refuses_tenant_sizes() -> None:
    p = preset(kubevirt={"instancetype": {"name": "u1.medium"}, "preference": {"name": "ubuntu"}})
    spec = vm(p=p)["spec"]
    assert spec["instancetype"] == {
        "kind": "VirtualMachineClusterInstancetype",
        "name": "u1.medium",
    }
    assert spec["preference"] == {"kind": "VirtualMachineClusterPreference", "name": "ubuntu"}
    assert not {"cpu", "memory", "resources"} & set(spec["template"]["spec"]["domain"])
    with pytest.raises(FieldError) as err:
        vm({"resources": {"cpu": "2"}}, p)
    assert (
        str(err.value)
        == "spec.resources.cpu: preset 'standard' sizes sandboxes by instance type; remove this field"
    )


def test_passt_binding_replaces_masquerade() -> None:
    p = preset(kubevirt={"networkBinding": "passt"})
    interfaces = vm(p=p)["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"]
    assert interfaces == [{"name": "default", "binding": {"name": "passt"}}]


@pytest.mark.parametrize(
    ("kubevirt", "attached"),
    [
        pytest.param({}, False, id="off-by-default"),
        pytest.param({"serialConsole": False}, False, id="off"),
        pytest.param({"serialConsole": True}, True, id="a-preset-that-asks-for-it"),
    ],
)
def test_the_serial_console_is_attached_only_where_a_preset_asks(
    kubevirt: dict[str, Any], attached: bool
) -> None:
    # `virtctl console` and `virtctl vnc` reach the guest through KubeVirt's API, never through
    # the gateway or the sandbox's policies, and admission never sees them (an aggregated API).
    base = {k: v for k, v in STANDARD["kubevirt"].items() if k != "serialConsole"}
    devices = vm(p=preset(kubevirt={**base, **kubevirt}))["spec"]["template"]["spec"]["domain"][
        "devices"
    ]
    assert devices["autoattachSerialConsole"] is attached
    assert devices["autoattachGraphicsDevice"] is False


def test_scheduling_comes_from_the_preset() -> None:
    scheduling = {
        "nodeSelector": {"node-role.kubernetes.io/sandbox": ""},
        "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "sandbox",
    }
    spec = vm(p=preset(scheduling=scheduling))["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"node-role.kubernetes.io/sandbox": ""}
    assert spec["tolerations"] == [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["priorityClassName"] == "sandbox"


def test_the_guest_uses_the_platform_resolvers() -> None:
    spec = vm()["spec"]["template"]["spec"]
    assert spec["dnsPolicy"] == "None"
    assert spec["dnsConfig"] == {"nameservers": ["9.9.9.9", "149.112.112.112"]}
    user_data = spec["volumes"][1]["cloudInitNoCloud"]["userData"]
    assert "DNS='9.9.9.9 149.112.112.112'" in user_data


def test_the_disk_is_the_standalone_data_volume() -> None:
    volumes = vm()["spec"]["template"]["spec"]["volumes"]
    disk = workspace_volume_name(workspace())
    assert volumes[0] == {"name": "workspace", "dataVolume": {"name": disk}}
    assert "dataVolumeTemplates" not in vm()["spec"]


def test_ssh_keys_reach_the_guest_as_arguments_never_as_shell_text() -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ59QzKAgaweWutMQQYQMAhdmOo8JHFmw4Y3BLQLyb4k it's $(me)"
    user_data = vm({"ssh": {"authorizedKeys": [key]}})["spec"]["template"]["spec"]["volumes"][1][
        "cloudInitNoCloud"
    ]["userData"]
    header, body = user_data.split("\n", 1)
    assert header == "#cloud-config"
    config = json.loads(body)
    sh, dash_c, script, argv0, *keys = config["bootcmd"][0]
    assert (sh, dash_c, argv0) == ("sh", "-c", "sandbox")
    assert keys == [key]
    assert "$(me)" not in script
    assert config["users"] == []
    assert config["ssh_pwauth"] is False
