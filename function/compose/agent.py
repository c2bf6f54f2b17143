"""The in-sandbox agent: how it reaches a VM or a pod, how it starts, and when it is ready.

One digest-pinned image (`input.agent.image`, built by `agent/Dockerfile`) carries the agent
twice. A VM attaches its `/disk/agent.img`, an ext4 filesystem, as a read-only virtio disk with
a fixed serial, so the guest finds it at `/dev/disk/by-id/virtio-<serial>` whatever else is
attached; the boot script mounts it and runs the `boot.sh` on it, which starts the agent as a
systemd service (`cloud_init.py`). A pod's init container copies `/opt/workspace-sandbox-agent/`
into an emptyDir that the sandbox container mounts read-only and runs with the image's
interpreter, `input.agent.python`. Either way the agent's bytes stay out of the desired state:
the function only names the image.

The bundle is pure Python and abi3 wheels, so it runs on any CPython 3.11 or newer of the
image's architecture. Without `input.agent`, a pod runs the image's own launcher, `IMAGE_LAUNCHER`
(where the reference image, `images/sandbox/Dockerfile`, installs it), and a VM gets no agent: a
warning says so, and the VM has no readiness probe, since nothing would answer it.

A pod's agent never starts through PATH. A runtime looks a relative `command[0]` up on the
image's PATH, and the reference image's PATH starts with `/workspace/.local/bin`, on the
workspace disk the sandbox's code writes: a `python3` left there would run in the agent's
place, and receive its token, from the next container start on, through suspend and resume
too. So both commands name the interpreter or the launcher by absolute path outside everything
the user can write (`platform.USER_WRITABLE`); the user's own PATH stays theirs.
"""

from typing import Any

from function.model.platform import SandboxPlatform

# The image's two layouts, and where a pod mounts its copy of the bundle.
BUNDLE = "/opt/workspace-sandbox-agent"
LAUNCHER = "workspace-sandbox-agent"
# Where a pod image run without input.agent has its agent: an executable whose interpreter its
# first line names by absolute path, isolated (`-I`), as the reference image installs it.
IMAGE_LAUNCHER = f"/usr/local/bin/{LAUNCHER}"
DISK_PATH = "/disk/agent.img"
# virtio-blk serials are at most 20 characters of [A-Za-z0-9_.+-]; udev links the disk as
# /dev/disk/by-id/virtio-<serial>, which no filesystem label on another disk can imitate.
DISK_SERIAL = "wsagent"
VOLUME = "agent"
WORKSPACE = "/workspace"
HEALTH = "/health"

# requests = limits for the copy, like every container of a sandbox pod; its CPU is the sandbox
# container's (`init_containers`).
_COPY_RESOURCES = {"memory": "64Mi", "ephemeral-storage": "64Mi"}
# The bundle is about 25 MiB; the copy may never fill the pod's ephemeral storage.
COPY_SIZE = "128Mi"
_COPY_TARGET = "/agent"


def readiness_probe(platform: SandboxPlatform) -> dict[str, Any]:
    """Ready when the agent answers /health: then files and commands work.

    kubelet probes from the node, which the policies leave open (README, "Network isolation");
    for a VM, KubeVirt puts the probe on the virt-launcher pod and reports it as the VM's
    `status.ready`.
    """
    return {
        "httpGet": {"path": HEALTH, "port": platform.gateway.agent_port},
        "initialDelaySeconds": 2,
        "periodSeconds": 5,
        "timeoutSeconds": 2,
        "failureThreshold": 3,
    }


def pod_command(platform: SandboxPlatform) -> list[str]:
    """The sandbox container's command: the delivered bundle, or the image's own agent.

    Both by absolute path, never through the image's PATH. `-I` ignores PYTHON* variables and
    the user's site-packages, which the workspace (the pod's HOME) would hold. Not root, the
    agent acts as the pod's user alone.
    """
    args = ["--address", f"0.0.0.0:{platform.gateway.agent_port}", "--root", WORKSPACE]
    if platform.agent is None:
        return [IMAGE_LAUNCHER, *args]
    return [platform.agent.python, "-I", f"{BUNDLE}/{LAUNCHER}", *args]


def pod_mounts(platform: SandboxPlatform) -> list[dict[str, Any]]:
    if platform.agent is None:
        return []
    return [{"name": VOLUME, "mountPath": BUNDLE, "readOnly": True}]


def pod_volumes(platform: SandboxPlatform) -> list[dict[str, Any]]:
    if platform.agent is None:
        return []
    return [{"name": VOLUME, "emptyDir": {"sizeLimit": COPY_SIZE}}]


def init_containers(
    platform: SandboxPlatform, security: dict[str, Any], cpu: str
) -> list[dict[str, Any]]:
    """The copy of the bundle into the pod, as hardened as the sandbox container itself.

    It may use the sandbox container's `cpu`: a pod's effective request is the larger of its
    init containers' and the sum of its containers', so this takes no more of the node or the
    quota, and the pod starts sooner. Held to 100m, the copy of the bundle's ~600 files took
    5 s under runc and 11 s under gVisor before the agent could start (tests/boot, the pod
    tier); at one CPU, 0.4 s and 0.8 s.
    """
    if platform.agent is None:
        return []
    amounts = {"cpu": cpu, **_COPY_RESOURCES}
    return [
        {
            "name": "agent",
            "image": platform.agent.image,
            "imagePullPolicy": "IfNotPresent",
            # Not -a: the copy belongs to the pod's user, whatever owns the image's files.
            "command": ["cp", "-R", f"{BUNDLE}/.", _COPY_TARGET],
            "resources": {"requests": dict(amounts), "limits": dict(amounts)},
            "securityContext": security,
            "volumeMounts": [{"name": VOLUME, "mountPath": _COPY_TARGET}],
        }
    ]


def vm_disk() -> dict[str, Any]:
    return {"name": VOLUME, "disk": {"bus": "virtio", "readonly": True}, "serial": DISK_SERIAL}


def vm_volume(platform: SandboxPlatform) -> dict[str, Any] | None:
    if platform.agent is None:
        return None
    return {
        "name": VOLUME,
        "containerDisk": {
            "image": platform.agent.image,
            "path": DISK_PATH,
            "imagePullPolicy": "IfNotPresent",
        },
    }


def not_configured(preset_name: str, platform: SandboxPlatform) -> str:
    """What the platform engineer is told while VMs get no agent."""
    return (
        f"input.agent: not set, so the VM of preset {preset_name!r} gets no in-sandbox agent: "
        f"nothing answers on gateway.agentPort {platform.gateway.agent_port}, and files and "
        "commands can't be used; build the agent image (agent/Dockerfile) and set "
        "input.agent.image to it, pinned by digest"
    )
