"""The KubeVirt VirtualMachine: pod network only, no host access, no token, no vsock.

Only `spec.template.metadata.labels` reach the virt-launcher pod that network policies select,
so the identity labels go there. virt-launcher mounts no service-account token unless the VMI
has a `serviceAccount` volume, and this module never writes one.

The VM records the guest account its disk holds (`account.py`) in the annotation
`sandbox.cozystack.io/guest-user`.
"""

import math
from typing import Any

from function.compose import agent
from function.compose.names import labels, pod_labels, sandbox_name, workspace_volume_name
from function.compose.pod import dns, scheduling
from function.compose.sizing import Size
from function.compose.workload import GUEST_USER
from function.compose.workloads.kubevirt.cloud_init import user_data
from function.model import Manifest
from function.model.platform import Preset, SandboxPlatform
from function.model.quantity import format_bytes, format_cpu
from function.model.spec import WorkspaceSandbox

KEY = "vm"

RUN_STRATEGY = {"Running": "Always", "Suspended": "Halted"}


def _interface(preset: Preset) -> dict[str, Any]:
    if preset.kubevirt.network_binding == "passt":
        return {"name": "default", "binding": {"name": "passt"}}
    return {"name": "default", "masquerade": {}}


def _domain(preset: Preset, platform: SandboxPlatform, size: Size) -> dict[str, Any]:
    disks: list[dict[str, Any]] = [
        {"name": "workspace", "disk": {"bus": "virtio"}, "bootOrder": 1},
        {"name": "cloudinit", "disk": {"bus": "virtio"}},
    ]
    if platform.agent is not None:
        disks.append(agent.vm_disk())
    domain: dict[str, Any] = {
        "devices": {
            "autoattachGraphicsDevice": False,
            "autoattachSerialConsole": preset.kubevirt.serial_console,
            "autoattachVSOCK": False,
            "disks": disks,
            "interfaces": [_interface(preset)],
            "rng": {},
        },
    }
    if preset.kubevirt.instancetype is None:
        cpu, memory = format_cpu(size.cpu), format_bytes(size.memory)
        domain["cpu"] = {"cores": max(1, math.ceil(size.cpu))}
        domain["memory"] = {"guest": memory}
        domain["resources"] = {
            "requests": {"cpu": cpu, "memory": memory},
            "limits": {"cpu": cpu, "memory": memory},
        }
    return domain


def virtual_machine(
    ws: WorkspaceSandbox,
    preset: Preset,
    platform: SandboxPlatform,
    size: Size,
    account: str,
) -> dict[str, Manifest]:
    kv = preset.kubevirt
    volumes: list[dict[str, Any]] = [
        {"name": "workspace", "dataVolume": {"name": workspace_volume_name(ws)}},
        {
            "name": "cloudinit",
            "cloudInitNoCloud": {"userData": user_data(ws, preset, platform, account)},
        },
    ]
    # Without the agent nothing would answer a probe.
    probe: dict[str, Any] = {}
    if (disk := agent.vm_volume(platform)) is not None:
        volumes.append(disk)
        probe = {"readinessProbe": agent.readiness_probe(platform)}
    spec: dict[str, Any] = {"runStrategy": RUN_STRATEGY[ws.spec.power]}
    if kv.instancetype is not None:
        spec["instancetype"] = kv.instancetype.model_dump()
    if kv.preference is not None:
        spec["preference"] = kv.preference.model_dump()
    spec["template"] = {
        "metadata": {"labels": pod_labels(ws)},
        "spec": {
            "domain": _domain(preset, platform, size),
            "networks": [{"name": "default", "pod": {}}],
            "volumes": volumes,
            **probe,
            "evictionStrategy": kv.eviction_strategy,
            "terminationGracePeriodSeconds": kv.termination_grace_period_seconds,
            **dns(preset, platform, guest=True),
            **scheduling(preset),
        },
    }
    return {
        KEY: {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": {
                "name": sandbox_name(ws, KEY),
                "labels": labels(ws),
                "annotations": {GUEST_USER: account},
            },
            "spec": spec,
        }
    }
