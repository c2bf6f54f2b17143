"""The agent-sandbox `Sandbox`: a Kata or gVisor pod hardened past Pod Security "restricted".

The pod runs as a fixed unprivileged user with a read-only root filesystem, no privilege
escalation, no capabilities, the RuntimeDefault seccomp profile, no service-account token, no
service links, no host namespaces, paths or ports, and the platform's public resolvers. Its
workspace is a PVC from `volumeClaimTemplates` (kept while the Sandbox is suspended), mounted at
/workspace, which is also the working directory and home. Requests equal limits, ephemeral
storage included, so a sandbox can't take more of the node than it asked for.
"""

from typing import Any

from function.compose.names import (
    CLAIM_TEMPLATE,
    identity_labels,
    labels,
    sandbox_name,
    service_account_name,
)
from function.compose.observed import dig
from function.compose.service import reserved_ports
from function.compose.sizing import Size
from function.compose.virtual_machine import scheduling
from function.errors import FieldError
from function.model import Manifest, Observed
from function.model.platform import Image, Preset, SandboxPlatform
from function.model.quantity import format_bytes, format_cpu
from function.model.spec import WorkspaceSandbox

KEY = "sandbox"
WORKSPACE = "/workspace"
OPERATING_MODE = {"Running": "Running", "Suspended": "Suspended"}


def _resources(preset: Preset, size: Size) -> dict[str, Any]:
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
            "nameservers": [str(r) for r in platform.network.resolvers],
            # Public resolvers know no search domains; a single-label name is never local.
            "options": [{"name": "ndots", "value": "1"}],
        },
    }


def _claim(ws: WorkspaceSandbox, preset: Preset, size: Size) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": preset.storage_class,
        "resources": {"requests": {"storage": format_bytes(size.disk)}},
    }
    if ws.spec.restore_from is not None:
        spec["dataSource"] = {
            "apiGroup": "snapshot.storage.k8s.io",
            "kind": "VolumeSnapshot",
            "name": ws.spec.restore_from.snapshot,
        }
    return {"metadata": {"name": CLAIM_TEMPLATE, "labels": labels(ws)}, "spec": spec}


def _container(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform, image: str, size: Size
) -> dict[str, Any]:
    pod = preset.pod
    ports = {**reserved_ports(ws, platform), **{p.name: p.port for p in ws.spec.ports}}
    return {
        "name": "sandbox",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "workingDir": WORKSPACE,
        "env": [{"name": "HOME", "value": WORKSPACE}, {"name": "TMPDIR", "value": "/tmp"}],  # noqa: S108  # an emptyDir of its own
        "ports": [
            {"name": name, "containerPort": port, "protocol": "TCP"}
            for name, port in sorted(ports.items(), key=lambda p: p[1])
        ],
        "resources": _resources(preset, size),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": pod.uid,
            "runAsGroup": pod.gid,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": CLAIM_TEMPLATE, "mountPath": WORKSPACE},
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108  # an emptyDir of its own
        ],
    }


def sandbox(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform, image: Image, size: Size
) -> dict[str, Manifest]:
    if image.oci is None:
        raise FieldError("spec.image", f"{ws.spec.image!r} has no OCI image for pod sandboxes")
    pod = preset.pod
    pod_spec: dict[str, Any] = {
        "runtimeClassName": preset.runtime_class,
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
        "containers": [_container(ws, preset, platform, image.oci, size)],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": format_bytes(pod.tmp_size)}}],
        **_dns(preset, platform),
        **scheduling(preset),
    }
    return {
        KEY: {
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "metadata": {"name": sandbox_name(ws), "labels": labels(ws)},
            "spec": {
                "operatingMode": OPERATING_MODE[ws.spec.power],
                # Our own ClusterIP Service has the sandbox's name; the controller's headless
                # one would clash with it.
                "service": False,
                "podTemplate": {"metadata": {"labels": identity_labels(ws)}, "spec": pod_spec},
                "volumeClaimTemplates": [_claim(ws, preset, size)],
            },
        }
    }


def observed_claims(observed: Observed) -> list[Any]:
    """An existing Sandbox's claim templates, the workspace first; [] if there are none."""
    claims = dig(observed.get(KEY), "spec", "volumeClaimTemplates")
    return claims if isinstance(claims, list) else []


def settle_claims(resources: dict[str, Manifest], observed: Observed) -> dict[str, Manifest]:
    """Keep an existing Sandbox's claim templates: they are immutable, and hold the workspace."""
    claims = observed_claims(observed)
    if not claims or KEY not in resources:
        return resources
    manifest = resources[KEY]
    return {
        **resources,
        KEY: {**manifest, "spec": {**manifest["spec"], "volumeClaimTemplates": claims}},
    }
