"""The ClusterIP Service the platform gateway uses to reach the sandbox's agent and ports."""

from typing import Any

from function.compose.names import SERVICE_KEY, identity_labels, labels, sandbox_name
from function.errors import FieldError
from function.model import Manifest
from function.model.platform import SandboxPlatform
from function.model.spec import WorkspaceSandbox

KEY = SERVICE_KEY
SSH_PORT = 22


def reserved_ports(ws: WorkspaceSandbox, platform: SandboxPlatform, *, ssh: bool) -> dict[str, int]:
    """Ports the sandbox always exposes: the agent, and SSH where it is served and given keys.

    `ssh` is the workload's `serves_ssh`: only a VM receives the keys (cloud-init installs them)
    and runs an SSH server; nothing delivers them into a pod, so port 22 is never opened for one.
    """
    reserved = {"agent": platform.gateway.agent_port}
    if ws.spec.ssh.authorized_keys and ssh:
        reserved["ssh"] = SSH_PORT
    return reserved


def _port(name: str, port: int) -> dict[str, Any]:
    return {"name": name, "port": port, "protocol": "TCP", "targetPort": port}


def service(ws: WorkspaceSandbox, platform: SandboxPlatform, *, ssh: bool) -> dict[str, Manifest]:
    """`ssh`: whether the workload serves SSH (`Workload.serves_ssh`)."""
    reserved = reserved_ports(ws, platform, ssh=ssh)
    for i, p in enumerate(ws.spec.ports):
        if p.name in reserved:
            raise FieldError(f"spec.ports[{i}].name", f"{p.name!r} is reserved by the platform")
        if p.port in reserved.values():
            raise FieldError(f"spec.ports[{i}].port", f"{p.port} is reserved by the platform")
    ports = [_port(n, p) for n, p in reserved.items()]
    # Sorted so that reordering spec.ports doesn't rewrite the live Service.
    ports += [_port(p.name, p.port) for p in sorted(ws.spec.ports, key=lambda p: p.port)]
    return {
        KEY: {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": sandbox_name(ws, KEY), "labels": labels(ws)},
            "spec": {
                "type": "ClusterIP",
                "selector": identity_labels(ws),
                "ports": ports,
            },
        }
    }
