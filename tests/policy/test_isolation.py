"""Isolation proven: rendered policies, with and without Cozystack's baseline, over flows.

Each table row is one flow and the verdict the invariants in docs/security.md demand. The same
tables run against deliberately broken policies to show that the evaluator would catch each
weakening.
Every table runs under both values of Cilium's `policy-default-local-cluster`: the verdicts
may not depend on it.
"""

import copy
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from function.compose.guard import guard_policy
from function.model.platform import SandboxPlatform
from function.policy import (
    Environment,
    Flow,
    cozystack_baseline,
    evaluate,
)
from function.render import render
from tests.policy.isolation import (
    ALICE,
    ALICE_POD,
    ENV,
    ENVS,
    NS,
    POD_TABLE,
    TABLE,
    Policies,
    into,
    out,
    rendered,
    world,
)
from tests.support import NOW, PLATFORM, platform, platform_input, workspace


def pod_labels(spec: dict[str, Any], p: SandboxPlatform = PLATFORM) -> dict[str, str]:
    """The labels the render gives alice's pod: a VM's virt-launcher pod, or a Sandbox's."""
    out = render(workspace(spec, "alice-api"), p, {}, NOW).resources
    if "vm" in out:
        labels = out["vm"]["spec"]["template"]["metadata"]["labels"]
        return {**labels, "kubevirt.io": "virt-launcher"}
    return dict(out["sandbox"]["spec"]["podTemplate"]["metadata"]["labels"])


def labelled(
    env: Environment,
    spec: dict[str, Any],
    alice: dict[str, Any] = ALICE,
    p: SandboxPlatform = PLATFORM,
) -> Environment:
    """`env` with alice's pod carrying the labels her rendered sandbox gives it."""
    labels = pod_labels(alice | spec, p)
    return replace(
        env,
        workloads=tuple(
            replace(w, labels=labels) if w.name == "alice-api" else w for w in env.workloads
        ),
    )


@pytest.fixture(params=list(ENVS), ids=list(ENVS))
def env(request: pytest.FixtureRequest) -> Environment:
    return ENVS[request.param]


def verdict(
    flow: Flow, policies: Sequence[dict[str, Any]], env: Environment, enforcement: str = "cilium"
) -> bool:
    return evaluate(flow, policies, env, enforcement=enforcement).allowed  # type: ignore[arg-type]


NONE = {"network": {"egress": "None"}}


def test_the_tables_are_big_enough() -> None:
    assert len(TABLE) >= 60
    assert len({p.id for p in TABLE}) == len(TABLE)


@pytest.mark.parametrize("baseline", [True, False], ids=["cozystack-baseline", "bare-cluster"])
@pytest.mark.parametrize(("flow", "allowed"), TABLE)
def test_internet_mode_truth_table(
    flow: Flow, allowed: bool, baseline: bool, env: Environment
) -> None:
    v = evaluate(flow, world(baseline=baseline), labelled(env, {}))
    assert v.allowed is allowed, v.reason


@pytest.mark.parametrize("baseline", [True, False], ids=["cozystack-baseline", "bare-cluster"])
@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({}, id="internet"),
        pytest.param({"network": {"egress": "None"}}, id="none"),
        pytest.param({"preset": "kata"}, id="kata"),
    ],
)
@pytest.mark.parametrize(
    "flow",
    [
        pytest.param(into("192.168.100.11"), id="kubelet-probe"),
        pytest.param(into("192.168.100.11", 10250), id="other-port"),
        pytest.param(into("2a01:4f8:0:1::11"), id="public-v6-address"),
        pytest.param(into("192.168.100.11", None, "ICMP", 8), id="ping"),
    ],
)
def test_the_local_host_may_still_probe_the_sandbox(
    flow: Flow, spec: dict[str, Any], baseline: bool, env: Environment
) -> None:
    # Kubelet probes come from the node's own address; Cilium always allows that path.
    alice = ALICE_POD if spec.get("preset") else ALICE
    v = evaluate(flow, world(spec, baseline=baseline, alice=alice), env)
    assert v.allowed, v.reason


