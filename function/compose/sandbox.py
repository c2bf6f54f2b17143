"""The agent-sandbox `Sandbox`: a Kata or gVisor pod hardened past Pod Security "restricted".

The pod runs as a fixed unprivileged user with a read-only root filesystem, no privilege
escalation, no capabilities, the RuntimeDefault seccomp profile, no service-account token, no
service links, no host namespaces, paths or ports, and the platform's public resolvers. Its
workspace is a PVC composed beside it (kept while the Sandbox is suspended, and able to grow),
mounted at /workspace, which is also the working directory and home. Requests equal limits,
ephemeral storage included, so a sandbox can't take more of the node than it asked for.

The container runs the in-sandbox agent, and is ready when the agent answers (`agent.py`):
with `input.agent`, an init container as hardened as the sandbox's own copies the agent into
the pod first.
"""

from typing import Any

from function.compose import agent
from function.compose.names import (
    CLAIM_TEMPLATE,
    labels,
    pod_labels,
    sandbox_name,
    service_account_name,
    workspace_volume_name,
)
from function.compose.observed import dig
from function.compose.service import reserved_ports
from function.compose.sizing import Size
from function.compose.virtual_machine import scheduling
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.address import ip_text
from function.model.platform import Image, Preset, SandboxPlatform
from function.model.quantity import format_bytes, format_cpu
from function.model.spec import WorkspaceSandbox

KEY = "sandbox"
WORKSPACE = "/workspace"
OPERATING_MODE = {"Running": "Running", "Suspended": "Suspended"}


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


def _dns(preset: Preset, platform: SandboxPlatform) -> dict[str, Any]:
    if preset.cluster_dns:
        return {"dnsPolicy": "ClusterFirst"}
    return {
        "dnsPolicy": "None",
        "dnsConfig": {
            "nameservers": [ip_text(r) for r in platform.network.resolvers],
            # Public resolvers know no search domains; a single-label name is never local.
            "options": [{"name": "ndots", "value": "1"}],
        },
    }


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
    ports = {**reserved_ports(ws, preset, platform), **{p.name: p.port for p in ws.spec.ports}}
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


def _init_containers(preset: Preset, platform: SandboxPlatform) -> dict[str, Any]:
    found = agent.init_containers(platform, _security_context(preset))
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
        **_init_containers(preset, platform),
        "containers": [_container(ws, preset, platform, image.oci, size)],
        "volumes": [
            workspace,
            {"name": "tmp", "emptyDir": {"sizeLimit": format_bytes(pod.tmp_size)}},
            *agent.pod_volumes(platform),
        ],
        **_dns(preset, platform),
        **scheduling(preset),
    }
    if preset.runtime_class is not None:
        spec = {"runtimeClassName": preset.runtime_class, **spec}
    return spec


def sandbox(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform, image: Image, size: Size
) -> dict[str, Manifest]:
    return {
        KEY: {
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "metadata": {"name": sandbox_name(ws, KEY), "labels": labels(ws)},
            "spec": {
                "operatingMode": OPERATING_MODE[ws.spec.power],
                # Our own ClusterIP Service has the sandbox's name; the controller's headless
                # one would clash with it.
                "service": False,
                "podTemplate": {
                    "metadata": {"labels": pod_labels(ws)},
                    "spec": pod_spec(ws, preset, platform, image, size),
                },
            },
        }
    }


def observed_claims(observed: Observed) -> list[Any]:
    """An existing Sandbox's claim templates, the workspace first; [] if there are none."""
    claims = dig(observed.get(KEY), "spec", "volumeClaimTemplates")
    return claims if isinstance(claims, list) else []


def keep_claim_templates(resources: dict[str, Manifest], observed: Observed) -> dict[str, Manifest]:
    """Keep an older Sandbox's claim templates: they are immutable, and hold the workspace.

    Such a Sandbox's workspace is the templated claim, which the controller mounts by the
    template's name; the pod then has no workspace volume of its own.
    """
    claims = observed_claims(observed)
    if not claims or KEY not in resources:
        return resources
    manifest = resources[KEY]
    template = manifest["spec"]["podTemplate"]
    volumes = [v for v in template["spec"]["volumes"] if v["name"] != CLAIM_TEMPLATE]
    spec = {
        **manifest["spec"],
        "podTemplate": {**template, "spec": {**template["spec"], "volumes": volumes}},
        "volumeClaimTemplates": claims,
    }
    return {**resources, KEY: {**manifest, "spec": spec}}
