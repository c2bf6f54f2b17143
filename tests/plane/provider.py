"""A simulated provider-kubernetes and the ComputePlane it stands in for.

Each composed Object is observed as the provider reports it: the wrapped object as it exists
inside the plane under `status.atProvider.manifest`, and a Ready condition derived from the
Object's own readiness query, evaluated with cel-python over that object. So the plane tests
also exercise the queries the provider will run.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from function.compose.names import (
    new_identity,
    plane_name,
    plane_namespace,
    provider_config_name,
    workspace_volume_name,
)
from function.compose.placements import plane as compose_plane
from function.model import Manifest
from function.model.platform import SandboxPlatform
from function.render import Rendered, render
from tests.cluster import Observed, converge, seen
from tests.support import (
    NAMESPACE,
    NOW,
    PLATFORM,
    owned,
    platform,
    platform_input,
    workspace,
)

Required = dict[str, list[Manifest]]

OBJECT_API = "kubernetes.m.crossplane.io/v1alpha1"
PLANE_API = "apps.cozystack.io/v1alpha1"
# The names a new sandbox alice-api gets (they don't depend on its spec).
ALICE_API = workspace()
IN_PLANE = plane_namespace(ALICE_API)  # the sandbox's own namespace inside the plane
IDENTITY = new_identity("alice-api")
CLAIM = workspace_volume_name(ALICE_API)
PROVIDER_CONFIG = provider_config_name(ALICE_API)
LABELS = {
    "app.kubernetes.io/managed-by": "function-workspace-sandbox",
    "sandbox.cozystack.io/workspace": IDENTITY,
}
DEDICATED_MANAGEMENT = ["Observe", "Create", "Update"]
STAGE_ONE = ["plane-access", "plane-guard", "plane-namespace"]
STAGE_TWO = [
    "cilium-policy",
    "network-policy",
    "plane-limits",
    "plane-quota",
    "service",
    "service-account",
    "workspace-claim",
]


def _with_agent_sandbox() -> SandboxPlatform:
    presets = platform_input()["presets"]
    changed = {
        name: {
            **presets[name],
            "computePlane": {**presets[name]["computePlane"], "agentSandbox": True},
        }
        for name in ("shared-plane", "dedicated-plane")
    }
    return platform(presets={**presets, **changed})


AGENT_SANDBOX = _with_agent_sandbox()


@dataclass(frozen=True)
class Placement:
    preset: str
    plane: str
    """The ComputePlane's name: the tenant's shared one, or the one composed per sandbox."""
    platform: SandboxPlatform = field(compare=False)  # pydantic models with dicts don't hash
    workload: str = "statefulset"
    """The key of the workload: a StatefulSet, or an agent-sandbox Sandbox."""

    def __repr__(self) -> str:
        return f"Placement({self.preset}, {self.workload})"

    @property
    def dedicated(self) -> bool:
        return self.preset == "dedicated-plane"

    @property
    def workload_kind(self) -> str:
        return "StatefulSet" if self.workload == "statefulset" else "Sandbox"

    @property
    def secret(self) -> str:
        return f"{self.plane}-cluster-admin-kubeconfig"

    @property
    def runtime(self) -> str:
        return "container" if self.dedicated else "gvisor"

    @property
    def placement(self) -> str:
        return "DedicatedComputePlane" if self.dedicated else "SharedComputePlane"

    @property
    def own(self) -> list[str]:
        """What the XR composes outside the plane whatever the plane's state."""
        if self.dedicated:
            # The plane's workers keep their policy while the plane exists.
            return ["compute-plane", "plane-workers", "usage-plane-workers"]
        return ["plane-workers"]

    @property
    def stage_one(self) -> list[str]:
        """The first placement: the workers' policy stays while the namespace's Object does."""
        return STAGE_ONE if self.dedicated else [*STAGE_ONE, "usage-plane-workers"]

    @property
    def with_workload(self) -> list[str]:
        """The workload, and in a shared plane what must outlive its Object."""
        if self.dedicated:
            return [self.workload]
        used = ["cilium-policy", "network-policy", "plane-namespace"]
        return [self.workload, *(f"usage-{k}" for k in used)]