def test_without_the_guard_and_policies_the_baseline_alone_leaks(env: Environment) -> None:
    # Why the denies exist: the tenant baseline alone lets the sandbox reach all of these.
    baseline = cozystack_baseline(NS)
    for flow in (
        out("169.254.169.254", 80),
        out("10.0.0.5"),
        out("10.244.1.22", 3000),
        into("198.51.100.7"),
        into("sandbox-gateway", 49983, "UDP"),
        into("sandbox-gateway", None, "ICMP", 8),
    ):
        assert verdict(flow, baseline, env), flow


def test_icmp_from_the_gateway_is_denied_by_the_guard(env: Environment) -> None:
    # Naming every ICMP type takes 512 fields: the guard carries them, each sandbox's own
    # policy does not. UDP and SCTP are denied by both.
    own = [p for p in world(baseline=True) if p["kind"] != "CiliumClusterwideNetworkPolicy"]
    guard_alone = [guard_policy(PLATFORM), *cozystack_baseline(NS)]
    ping = into("sandbox-gateway", None, "ICMP", 8)
    assert verdict(ping, own, env)
    assert not verdict(ping, guard_alone, env)
    for flow in (into("sandbox-gateway", 49983, "UDP"), into("sandbox-gateway", 3000, "SCTP")):
        assert not verdict(flow, own, env), flow
        assert not verdict(flow, guard_alone, env), flow


# A cluster without Cilium: only the NetworkPolicy counts, and ipBlock sees node addresses.
NODE_SITE = platform(
    network={
        **platform_input()["network"],
        "siteDenyCidrs": ["185.12.64.0/24", "2a01:4f8:0:1::/64"],
    }
)


@pytest.mark.parametrize(
    ("flow", "allowed"),
    [
        pytest.param(out("151.101.0.223"), True, id="public-v4"),
        pytest.param(out("2a04:4e42::223"), True, id="public-v6"),
        pytest.param(out("10.0.0.5"), False, id="private"),
        pytest.param(out("100.64.0.2"), False, id="join-network"),
        pytest.param(out("169.254.169.254", 80), False, id="metadata"),
        pytest.param(out("192.168.100.12", 10250), False, id="node-internal"),
        pytest.param(out("185.12.64.12", 10250), False, id="node-public-in-site-list"),
        pytest.param(out("2a01:4f8:0:1::12", 22), False, id="node-public-v6-in-site-list"),
        pytest.param(out("10.96.0.1"), False, id="apiserver-vip"),
        pytest.param(out("10.244.1.22", 3000), False, id="other-sandbox"),
        pytest.param(out("10.244.0.10", 53, "UDP"), False, id="kube-dns"),
        pytest.param(into("sandbox-gateway"), True, id="gateway"),
        pytest.param(into("gateway-debug"), False, id="gateway-namespace-without-label"),
        pytest.param(into("mallory-shell"), False, id="other-tenant"),
    ],
)
def test_plain_network_policy_truth_table(flow: Flow, allowed: bool) -> None:
    policies = rendered(ALICE, "alice-api", NODE_SITE)
    assert verdict(flow, policies, ENV, "kubernetes") is allowed


def test_node_public_addresses_need_the_site_list_without_cilium() -> None:
    # A NetworkPolicy has no notion of nodes: their public IPs are just public addresses.
    assert verdict(out("185.12.64.12", 10250), rendered(ALICE, "alice-api"), ENV, "kubernetes")


ALLOWLIST = {
    "network": {
        "egress": "Allowlist",
        "allow": [{"cidr": "151.101.0.0/16", "ports": [443]}, {"cidr": "2606:4700::/32"}],
    }
}


