"""The plane as a policy model: the Cozystack model with both sandboxes moved into their
in-plane namespaces, with the pod and namespace labels the render gives them.
"""

from dataclasses import replace
from functools import cache
from typing import Any

from function.policy import (
    Environment,
    Flow,
    cozystack_environment,
)
from tests.plane.provider import Placement, inner, pod_template, settled_in_plane


@cache
def _sandbox_shape(
    p: Placement, name: str
) -> tuple[str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    out, _ = settled_in_plane(p, {}, name=name)
    namespace = inner(out, "plane-namespace")["metadata"]
    template = pod_template(inner(out, p.workload))
    return (
        namespace["name"],
        tuple(sorted(namespace["labels"].items())),
        tuple(sorted(template["metadata"]["labels"].items())),
    )


@cache
def plane_environment(p: Placement, local: bool = True) -> Environment:  # noqa: FBT002  # a cache key
    """The plane model; `local` is Cilium's policy-default-local-cluster."""
    env = replace(cozystack_environment(), policy_default_local_cluster=local)
    shapes = {n: _sandbox_shape(p, n) for n in ("alice-api", "bob-frontend")}
    workloads = tuple(
        replace(w, namespace=shapes[w.name][0], labels=dict(shapes[w.name][2]))
        if w.name in shapes
        else w
        for w in env.workloads
    )
    services = tuple(
        replace(s, namespace=shapes[s.name][0]) if s.name in shapes else s for s in env.services
    )
    namespaces = {ns: dict(labels) for ns, labels, _ in shapes.values()}
    return replace(
        env,
        workloads=workloads,
        services=services,
        namespace_labels={**env.namespace_labels, **namespaces},
    )


def from_alice(dest: str, port: int | None = 443, protocol: str = "TCP", **kw: Any) -> Flow:
    return Flow("alice-api", dest, port, protocol, **kw)  # type: ignore[arg-type]


def into_alice(source: str, port: int = 49983) -> Flow:
    return Flow(source, "alice-api", port)