SHARED = Placement("shared-plane", "computeplane", PLATFORM, "statefulset")
DEDICATED = Placement("dedicated-plane", plane_name(workspace()), PLATFORM, "statefulset")
PLACEMENTS = [
    pytest.param(SHARED, id="shared-statefulset"),
    pytest.param(DEDICATED, id="dedicated-statefulset"),
    pytest.param(replace(SHARED, platform=AGENT_SANDBOX, workload="sandbox"), id="shared-sandbox"),
    pytest.param(
        replace(DEDICATED, platform=AGENT_SANDBOX, workload="sandbox"), id="dedicated-sandbox"
    ),
]
BOTH = [pytest.param(SHARED, id="shared"), pytest.param(DEDICATED, id="dedicated")]


def compute_plane(p: Placement, ready: Mapping[str, str] | None) -> Manifest:
    """The ComputePlane as observed, with `ready` as its Ready condition (None: none yet)."""
    status = {"conditions": [{"type": "Ready", **ready}]} if ready is not None else {}
    return {
        "apiVersion": PLANE_API,
        "kind": "ComputePlane",
        "metadata": {"name": p.plane, "namespace": NAMESPACE},
        "status": status,
    }


READY = {"status": "True", "reason": "ReconciliationSucceeded"}


def plane_world(
    p: Placement,
    plane: Mapping[str, str] | None = READY,
    *,
    exists: bool = True,
    secret: bool = True,
    name: str = "alice-api",
) -> tuple[Observed, Required]:
    """What Crossplane observes of a dedicated plane and answers to the requirements.

    A dedicated plane is composed (through an Object), so it is observed; a shared one is the tenant's
    and only ever a required resource. The Secret is answered by name, without data.
    """
    if p.dedicated:
        p = replace(p, plane=plane_name(workspace(name=name)))
    found = [compute_plane(p, plane)] if exists else []
    kubeconfig: Manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": p.secret, "namespace": NAMESPACE},
    }
    required: Required = {"plane-kubeconfig": [kubeconfig] if secret else []}
    if p.dedicated:
        return {"compute-plane": plane_object(p, found[0], name)} if found else {}, required
    return {}, {**required, "compute-plane": found}


def plane_object(p: Placement, plane: Manifest, name: str = "alice-api") -> Manifest:
    """A dedicated plane's Object as provider-kubernetes reports it, with `plane` observed."""
    ws = workspace({"preset": p.preset}, name)
    options = p.platform.preset(p.preset)[1].compute_plane
    assert options is not None, p.preset
    return seen(compose_plane.plane_object(ws, options, p.platform), plane.get("status"))


def run(
    p: Placement,
    spec: Mapping[str, Any] | None = None,
    observed: Observed | None = None,
    required: Required | None = None,
    name: str = "alice-api",
) -> Rendered:
    ws = workspace({"preset": p.preset, **(spec or {})}, name)
    return render(ws, p.platform, owned(observed, name), NOW, required)


def settled_in_plane(
    p: Placement,
    spec: Mapping[str, Any] | None = None,
    observed: Observed | None = None,
    name: str = "alice-api",
) -> tuple[Rendered, Observed]:
    """The settled sandbox of a plane placement, with the plane ready (`cluster.converge`)."""
    world, required = plane_world(p, name=name)
    return converge(lambda now: run(p, spec, now, required, name), observed, world)


def inner(out: Rendered, key: str) -> Manifest:
    manifest: Manifest = out.resources[key]["spec"]["forProvider"]["manifest"]
    return manifest


def provisioned(out: Rendered) -> tuple[str, str, str]:
    c = out.conditions[0]
    assert c.type == "Provisioned"
    return c.status, c.reason, c.message


def pod_template(manifest: Manifest) -> Manifest:
    """A StatefulSet's or a Sandbox's pod template."""
    template: Manifest = manifest["spec"][
        "template" if manifest["kind"] == "StatefulSet" else "podTemplate"
    ]
    return template


def pod_spec(manifest: Manifest) -> Manifest:
    spec: Manifest = pod_template(manifest)["spec"]
    return spec


def expected_violations(p: Placement) -> list[str]:
    # Runtime `container` is for dedicated planes only, whose own VMs isolate the pod: it runs
    # with the plane's default runtime, so it has no runtime class to name.
    return ["Runtime Class: spec.runtimeClassName must be set"] if p.runtime == "container" else []
