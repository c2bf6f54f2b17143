"""The agent-sandbox controller v0.5.6 against the plane, out of cluster.

It runs as its own ServiceAccount, `agent-sandbox-system/agent-sandbox-controller`, with the
ServiceAccount, bindings and ClusterRole of its pinned `k8s/controller.yaml` and
`k8s/rbac.generated.yaml` (not their Deployment and Services: the controller is a process
here), so the project's admission policies judge its writes as they would on a cluster: they
let that account, and no other, create a sandbox's pod. Its webhook server is off: the API
server cannot reach one here, and the stored version (v1beta1) is the one everything asks
for, so no conversion is called. No leader election (one process), and no extensions
controllers: the function composes Sandboxes only, no SandboxTemplate, SandboxClaim or
SandboxWarmPool.
"""

import contextlib
import time
from pathlib import Path

import httpx
import yaml

from tests.control_plane.install import apply
from tests.control_plane.server import START_ATTEMPTS, ControlPlane, built, source
from tests.ports import free_port

MODULE = "sigs.k8s.io/agent-sandbox"
NAME = "agent-sandbox"
"""The process's name on the plane (`plane.processes`, `agent-sandbox.log`)."""
NAMESPACE = "agent-sandbox-system"
ACCOUNT = "agent-sandbox-controller"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
IDENTITY_KINDS = frozenset({"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"})
"""What of upstream's manifests gives the controller its identity and rights. Its Role in its
own namespace is for the webhook's certificate Secret, which it does not make with the webhook
off."""
TOKEN_SECONDS = 24 * 3600
"""As long as the plane's certificates live."""
HEALTHY_SECONDS = 60.0
"""Start to the Sandbox controller's workers running: about 2 s on 2 cores."""
WORKERS = '"msg":"Starting workers","controller":"sandbox"'
"""controller-runtime's line once the Sandbox controller's caches have synced; `/readyz` is a
ping that answers before."""


def _identity(plane: ControlPlane) -> Path:
    """Upstream's ServiceAccount and RBAC for the controller, applied; its kubeconfig."""
    k8s = source(MODULE) / "k8s"
    docs = [
        doc
        for name in ("controller.yaml", "rbac.generated.yaml")
        for doc in yaml.safe_load_all((k8s / name).read_text())
        if doc and doc["kind"] in IDENTITY_KINDS
    ]
    manifests = plane.root / "agent-sandbox-identity.yaml"
    manifests.write_text(yaml.safe_dump_all(docs))
    apply(plane, "-f", str(manifests))
    return plane.account_kubeconfig(NAMESPACE, ACCOUNT, TOKEN_SECONDS)


def argv(metrics: int, health: int) -> list[str]:
    return [
        str(built(NAME) / "agent-sandbox-controller"),
        "--leader-elect=false",
        "--enable-webhook=false",
        f"--metrics-bind-address=127.0.0.1:{metrics}",
        f"--health-probe-bind-address=127.0.0.1:{health}",
    ]


def _healthy(plane: ControlPlane, health: int) -> bool:
    """Whether the controller answers `/readyz` and its Sandbox workers run; False if it
    ended first."""
    log = plane.root / f"{NAME}.log"
    deadline = time.monotonic() + HEALTHY_SECONDS
    while time.monotonic() < deadline:
        if plane.processes[NAME].poll() is not None:
            return False
        with contextlib.suppress(httpx.HTTPError):
            answer = httpx.get(f"http://127.0.0.1:{health}/readyz", timeout=2)
            if answer.status_code == 200 and WORKERS in log.read_text(errors="replace"):
                return True
        time.sleep(0.25)
    return False


def start_agent_sandbox(plane: ControlPlane) -> None:
    """Start the controller on `plane` and wait until its Sandbox workers run; a second call
    on the same plane finds it running and returns."""
    running = plane.processes.get(NAME)
    if running is not None and running.poll() is None:
        return
    env = {"KUBECONFIG": str(_identity(plane))}
    for _ in range(START_ATTEMPTS):
        metrics, health = free_port(), free_port()
        command = argv(metrics, health)
        plane.run(NAME, command, env)
        if _healthy(plane, health):
            return
        process = plane.processes.pop(NAME)
        if process.poll() is None:
            process.kill()
            process.wait(15)
        log = (plane.root / f"{NAME}.log").read_text(errors="replace")
        if "address already in use" not in log:
            break
    raise AssertionError(f"the agent-sandbox controller did not start:\n{plane.logs()}")
