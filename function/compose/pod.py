"""The hardened pod: a sandbox's pod spec, container, resources, DNS and scheduling.

The pod runs as a fixed unprivileged user with a read-only root filesystem, no privilege
escalation, no capabilities, the RuntimeDefault seccomp profile, no service-account token, no
service links, no host namespaces, paths or ports, and the platform's public resolvers. Its
workspace is a PVC, mounted at /workspace, which is also the working directory and home.
Requests equal limits, ephemeral storage included, so a sandbox can't take more of the node
than it asked for. A Sandbox and a StatefulSet run this pod; a VM's virt-launcher pod takes its
DNS and scheduling.

The container runs the in-sandbox agent, and is ready when the agent answers (`agent.py`):
with `input.agent`, an init container as hardened as the sandbox's own copies the agent into
the pod first.
"""

from typing import Any

from function.compose import agent
from function.compose.names import CLAIM_TEMPLATE, service_account_name, workspace_volume_name
from function.compose.service import reserved_ports
from function.compose.sizing import Size
from function.errors import FieldError
from function.model.address import ip_text
from function.model.platform import Image, Preset, SandboxPlatform
from function.model.quantity import format_bytes, format_cpu
from function.model.spec import WorkspaceSandbox

WORKSPACE = "/workspace"


def container_resources(preset: Preset, size: Size) -> dict[str, Any]:
    cpu, memory = size.cpu, size.memory
    if preset.pod.overhead is not None:
        cpu += preset.pod.overhead.cpu
        memory += preset.pod.overhead.memory
    amounts = {
        "cpu": format_cpu(cpu),
        "memory": format_bytes(memory),
        "ephemeral-storage": format_bytes(preset.pod.ephemeral_storage),
    }
    return {"requests": amounts, "limits": dict(amounts)}


def dns(preset: Preset, platform: SandboxPlatform, *, guest: bool = False) -> dict[str, Any]:
    """The pod's resolvers: the cluster's, or the platform's public ones.

    A VM's `guest` learns its resolvers over DHCP from its pod's DNS settings, and no options.
    """
    if preset.cluster_dns:
        return {"dnsPolicy": "ClusterFirst"}
    config: dict[str, Any] = {"nameservers": [ip_text(r) for r in platform.network.resolvers]}
    if not guest:
        # Public resolvers know no search domains; a single-label name is never local.
        config["options"] = [{"name": "ndots", "value": "1"}]
    return {"dnsPolicy": "None", "dnsConfig": config}


def _security_context(preset: Preset) -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": preset.pod.uid,
        "runAsGroup": preset.pod.gid,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _container(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform, image: str, size: Size
) -> dict[str, Any]:
    # Nothing delivers SSH keys into a pod, which serves no SSH.
    reserved = reserved_ports(ws, platform, ssh=False)
    ports = {**reserved, **{p.name: p.port for p in ws.spec.ports}}
    return {
        "name": "sandbox",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": agent.pod_command(platform),
        "workingDir": WORKSPACE,
        "env": [{"name": "HOME", "value": WORKSPACE}, {"name": "TMPDIR", "value": "/tmp"}],  # noqa: S108  # an emptyDir of its own
        "ports": [
            {"name": name, "containerPort": port, "protocol": "TCP"}
            for name, port in sorted(ports.items(), key=lambda p: p[1])
        ],
        "readinessProbe": agent.readiness_probe(platform),
        "resources": container_resources(preset, size),
        "securityContext": _security_context(preset),
        "volumeMounts": [
            {"name": CLAIM_TEMPLATE, "mountPath": WORKSPACE},
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108  # an emptyDir of its own
            *agent.pod_mounts(platform),
        ],
    }


def _init_containers(preset: Preset, platform: SandboxPlatform, size: Size) -> dict[str, Any]:
    cpu = container_resources(preset, size)["limits"]["cpu"]
    found = agent.init_containers(platform, _security_context(preset), cpu)
    return {"initContainers": found} if found else {}


def pod_spec(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform, image: Image, size: Size
) -> dict[str, Any]:
    """The hardened pod, with the workspace PVC mounted at /workspace."""
    if image.oci is None:
        raise FieldError("spec.image", f"{ws.spec.image!r} has no OCI image for pod sandboxes")
    pod = preset.pod
    workspace = {
        "name": CLAIM_TEMPLATE,
        "persistentVolumeClaim": {"claimName": workspace_volume_name(ws)},
    }
    spec: dict[str, Any] = {
        "serviceAccountName": service_account_name(ws),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": pod.uid,
            "runAsGroup": pod.gid,
            "fsGroup": pod.gid,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        **_init_containers(preset, platform, size),
        "containers": [_container(ws, preset, platform, image.oci, size)],
        "volumes": [
            workspace,
            {"name": "tmp", "emptyDir": {"sizeLimit": format_bytes(pod.tmp_size)}},
            *agent.pod_volumes(platform),
        ],
        **dns(preset, platform),
        **scheduling(preset),
    }
    if preset.runtime_class is not None:
        spec = {"runtimeClassName": preset.runtime_class, **spec}
    return spec


def scheduling(preset: Preset) -> dict[str, Any]:
    s = preset.scheduling
    out: dict[str, Any] = {}
    if s.node_selector:
        out["nodeSelector"] = dict(sorted(s.node_selector.items()))
    if s.tolerations:
        out["tolerations"] = [t.model_dump(exclude_none=True) for t in s.tolerations]
    if s.priority_class_name:
        out["priorityClassName"] = s.priority_class_name
    return out