@pytest.mark.parametrize("baseline", [True, False], ids=["cozystack-baseline", "bare-cluster"])
@pytest.mark.parametrize(
    ("flow", "allowed"),
    [
        pytest.param(out("151.101.0.223", 443), True, id="listed-cidr-listed-port"),
        pytest.param(out("151.101.64.223", 443), True, id="listed-cidr-other-address"),
        pytest.param(out("151.101.0.223", 80), False, id="listed-cidr-other-port"),
        pytest.param(out("151.101.0.223", 53, "UDP"), False, id="listed-cidr-udp-dns"),
        pytest.param(out("2606:4700::6810:122", 8443), True, id="listed-v6-any-port"),
        pytest.param(out("2a04:4e42::223", 443), False, id="unlisted-v6"),
        pytest.param(out("140.82.121.4", 443), False, id="unlisted-public"),
        pytest.param(out("github.com", 443), False, id="unlisted-name"),
        pytest.param(out("9.9.9.9", 53, "UDP"), False, id="no-names-no-dns"),
        pytest.param(out("10.0.0.5", 443), False, id="private"),
        pytest.param(out("169.254.169.254", 80), False, id="metadata"),
        pytest.param(out("10.244.1.22", 3000), False, id="other-sandbox"),
        pytest.param(out("192.168.100.12", 22), False, id="node"),
        pytest.param(into("sandbox-gateway"), True, id="gateway-still-reaches-agent"),
        pytest.param(into("mallory-shell"), False, id="other-tenant-ingress"),
    ],
)
def test_allowlist_truth_table(flow: Flow, allowed: bool, baseline: bool, env: Environment) -> None:
    v = evaluate(flow, world(ALLOWLIST, baseline=baseline), labelled(env, ALLOWLIST))
    assert v.allowed is allowed, v.reason


OPEN = platform(network={**platform_input()["network"], "namespacesAllowInternet": False})
NAMES = {
    "network": {
        "egress": "Allowlist",
        "allow": [
            {"fqdn": "pypi.org"},
            {"fqdn": "*.pythonhosted.org", "ports": [443]},
            {"fqdn": "rebind.example.net"},
        ],
    }
}


def dns(name: str) -> Flow:
    return Flow("alice-api", "9.9.9.9", 53, "UDP", dns_name=name)


@pytest.mark.parametrize(
    ("flow", "allowed"),
    [
        pytest.param(
            Flow("alice-api", "pypi.org", 443, dns_resolver="9.9.9.9"), True, id="listed-name"
        ),
        pytest.param(
            Flow("alice-api", "files.pythonhosted.org", 443, dns_resolver="9.9.9.9"),
            True,
            id="wildcard-name",
        ),
        pytest.param(
            Flow("alice-api", "files.pythonhosted.org", 80, dns_resolver="9.9.9.9"),
            False,
            id="wildcard-name-other-port",
        ),
        pytest.param(
            Flow("alice-api", "upload.pypi.org", 443, dns_resolver="9.9.9.9"),
            False,
            id="subdomain-of-exact-name",
        ),
        pytest.param(
            Flow("alice-api", "github.com", 443, dns_resolver="9.9.9.9"), False, id="unlisted-name"
        ),
        pytest.param(
            Flow("alice-api", "rebind.example.net", 443, dns_resolver="9.9.9.9"),
            False,
            id="listed-name-resolving-private",
        ),
        pytest.param(dns("pypi.org"), True, id="dns-query-listed"),
        pytest.param(dns("github.com"), False, id="dns-query-unlisted-refused"),
        pytest.param(
            Flow("alice-api", "149.112.112.112", 53, "UDP", dns_name="pypi.org"),
            True,
            id="second-resolver",
        ),
        pytest.param(
            Flow("alice-api", "1.1.1.1", 53, "UDP", dns_name="pypi.org"), False, id="other-resolver"
        ),
        # toFQDNs opens the addresses a listed name resolves to (once looked up).
        pytest.param(out("151.101.0.223", 443), True, id="address-of-listed-name"),
        pytest.param(out("140.82.121.4", 443), False, id="address-of-unlisted-name"),
        pytest.param(out("10.244.0.10", 53, "UDP"), False, id="cluster-dns"),
    ],
)
def test_allowlist_by_name_where_namespaces_do_not_allow_the_internet(
    flow: Flow, allowed: bool, env: Environment
) -> None:
    v = evaluate(flow, world(NAMES, baseline=False, p=OPEN), labelled(env, NAMES, p=OPEN))
    assert v.allowed is allowed, v.reason


@pytest.mark.parametrize("baseline", [True, False], ids=["cozystack-baseline", "bare-cluster"])
@pytest.mark.parametrize(
    "flow",
    [
        pytest.param(out("151.101.0.223"), id="public"),
        pytest.param(out("2a04:4e42::223"), id="public-v6"),
        pytest.param(out("9.9.9.9", 53, "UDP"), id="resolver"),
        pytest.param(out("10.244.0.10", 53, "UDP"), id="cluster-dns"),
        pytest.param(out("10.0.0.5"), id="private"),
        pytest.param(out("10.244.1.22", 3000), id="other-sandbox"),
    ],
)
def test_none_mode_denies_all_egress(flow: Flow, baseline: bool, env: Environment) -> None:
    policies = world(NONE, baseline=baseline)
    assert not verdict(flow, policies, labelled(env, NONE))


