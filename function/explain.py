"""`workspace-sandbox policy explain`: render a WorkspaceSandbox and judge flows to and from it.

Platform engineers audit a destination the way the tests do: the rendered policies, the
platform guard and Cozystack's tenant baseline, evaluated over a modelled Cozystack cluster in
which the sandbox takes the place of a pod with its identity labels. A sandbox in a namespace
of its own (placement SandboxNamespace) is judged there: by what its Objects carry and the
host's guard, with no tenant baseline, beside its tenant's other workloads.
"""

from dataclasses import dataclass, replace
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.compose.cilium_policy import CCNP, CNP
from function.compose.guard import guard_policy
from function.compose.names import (
    SANDBOX_KEY,
    SANDBOX_NAMESPACE_KEY,
    STATEFULSET_KEY,
    VM_KEY,
    WORKSPACE_LABEL,
)
from function.compose.observed import dig
from function.model.platform import SandboxPlatform
from function.offline import plain
from function.policy import (
    Environment,
    Flow,
    Workload,
    cozystack_baseline,
    cozystack_environment,
    evaluate,
    format_verdict,
)
from function.policy.verdict import Enforcement, IpProtocol
from function.wire import to_dict

POLICY_KINDS = (CNP, "NetworkPolicy")
# Where the sandbox's pod sits in the modelled cluster, and another sandbox beside it.
SANDBOX_IPS = ("10.244.0.99", "fd00:10:244::99")
NEIGHBOUR_IPS = ("10.244.1.98", "fd00:10:244:1::98")

# What an audit checks when no flow is named: one destination of each kind the design denies,
# a public one it allows, and the callers it must refuse.
AUDIT: tuple[tuple[str, int, IpProtocol], ...] = (
    ("151.101.0.223", 443, "TCP"),
    ("2a04:4e42::223", 443, "TCP"),
    ("9.9.9.9", 53, "UDP"),
    ("10.0.0.5", 443, "TCP"),
    ("100.64.0.2", 22, "TCP"),
    ("169.254.169.254", 80, "TCP"),
    ("fd00:ec2::254", 80, "TCP"),
    ("192.168.100.11", 10250, "TCP"),
    ("185.12.64.12", 22, "TCP"),
    ("10.96.0.1", 443, "TCP"),
    ("10.96.0.10", 53, "UDP"),
    ("{namespace}/neighbour", 3000, "TCP"),
    ("tenant-evil/mallory-shell", 80, "TCP"),
    ("cozy-system/platform-db", 5432, "TCP"),
    ("::ffff:a9fe:a9fe", 80, "TCP"),
    ("64:ff9b::a00:5", 443, "TCP"),
)
CALLERS = (
    "cozy-sandbox-gateway/sandbox-gateway",
    "cozy-sandbox-gateway/gateway-debug",
    "{namespace}/neighbour",
    "tenant-evil/mallory-shell",
    "198.51.100.7",
)


@dataclass(frozen=True)
class Audit:
    policies: list[dict[str, Any]]
    env: Environment
    sandbox: str
    """The sandbox as the evaluator names it: namespace/name."""
    notes: list[str]
    agent_port: int
    """The port callers try when no port is named: the platform's `gateway.agentPort`."""
    neighbours: str = ""
    """Where the tenant's other sandbox sits: the sandbox's namespace unless it has one of its
    own."""


