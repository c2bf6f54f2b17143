"""The plane's guard, the workers' policy, and the order of deletion.

Inside a plane only the sandbox's own policies and the plane guard stand; the plane's workers
are VMs in the tenant's namespace on the host. The evaluator's deletion model lists every
moment a deletion can pass through (function/policy/deletion.py); at each one in which the
sandbox's pod may still run, the pod must stay isolated inside the plane, and its workers
(where an escape from the runtime lands) on the host.
"""

from collections.abc import Mapping
from dataclasses import replace
from functools import cache

import pytest

from function.compose.guard import guard_policy
from function.model import Manifest
from function.model.platform import SandboxPlatform
from function.policy import (
    Environment,
    Flow,
    cozystack_baseline,
    cozystack_environment,
    deletion,
    evaluate,
    outlives,
)
from function.policy.environment import PLANE_CLUSTER
from tests.cluster import applied
from tests.plane.environment import from_alice, into_alice, plane_environment
from tests.plane.provider import (
    BOTH,
    DEDICATED,
    IN_PLANE,
    PLACEMENTS,
    SHARED,
    Placement,
    inner,
    plane_world,
    pod_spec,
    provisioned,
    run,
    settled_in_plane,
)
from tests.policy.isolation import ALICE_POD
from tests.support import (
    NAMESPACE,
    PLATFORM,
    platform,
    platform_input,
)

HOST = cozystack_environment()
SITE = platform(
    network={
        **platform_input()["network"],
        "siteAddresses": {
            "controlPlaneCidrs": ["185.12.64.100/32"],
            "nodeCidrs": ["185.12.64.16/28"],
            "loadBalancerCidrs": ["185.12.65.0/28"],
            "nat64Prefixes": ["2a01:4f8:c0c:6400::/96"],
        },
    }
)


def _cluster(p: Placement) -> str:
    return f"{p.plane}-cluster"


@cache
def _settled(p: Placement) -> dict[str, Manifest]:
    out, _ = settled_in_plane(p, ALICE_POD)
    return out.resources


def test_the_guard_is_placed_first_cluster_wide_and_never_deleted() -> None:
    for p in (SHARED, DEDICATED):
        first = run(p, {}, *plane_world(p)).resources
        guard = first["plane-guard"]
        assert guard["spec"]["managementPolicies"] == ["Observe", "Create", "Update"]
        carried = guard["spec"]["forProvider"]["manifest"]
        assert "namespace" not in carried["metadata"]
        assert carried == guard_policy(PLATFORM)
        assert "plane-workers" in first
        assert p.workload not in first


@pytest.mark.parametrize("p", PLACEMENTS)
def test_the_workload_waits_for_the_workers_policy(p: Placement) -> None:
    world, required = plane_world(p)
    observed = applied(run(p, {}, world, required))
    del observed["plane-workers"]
    for _ in range(4):
        out = run(p, {}, {**observed, **world}, required)
        observed = {k: v for k, v in applied(out).items() if k != "plane-workers"}
    assert p.workload not in out.resources
    assert provisioned(out)[2].endswith("waiting for plane-workers")


@pytest.mark.parametrize("p", PLACEMENTS)
def test_the_workload_stops_within_a_short_grace(p: Placement) -> None:
    assert pod_spec(inner(settled_in_plane(p)[0], p.workload))["terminationGracePeriodSeconds"] == 5


@pytest.mark.parametrize("p", PLACEMENTS)
def test_no_deletion_leaves_the_workload_without_its_policies_or_the_workers_without_theirs(
    p: Placement,
) -> None:
    resources = _settled(p)
    if p.dedicated:
        # Its Objects delete nothing in the plane; its workers keep their policy as long as it.
        assert not outlives(resources, "compute-plane", "plane-workers")
        return
    for used in ("cilium-policy", "network-policy", "plane-namespace"):
        assert not outlives(resources, p.workload, used), used
    # The namespace's Object is gone only once the namespace is, with every pod in it.
    assert not outlives(resources, "plane-namespace", "plane-workers")


def test_without_usages_the_workload_can_outlive_its_policies() -> None:
    resources = {k: m for k, m in _settled(SHARED).items() if not k.startswith("usage-")}
    assert outlives(resources, "statefulset", "cilium-policy")
    assert outlives(resources, "plane-namespace", "plane-workers")


@cache
def workers_environment(p: Placement) -> Environment:
    """The host, its two plane workers labelled with `p`'s cluster."""
    label = "cluster.x-k8s.io/cluster-name"
    workloads = tuple(
        replace(w, labels={**w.labels, label: _cluster(p)}) if label in w.labels else w
        for w in HOST.workloads
    )
    return replace(HOST, workloads=workloads)