def test_none_mode_keeps_the_gateway_path(env: Environment) -> None:
    policies = world(NONE, baseline=True)
    assert verdict(into("sandbox-gateway"), policies, labelled(env, NONE))
    assert verdict(into("192.168.100.11"), policies, labelled(env, NONE))


# While only the guard covers a sandbox (before its own policy exists, or while it is deleted),
# the guard denies what the sandbox's egress mode denies, as the pod's egress label tells it.
GUARD_ALONE = [guard_policy(PLATFORM), *cozystack_baseline(NS), *cozystack_baseline("tenant-evil")]
EGRESS_TABLE = [row for row in TABLE if row.values[0].source == "alice-api"]


@pytest.mark.parametrize("alice", [ALICE, ALICE_POD | {"preset": "kata"}], ids=["vm", "kata"])
def test_the_guard_alone_denies_a_none_sandbox_all_egress(
    alice: dict[str, Any], env: Environment
) -> None:
    here = labelled(env, NONE, alice)
    assert [str(r.id) for r in EGRESS_TABLE if verdict(r.values[0], GUARD_ALONE, here)] == []
    assert verdict(into("sandbox-gateway"), GUARD_ALONE, here)


@pytest.mark.parametrize(
    "spec", [pytest.param({}, id="internet"), pytest.param(ALLOWLIST, id="allowlist")]
)
def test_the_guard_alone_gives_internet_and_allowlist_sandboxes_internet_mode_egress(
    spec: dict[str, Any], env: Environment
) -> None:
    # The guard can't know an allow-list, and a deny of anything it may list would win over the
    # sandbox's own allows for good: an Allowlist sandbox covered by the guard alone has the
    # public internet (and nothing else) until its own policy applies.
    assert wrong_rows(GUARD_ALONE, labelled(env, spec), EGRESS_TABLE) == []


def test_a_pod_without_the_egress_label_gets_the_guards_internet_mode_denies(
    env: Environment,
) -> None:
    # A pod started before its template carried the label (a VM keeps its pod's labels until
    # its next start) is covered as an Internet sandbox by the guard, and by its own policy.
    assert wrong_rows(GUARD_ALONE, env, EGRESS_TABLE) == []
    assert not verdict(out("151.101.0.223"), world(NONE, baseline=True), env)


CLUSTER_DNS = platform(
    presets={"standard": {**platform_input()["presets"]["standard"], "clusterDns": True}}
)


@pytest.mark.parametrize(
    ("flow", "allowed"),
    [
        pytest.param(out("10.96.0.10", 53, "UDP"), True, id="kube-dns-vip-53"),
        pytest.param(out("10.244.0.10", 53, "TCP"), True, id="kube-dns-pod-53"),
        pytest.param(out("10.244.0.10", 9153), False, id="kube-dns-metrics"),
        pytest.param(out("10.244.1.22", 53, "UDP"), False, id="other-pod-on-53"),
        pytest.param(out("10.244.1.61", 5432), False, id="platform-db"),
        pytest.param(out("151.101.0.223"), True, id="public"),
        pytest.param(out("2a04:4e42::223"), True, id="public-v6"),
        pytest.param(out("10.0.0.5"), False, id="private"),
        pytest.param(into("192.168.100.11"), True, id="kubelet-probe"),
    ],
)
def test_a_cluster_dns_preset_opens_kube_dns_port_53_only(
    flow: Flow, allowed: bool, env: Environment
) -> None:
    v = evaluate(flow, world(baseline=True, p=CLUSTER_DNS), env)
    assert v.allowed is allowed, v.reason


# --- The evaluator catches each weakening ------------------------------------------------


def _cnp(policies: Policies, name: str = "alice-api") -> dict[str, Any]:
    return next(
        p for p in policies if p["kind"] == "CiliumNetworkPolicy" and p["metadata"]["name"] == name
    )