def audit(
    rsp: fnv1.RunFunctionResponse,
    xr: dict[str, Any],
    platform: SandboxPlatform,
    *,
    baseline: bool,
) -> Audit:
    meta = xr.get("metadata") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    # A protobuf map's order changes from one process to the next; when two policies allow a
    # flow, the first one is named, so read them in composition-resource-name order.
    desired = {k: plain(to_dict(r.resource)) for k, r in sorted(rsp.desired.resources.items())}
    status = dig(plain(to_dict(rsp.desired.composite.resource)), "status") or {}
    plane, own = status.get("computePlane"), status.get("sandboxNamespace")
    tenant = namespace
    notes = []
    own_labels: dict[str, str] = {}
    if own is not None:
        # In a namespace of its own on the host: what the Objects carry, under the host's
        # guard, with no tenant baseline there.
        desired = {k: _carried(m) for k, m in desired.items() if m.get("kind") == "Object"}
        namespace, baseline = str(own), False
        own_labels = dict(dig(desired.get(SANDBOX_NAMESPACE_KEY), "metadata", "labels") or {})
        notes.append(f"in its own namespace {namespace!r}: no tenant baseline")
    elif plane is not None:
        # Inside a ComputePlane: what the Objects carry (the plane's guard among it), in the
        # sandbox's own namespace there, with neither the host's guard nor a tenant baseline.
        # What is composed on the host (the policy on the plane's workers) is not in the plane.
        desired = {k: _carried(m) for k, m in desired.items() if m.get("kind") == "Object"}
        namespace = plane_namespace_of(desired, namespace)
        baseline = False
        notes.append(f"inside ComputePlane {plane!r}, namespace {namespace!r}: no tenant baseline")
    policies = [
        {**m, "metadata": {**m["metadata"], "namespace": namespace}}
        for m in desired.values()
        if m.get("kind") in POLICY_KINDS
    ] + [m for m in desired.values() if m.get("kind") == CCNP]
    if plane is None:
        policies.append(guard_policy(platform))
    if own is not None and not any(m["kind"] in POLICY_KINDS for m in policies):
        raise LookupError(f"nothing is placed in namespace {own!r} yet; give --observed")
    if plane is not None and not any(m["kind"] in POLICY_KINDS for m in policies):
        why = f"nothing is placed in ComputePlane {plane!r} yet; give --observed and --required"
        raise LookupError(why)
    if baseline:
        try:
            policies += cozystack_baseline(namespace)
        except ValueError as err:
            notes.append(f"no Cozystack baseline: {err}")
    labels = _pod_labels(desired)
    env = cozystack_environment()
    # The sandbox replaces any pod the model has of its name, wherever it now sits.
    here = {(namespace, name), (tenant, name)}
    others = tuple(w for w in env.workloads if (w.namespace, w.name) not in here)
    sandbox = Workload(name, namespace, labels, SANDBOX_IPS, "node-1")
    neighbours = tenant if own is not None else namespace
    neighbour_labels = {WORKSPACE_LABEL: "neighbour", "kubevirt.io": "virt-launcher"}
    neighbour = Workload("neighbour", neighbours, neighbour_labels, NEIGHBOUR_IPS, "node-2")
    workloads = (*others, sandbox, neighbour)
    namespaces = {**env.namespace_labels, namespace: own_labels} if own_labels else None
    return Audit(
        policies,
        replace(env, workloads=workloads, namespace_labels=namespaces or env.namespace_labels),
        f"{namespace}/{name}",
        notes,
        platform.gateway.agent_port,
        neighbours,
    )


def _carried(manifest: dict[str, Any]) -> dict[str, Any]:
    """What a provider-kubernetes Object carries; anything else as it is."""
    if manifest.get("kind") != "Object":
        return manifest
    inner = dig(manifest, "spec", "forProvider", "manifest")
    return inner if isinstance(inner, dict) else manifest


def plane_namespace_of(desired: dict[str, Any], default: str) -> str:
    for m in desired.values():
        if m.get("kind") in POLICY_KINDS:
            return str(dig(m, "metadata", "namespace") or default)
    return default


def _pod_labels(desired: dict[str, Any]) -> dict[str, str]:
    """The sandbox pod's labels: a VM's virt-launcher pod, a Sandbox's or StatefulSet's pod."""
    if VM_KEY in desired:
        labels = dig(desired[VM_KEY], "spec", "template", "metadata", "labels") or {}
        return {**labels, "kubevirt.io": "virt-launcher"}
    if STATEFULSET_KEY in desired:
        return dict(dig(desired[STATEFULSET_KEY], "spec", "template", "metadata", "labels") or {})
    return dict(dig(desired.get(SANDBOX_KEY), "spec", "podTemplate", "metadata", "labels") or {})


def flows(
    found: Audit, to: str | None, source: str | None, port: int | None, protocol: IpProtocol
) -> list[Flow]:
    sandbox = found.sandbox
    if to is not None:
        return [Flow(sandbox, to, port, protocol)]
    if source is not None:
        return [Flow(source, sandbox, port, protocol)]
    namespace = found.neighbours or sandbox.partition("/")[0]
    out = [Flow(sandbox, d.format(namespace=namespace), p, proto) for d, p, proto in AUDIT]
    callers = [c.format(namespace=namespace) for c in CALLERS]
    return out + [Flow(c, sandbox, port or found.agent_port) for c in callers]


def explain(found: Audit, asked: list[Flow], enforcement: Enforcement) -> list[str]:
    lines = [f"# {note}" for note in found.notes]
    for flow in asked:
        verdict = evaluate(flow, found.policies, found.env, enforcement=enforcement)
        lines.append(format_verdict(flow, verdict))
    return lines