def _host_policies(resources: Mapping[str, Manifest]) -> list[Manifest]:
    return [
        {**m, "metadata": {**m["metadata"], "namespace": NAMESPACE}}
        for m in resources.values()
        if m["kind"] in ("CiliumNetworkPolicy", "NetworkPolicy")
    ]


def _from_worker(dest: str, port: int | None = 443, protocol: str = "TCP") -> Flow:
    return Flow(f"tenant-acme/{PLANE_CLUSTER}-md0-x7k2p", dest, port, protocol)  # type: ignore[arg-type]


WORKER_TABLE = [
    pytest.param(_from_worker("151.101.0.223"), True, id="public"),
    pytest.param(_from_worker("2a04:4e42::223"), True, id="public-v6"),
    pytest.param(_from_worker("pypi.org"), True, id="public-name"),
    pytest.param(_from_worker("10.96.0.10", 53, "UDP"), True, id="kube-dns-vip"),
    pytest.param(_from_worker("10.244.1.10", 53, "TCP"), True, id="kube-dns-pod"),
    pytest.param(
        _from_worker(f"{PLANE_CLUSTER}.acme.cozy.example.net"), True, id="control-plane-endpoint"
    ),
    pytest.param(_from_worker("10.244.2.41"), True, id="tenant-root-ingress-pod"),
    pytest.param(_from_worker("10.244.0.73", 6443), True, id="own-control-plane-pod"),
    pytest.param(_from_worker("10.244.2.72", 4240), True, id="other-worker"),
    pytest.param(_from_worker("10.244.0.10", 9153), False, id="kube-dns-metrics"),
    pytest.param(_from_worker("169.254.169.254", 80), False, id="metadata"),
    pytest.param(_from_worker("fd00:ec2::254", 80), False, id="metadata-v6"),
    pytest.param(_from_worker("::ffff:a9fe:a9fe", 80), False, id="metadata-ipv4-mapped"),
    pytest.param(_from_worker("64:ff9b::a9fe:a9fe", 80), False, id="metadata-nat64"),
    pytest.param(_from_worker("10.0.0.5"), False, id="private"),
    pytest.param(_from_worker("100.64.0.2", 22), False, id="node-join-network"),
    pytest.param(_from_worker("192.168.100.12", 10250), False, id="node-internal"),
    pytest.param(_from_worker("185.12.64.12", 22), False, id="node-public"),
    pytest.param(_from_worker("10.96.0.1"), False, id="apiserver-vip"),
    pytest.param(_from_worker("192.168.100.13", 6443), False, id="apiserver-endpoint"),
    pytest.param(_from_worker("10.244.1.61", 5432), False, id="platform-database"),
    pytest.param(_from_worker("10.244.2.62", 8080), False, id="keycloak"),
    pytest.param(_from_worker("10.244.0.63", 80), False, id="dashboard"),
    pytest.param(_from_worker("10.244.2.65"), False, id="cdi-upload-proxy"),
    pytest.param(_from_worker("10.244.2.51", 49983), False, id="gateway"),
    pytest.param(_from_worker("10.244.1.31", 80), False, id="other-tenant"),
    pytest.param(_from_worker("10.244.0.32", 49983), False, id="other-tenant-sandbox"),
]


@pytest.mark.parametrize("p", BOTH)
@pytest.mark.parametrize(("flow", "allowed"), WORKER_TABLE)
def test_the_workers_reach_their_control_plane_and_the_internet_and_nothing_of_the_host(
    p: Placement, flow: Flow, allowed: bool
) -> None:
    policies = [
        *_host_policies(_settled(p)),
        guard_policy(PLATFORM),
        *cozystack_baseline(NAMESPACE),
    ]
    v = evaluate(flow, policies, workers_environment(p))
    assert v.allowed is allowed, v.reason


def test_without_the_workers_policy_the_baseline_lets_a_worker_reach_the_platform() -> None:
    # Why the workers have a policy: an escape onto one lands here.
    baseline = cozystack_baseline(NAMESPACE)
    for flow in (
        _from_worker("169.254.169.254", 80),
        _from_worker("10.0.0.5"),
        _from_worker("10.244.2.62", 8080),
        _from_worker("10.244.0.63", 80),
    ):
        assert evaluate(flow, baseline, HOST).allowed, flow