def _without_cidrs(policies: Policies, drop: Callable[[str], bool]) -> None:
    for p in policies:
        for rule in p.get("spec", {}).get("egressDeny", []):
            if "toCIDRSet" in rule:
                rule["toCIDRSet"] = [c for c in rule["toCIDRSet"] if not drop(c["cidr"])]


def no_ipv6_deny(policies: Policies) -> None:
    _without_cidrs(policies, lambda c: ":" in c)


def no_cgnat(policies: Policies) -> None:
    _without_cidrs(policies, lambda c: c == "100.64.0.0/10")


def allow_only(policies: Policies) -> None:
    for p in policies:
        p.get("spec", {}).pop("egressDeny", None)
        p.get("spec", {}).pop("ingressDeny", None)


def no_entity_denies(policies: Policies) -> None:
    for p in policies:
        spec = p.get("spec", {})
        spec["egressDeny"] = [r for r in spec.get("egressDeny", []) if "toEntities" not in r]


def no_endpoint_denies(policies: Policies) -> None:
    for p in policies:
        spec = p.get("spec", {})
        spec["egressDeny"] = [r for r in spec.get("egressDeny", []) if "toEndpoints" not in r]
        spec["ingressDeny"] = [r for r in spec.get("ingressDeny", []) if "fromEndpoints" not in r]


def extra_private_allow(policies: Policies) -> None:
    allow_only(policies)
    policies.append(
        {
            "apiVersion": "cilium.io/v2",
            "kind": "CiliumNetworkPolicy",
            "metadata": {"name": "tenant-extra", "namespace": NS},
            "spec": {"endpointSelector": {}, "egress": [{"toCIDR": ["10.0.0.0/8"]}]},
        }
    )


def gateway_namespace_only(policies: Policies) -> None:
    for p in policies:
        for rule in p.get("spec", {}).get("ingressDeny", []):
            if "fromEndpoints" in rule:
                rule["fromEndpoints"] = rule["fromEndpoints"][:1]


# Any allow a tenant (or a future platform release) may add to the namespace. Denies must hold
# against it; a deny that holds only because nothing happens to allow that flow is no deny.
ALL_PODS = [{"matchExpressions": [{"key": "io.kubernetes.pod.namespace", "operator": "Exists"}]}]
ALLOW_ALL = {
    "apiVersion": "cilium.io/v2",
    "kind": "CiliumNetworkPolicy",
    "metadata": {"name": "tenant-allow-all", "namespace": NS},
    "spec": {
        "endpointSelector": {},
        "egress": [{"toEntities": ["all"]}, {"toEndpoints": ALL_PODS}, {"toCIDR": ["10.0.0.0/8"]}],
        "ingress": [{"fromEntities": ["all"]}, {"fromEndpoints": ALL_PODS}],
    },
}


def wrong_rows(policies: Policies, env: Environment, table: list[Any] = TABLE) -> list[str]:
    return [
        str(p.id) for p in table if evaluate(p.values[0], policies, env).allowed is not p.values[1]
    ]


@pytest.mark.parametrize(
    "weaken",
    [
        no_ipv6_deny,
        no_cgnat,
        allow_only,
        no_entity_denies,
        no_endpoint_denies,
        extra_private_allow,
        gateway_namespace_only,
    ],
)
def test_every_weakening_fails_the_truth_table(
    weaken: Callable[[Policies], None], env: Environment
) -> None:
    policies = [*copy.deepcopy(world(baseline=True)), ALLOW_ALL]
    weaken(policies)
    assert wrong_rows(policies, env), f"{weaken.__name__} went unnoticed"


def test_the_denies_hold_against_a_tenant_allow_of_everything(env: Environment) -> None:
    assert wrong_rows([*world(baseline=True), ALLOW_ALL], env) == []


@pytest.mark.parametrize("preset", ["kata", "gvisor"])
@pytest.mark.parametrize("baseline", [True, False], ids=["cozystack-baseline", "bare-cluster"])
def test_kata_and_gvisor_sandboxes_pass_the_same_truth_table(
    preset: str, baseline: bool, env: Environment
) -> None:
    policies = world({"preset": preset}, baseline=baseline, alice=ALICE_POD)
    here = labelled(env, {"preset": preset}, ALICE_POD)
    assert wrong_rows(policies, here, POD_TABLE) == []
