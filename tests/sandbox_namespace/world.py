"""The SandboxNamespace placement as the tests drive it: render, apply, observe, repeat.

provider-kubernetes is simulated as in the plane tests (`tests.cluster.applied`): each Object
reports the object it carries, and Ready from its own readiness query over that object.
"""

from collections.abc import Mapping
from typing import Any

from function.compose.names import sandbox_namespace
from function.model import Manifest
from function.model.platform import SandboxPlatform
from function.render import Rendered, render
from tests import cluster
from tests.cluster import Observed
from tests.support import NOW, PLATFORM, owned, workspace

ISOLATED = "isolated"
ISOLATED_KATA = "isolated-kata"
CONFIG = {"kind": "ClusterProviderConfig", "name": "workspace-sandbox-namespaces"}
TENANT_LABEL = "sandbox.cozystack.io/tenant-namespace"
HOME = sandbox_namespace(workspace())
"""alice-api's sandbox namespace."""
FIRST = ["sandbox-namespace"]
POLICIES = ["cilium-policy", "network-policy", "namespace-limits", "namespace-quota", "service"]
# What each preset runs once its namespace and policies are ready: the workload's Objects.
WORKLOAD = {
    ISOLATED: ["vm", "workspace-volume"],
    ISOLATED_KATA: ["sandbox", "workspace-claim"],
}
SECOND = {
    ISOLATED: sorted(POLICIES),
    ISOLATED_KATA: sorted([*POLICIES, "service-account"]),
}


def run(
    preset: str,
    spec: Mapping[str, Any] | None = None,
    observed: Observed | None = None,
    *,
    name: str = "alice-api",
    platform: SandboxPlatform = PLATFORM,
) -> Rendered:
    ws = workspace({"preset": preset, **(spec or {})}, name)
    return render(ws, platform, owned(observed, name), NOW)


def steps(
    preset: str,
    spec: Mapping[str, Any] | None = None,
    *,
    name: str = "alice-api",
    platform: SandboxPlatform = PLATFORM,
) -> list[tuple[Rendered, Observed]]:
    """Each render with what it observed, from nothing until nothing changes."""
    return cluster.steps(lambda now: run(preset, spec, now, name=name, platform=platform))


def settled_in_namespace(
    preset: str,
    spec: Mapping[str, Any] | None = None,
    *,
    name: str = "alice-api",
    platform: SandboxPlatform = PLATFORM,
) -> tuple[Rendered, Observed]:
    """The settled sandbox: its last render and what that render observed."""
    return steps(preset, spec, name=name, platform=platform)[-1]


def carried(out: Rendered, key: str) -> Manifest:
    """What the Object `key` carries into the sandbox namespace."""
    manifest: Manifest = out.resources[key]["spec"]["forProvider"]["manifest"]
    return manifest


def objects(out: Rendered) -> list[str]:
    return sorted(k for k, m in out.resources.items() if m["kind"] == "Object")