# (flow, allowed while the site's addresses are unstated, allowed once stated)
WORKER_SITE_TABLE = [
    pytest.param(_from_worker("185.12.64.100", 6443), True, False, id="control-plane-vip"),
    pytest.param(_from_worker("185.12.64.21", 22), True, False, id="unlisted-node-address"),
    pytest.param(
        _from_worker("2a01:4f8:c0c:6400::a9fe:a9fe", 80), True, False, id="nat64-metadata"
    ),
    # Their control plane is behind the cluster's ingress: the load balancers stay open.
    pytest.param(_from_worker("185.12.65.10"), True, True, id="load-balancer"),
]


@pytest.mark.parametrize(("flow", "unstated", "stated"), WORKER_SITE_TABLE)
def test_the_workers_are_kept_from_the_sites_addresses_once_stated(
    flow: Flow, unstated: bool, stated: bool
) -> None:
    def allowed(p: SandboxPlatform) -> bool:
        out, _ = settled_in_plane(replace(SHARED, platform=p))
        policies = [*_host_policies(out.resources), *cozystack_baseline(NAMESPACE)]
        return evaluate(flow, policies, workers_environment(SHARED)).allowed

    assert (allowed(PLATFORM), allowed(SITE)) == (unstated, stated)


def test_a_load_balancer_inside_a_denied_range_is_carved_out_for_the_workers() -> None:
    private = platform(
        network={
            **platform_input()["network"],
            "siteAddresses": {"loadBalancerCidrs": ["192.168.100.240/28"]},
        }
    )
    out, _ = settled_in_plane(replace(SHARED, platform=private))
    (cidrs,) = [r["toCIDRSet"] for r in out.resources["plane-workers"]["spec"]["egressDeny"][3:]]
    assert {"cidr": "192.168.0.0/16", "except": ["192.168.100.240/28"]} in cidrs
    sandbox = {
        c["cidr"]
        for r in inner(out, "cilium-policy")["spec"]["egressDeny"]
        for c in r.get("toCIDRSet", [])
    }
    assert "192.168.100.240/28" in sandbox


# Rows a sandbox's pod must be denied at every moment it may still run.
STILL_DENIED = [
    pytest.param(from_alice("169.254.169.254", 80), id="metadata"),
    pytest.param(from_alice("10.0.0.5"), id="private"),
    pytest.param(from_alice("192.168.100.12", 22), id="node"),
    pytest.param(from_alice("10.96.0.1"), id="apiserver-vip"),
    pytest.param(from_alice("10.244.1.22", 3000), id="other-sandbox"),
    pytest.param(from_alice("10.244.0.10", 53, "UDP"), id="kube-dns"),
    pytest.param(from_alice("10.244.1.61", 5432), id="platform-database"),
    pytest.param(into_alice("mallory-shell"), id="other-tenant-ingress"),
    pytest.param(into_alice("151.101.0.223"), id="internet-ingress"),
]
WORKER_DENIED = [r for r in WORKER_TABLE if r.values[1] is False]


@pytest.mark.parametrize("p", PLACEMENTS)
def test_every_moment_of_a_deletion_keeps_the_pod_and_its_workers_isolated(p: Placement) -> None:
    moments = [m for m in deletion(_settled(p)) if m.pod]
    assert moments
    inside_env, host_env = plane_environment(p), workers_environment(p)
    for moment in moments:
        for row in STILL_DENIED:
            (flow,) = row.values
            v = evaluate(flow, moment.inside, inside_env, namespace=IN_PLANE)
            assert not v.allowed, (row.id, moment.holding(), v.reason)
        host = [*_host_policies({m["metadata"]["name"]: m for m in moment.host})]
        for row in WORKER_DENIED:
            flow = row.values[0]
            v = evaluate(flow, [*host, *cozystack_baseline(NAMESPACE)], host_env)
            assert not v.allowed, (row.id, moment.holding(), v.reason)


def test_a_lingering_pod_is_held_by_the_guard_alone() -> None:
    """After its Objects went, a pod that is still terminating has only the guard around it."""
    alone = [m for m in deletion(_settled(SHARED)) if m.pod and len(m.inside) == 1]
    assert [m.inside[0]["kind"] for m in alone] == ["CiliumClusterwideNetworkPolicy"]
    without_guard = {k: m for k, m in _settled(SHARED).items() if k != "plane-guard"}
    exposed = [m for m in deletion(without_guard) if m.pod and not m.inside]
    assert exposed
    verdict = evaluate(
        from_alice("169.254.169.254", 80), exposed[0].inside, plane_environment(SHARED)
    )
    assert verdict.allowed
