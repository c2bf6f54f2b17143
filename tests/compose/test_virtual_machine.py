import json
from typing import Any

import pytest

from function.compose.names import workspace_volume_name
from function.compose.sizing import size
from function.compose.workloads.kubevirt.account import guest_account
from function.compose.workloads.kubevirt.virtual_machine import virtual_machine
from function.compose.workloads.kubevirt.workload import VirtualMachine
from function.errors import FieldError
from function.model import parse
from function.model.platform import Preset, SandboxPlatform
from tests.support import (
    AGENT_IMAGE,
    AGENT_PLATFORM,
    PLATFORM,
    owned,
    platform_input,
    workspace,
)

STANDARD = platform_input()["presets"]["standard"]


def preset(**changes: Any) -> Preset:
    return parse(Preset, {**STANDARD, **changes}, "input.presets.standard")


def vm(
    spec: dict[str, Any] | None = None,
    p: Preset | None = None,
    *,
    platform: SandboxPlatform = PLATFORM,
    observed: dict[str, Any] | None = None,
) -> dict[str, Any]:
    ws, p = workspace(spec), p or platform.presets["standard"]
    image = platform.images["ubuntu-24.04"]
    account = guest_account(owned(observed))
    sized = size(
        ws, "standard", p, image, by_instancetype=VirtualMachine().sized_by_instancetype(p)
    )
    return virtual_machine(ws, p, platform, sized, account)["vm"]


def boot_command(manifest: dict[str, Any]) -> list[str]:
    volumes = manifest["spec"]["template"]["spec"]["volumes"]
    (data,) = [v["cloudInitNoCloud"]["userData"] for v in volumes if "cloudInitNoCloud" in v]
    command: list[str] = json.loads(data.split("\n", 1)[1])["bootcmd"][0]
    return command


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
    assert (sh, dash_c, argv0) == ("sh", "-c", "user")
    assert keys == [key]
    assert "$(me)" not in script
    # No account of cloud-init's: a list naming no one, which every cloud-init's schema accepts
    # (before 23.2 an empty list fails it); the VM tier checks the guest's own schema check.
    assert config["users"] == [""]
    assert config["ssh_pwauth"] is False


def test_with_the_agent_the_vm_attaches_its_disk_read_only_and_is_ready_when_it_answers() -> None:
    manifest = vm(platform=AGENT_PLATFORM)
    template = manifest["spec"]["template"]["spec"]
    assert template["volumes"][2] == {
        "name": "agent",
        "containerDisk": {
            "image": AGENT_IMAGE,
            "path": "/disk/agent.img",
            "imagePullPolicy": "IfNotPresent",
        },
    }
    # The serial is how the guest finds it: /dev/disk/by-id/virtio-wsagent.
    assert template["domain"]["devices"]["disks"][2] == {
        "name": "agent",
        "disk": {"bus": "virtio", "readonly": True},
        "serial": "wsagent",
    }
    assert template["readinessProbe"] == {
        "httpGet": {"path": "/health", "port": 49983},
        "initialDelaySeconds": 2,
        "periodSeconds": 5,
        "timeoutSeconds": 2,
        "failureThreshold": 3,
    }


def test_the_boot_script_mounts_the_agent_disk_and_runs_its_boot_script_last() -> None:
    script = boot_command(vm(platform=AGENT_PLATFORM))[2]
    *_, mount, boot = script.split(";")
    assert mount == "mount -o ro,nosuid,nodev /dev/disk/by-id/virtio-wsagent $m"
    assert boot == "sh $m/boot.sh 49983 $U $W"
    assert ";m=/run/wsagent;mkdir -p $m;udevadm settle;" in script
    assert ";U=user;W=/workspace;" in script


def test_the_agent_port_is_the_platforms() -> None:
    gateway = AGENT_PLATFORM.gateway.model_copy(update={"agent_port": 8000})
    moved = AGENT_PLATFORM.model_copy(update={"gateway": gateway})
    manifest = vm(platform=moved)
    assert boot_command(manifest)[2].endswith(";sh $m/boot.sh 8000 $U $W")
    assert manifest["spec"]["template"]["spec"]["readinessProbe"]["httpGet"]["port"] == 8000


def test_without_the_agent_the_vm_has_no_agent_disk_and_no_probe() -> None:
    template = vm()["spec"]["template"]["spec"]
    assert [v["name"] for v in template["volumes"]] == ["workspace", "cloudinit"]
    assert [d["name"] for d in template["domain"]["devices"]["disks"]] == [
        "workspace",
        "cloudinit",
    ]
    assert "readinessProbe" not in template
    script = boot_command(vm())[2]
    assert "boot.sh" not in script
    assert "mount" not in script
