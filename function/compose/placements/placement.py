"""What the placements share: their answer, and how each stages its parts through Objects.

Each placement is a module beside this one: `namespace.py` (the tenant's namespace),
`compute_plane.py` (a namespace of a ComputePlane) and `sandbox_namespace.py` (a host namespace
of its own). Either way the answer is a `Placement`: what is composed, what the status reads the
workload from, what is still awaited, and which resources Crossplane must fetch.

The two that place through provider-kubernetes Objects do so in stages (`staged`), each once the
one before is observed ready, so that the pod never runs before the policies that isolate it
exist; they give the sandbox's namespace the same quota and limits (`namespace_quota`,
`namespace_limits`) and its pod the same short grace (`short_grace`).
"""

from dataclasses import dataclass, field
from decimal import Decimal

from function.compose import workspace_claim
from function.compose.kubernetes_object import API_VERSION as OBJECT_API
from function.compose.names import labels
from function.compose.placements.plane_guards import GRACE_SECONDS
from function.compose.requirement import Requirements
from function.compose.status import Waiting
from function.compose.workload import Workload
from function.model import Manifest, Observed
from function.model.platform import SandboxPlatform
from function.model.quantity import format_bytes
from function.model.spec import WorkspaceSandbox

OBJECT: Manifest = {"apiVersion": OBJECT_API, "kind": "Object"}

POD_SECURITY = {
    f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")
}


@dataclass(frozen=True)
class Placement:
    resources: dict[str, Manifest]
    """What is composed, keyed by composition-resource name."""
    runs: Workload
    desired: dict[str, Manifest]
    """The parts as the workload sees them (unwrapped in a plane): what its status reads."""
    observed: Observed
    """What is observed where the workload runs (inside a plane: what its Objects observe)."""
    requirements: Requirements = field(default_factory=dict)
    unfetched: str = ""
    """What to say if Crossplane can't fetch `requirements`."""
    warnings: list[str] = field(default_factory=list)
    waiting: Waiting | None = None
    """What provisioning waits for before the workload's own progress counts."""
    plane: str | None = None
    namespace: str | None = None
    """Where the workload runs, when that isn't the tenant's namespace."""


def namespace_quota(
    ws: WorkspaceSandbox, compute: dict[str, str], *, claims: int, disk: Decimal, pods: int
) -> Manifest:
    """A sandbox namespace's ResourceQuota: `compute`, storage, and one ClusterIP Service."""
    hard = {
        **compute,
        "requests.storage": format_bytes(disk),
        "persistentvolumeclaims": str(claims),
        "pods": str(pods),
        "services": "1",
        "services.loadbalancers": "0",
        "services.nodeports": "0",
    }
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "sandbox", "labels": labels(ws)},
        "spec": {"hard": dict(sorted(hard.items()))},
    }


def namespace_limits(
    ws: WorkspaceSandbox, container: dict[str, str] | None, disk: Decimal
) -> Manifest:
    """A sandbox namespace's LimitRange: claims no bigger than `disk`, containers at `container`.

    None: no bound on containers.
    """
    limits: list[Manifest] = []
    if container is not None:
        limits.append(
            {
                "type": "Container",
                "default": container,
                "defaultRequest": dict(container),
                "max": dict(container),
            }
        )
    limits.append({"type": "PersistentVolumeClaim", "max": {"storage": format_bytes(disk)}})
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "sandbox", "labels": labels(ws)},
        "spec": {"limits": limits},
    }


def inside_platform(platform: SandboxPlatform) -> SandboxPlatform:
    """Inside the plane no tenant baseline allows anything, so allow rules restrict."""
    network = platform.network.model_copy(update={"namespaces_allow_internet": False})
    return platform.model_copy(update={"network": network})


def short_grace(manifest: Manifest) -> Manifest:
    """The workload with an explicit, short termination grace for its pod."""
    spec = manifest["spec"]
    field = "template" if "template" in spec else "podTemplate"
    template = spec[field]
    graced = {**template["spec"], "terminationGracePeriodSeconds": GRACE_SECONDS}
    return {**manifest, "spec": {**spec, field: {**template, "spec": graced}}}


def clears_stage(key: str, observed: Observed, ready: dict[str, bool]) -> bool:
    """Whether `key` lets the next stage be placed: ready, or a claim that exists."""
    # A claim of a WaitForFirstConsumer class binds only once its pod exists: waiting for it to
    # be bound before placing the pod would wait forever.
    return ready.get(key, False) or (key == workspace_claim.KEY and key in observed)


def staged(
    placed: dict[str, Manifest],
    observed: Observed,
    ready: dict[str, bool],
    stages: tuple[tuple[str, ...], ...],
) -> dict[str, Manifest]:
    """What may be placed now: each stage once the one before is ready, and all placed so far.

    A stage also waits for what `ready` judges beside the Objects (the workers' policy).
    """
    out: dict[str, Manifest] = {}
    for stage in (*stages, tuple(placed)):
        out |= {k: placed[k] for k in stage if k in placed}
        if not all(clears_stage(k, observed, ready) for k in stage if k in placed or k in ready):
            break
    return out | {k: m for k, m in placed.items() if k in observed}
