"""The host cluster as a policy model, with sandboxes in namespaces of their own.

The Cozystack model keeps every workload (other tenants' pods, platform services, the
gateway), and the two sandboxes move into the namespaces the render gives them, with the pod
and namespace labels it gives them. No tenant baseline selects anything there; the host's
guard (deploy/cilium-guard.yaml) still does, and so do the other tenants' baselines, which
stay in the model as they stay in the cluster.
"""

from dataclasses import replace
from functools import cache
from typing import Any

from function.compose.names import EGRESS_LABEL
from function.model import Manifest
from function.policy import Environment, cozystack_baseline, cozystack_environment
from tests.sandbox_namespace.world import ISOLATED_KATA, carried, settled_in_namespace
from tests.support import ROOT, load_stream

GUARD: Manifest = load_stream(ROOT / "deploy" / "cilium-guard.yaml")[0]
POLICY_KINDS = ("CiliumNetworkPolicy", "NetworkPolicy")


def pod_labels(preset: str, spec: dict[str, Any], name: str) -> dict[str, str]:
    """The labels of the sandbox's pod: a Sandbox's, or a VM's virt-launcher pod."""
    out, _ = settled_in_namespace(preset, spec, name=name)
    if preset == ISOLATED_KATA:
        return dict(carried(out, "sandbox")["spec"]["podTemplate"]["metadata"]["labels"])
    labels = carried(out, "vm")["spec"]["template"]["metadata"]["labels"]
    return {**labels, "kubevirt.io": "virt-launcher"}


def policies(preset: str, spec: dict[str, Any], name: str) -> list[Manifest]:
    """What the settled sandbox carries into its namespace that Cilium or Kubernetes enforce."""
    out, _ = settled_in_namespace(preset, spec, name=name)
    return [
        carried(out, k)
        for k, m in out.resources.items()
        if m["kind"] == "Object" and carried(out, k)["kind"] in POLICY_KINDS
    ]


def world(preset: str, alice: dict[str, Any], *, guard: bool = True) -> list[Manifest]:
    """Alice's and Bob's policies, the tenants' baselines, and the host guard."""
    found = policies(preset, alice, "alice-api") + policies(preset, {}, "bob-frontend")
    found += cozystack_baseline("tenant-acme") + cozystack_baseline("tenant-evil")
    return [*found, GUARD] if guard else found


@cache
def host_environment(
    preset: str,
    local: bool = True,  # noqa: FBT002  # a cache key
    egress: str = "Internet",
) -> Environment:
    """The host model; `local` is Cilium's policy-default-local-cluster, `egress` Alice's mode."""
    env = replace(cozystack_environment(), policy_default_local_cluster=local)
    moved: dict[str, tuple[str, dict[str, str], dict[str, str]]] = {}
    for name in ("alice-api", "bob-frontend"):
        out, _ = settled_in_namespace(preset, name=name)
        namespace = carried(out, "sandbox-namespace")["metadata"]
        labels = pod_labels(preset, {}, name)
        if name == "alice-api":
            labels[EGRESS_LABEL] = egress
        moved[name] = (namespace["name"], namespace["labels"], labels)
    workloads = tuple(
        replace(w, namespace=moved[w.name][0], labels=moved[w.name][2]) if w.name in moved else w
        for w in env.workloads
    )
    services = tuple(
        replace(s, namespace=moved[s.name][0]) if s.name in moved else s for s in env.services
    )
    namespaces = {ns: dict(labels) for ns, labels, _ in moved.values()}
    return replace(
        env,
        workloads=workloads,
        services=services,
        namespace_labels={**env.namespace_labels, **namespaces},
    )
