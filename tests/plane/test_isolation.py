"""Isolation inside the plane.

The plane is a cluster of its own: no Cozystack tenant baseline and no platform guard, only
the sandbox's own policies. The modelled cluster keeps every workload of the Cozystack model
(other tenants' pods, platform services, the gateway with its namespace and labels) and moves
the two sandboxes into their in-plane namespaces, with the pod and namespace labels the render
gives them. So every row of the Namespace placement's truth table is asked again here.
"""

from collections.abc import Mapping
from functools import cache
from typing import Any

import pytest

from function.compose.names import (
    EGRESS_LABEL,
    WORKSPACE_LABEL,
    plane_namespace,
)
from function.errors import FieldError
from function.model import Manifest
from function.policy import (
    Flow,
    evaluate,
)
from function.render import render
from tests.plane.environment import from_alice, into_alice, plane_environment
from tests.plane.provider import (
    BOTH,
    IDENTITY,
    IN_PLANE,
    SHARED,
    Placement,
    inner,
    settled_in_plane,
)
from tests.policy.isolation import ALICE_POD, POD_TABLE
from tests.support import (
    NOW,
    PLATFORM,
    platform_input,
    workspace,
)


def _plane_policies(p: Placement, spec: Mapping[str, Any], name: str) -> list[Manifest]:
    out, _ = settled_in_plane(p, spec, name=name)
    return [
        inner(out, k)
        for k, m in out.resources.items()
        if m["kind"] == "Object"
        and inner(out, k)["kind"] in ("CiliumNetworkPolicy", "NetworkPolicy")
    ]


def plane_world_policies(p: Placement, spec: Mapping[str, Any]) -> list[Manifest]:
    return _plane_policies(p, {**ALICE_POD, **spec}, "alice-api") + _plane_policies(
        p, {}, "bob-frontend"
    )


@cache
def _internet_policies(p: Placement) -> tuple[Manifest, ...]:
    return tuple(plane_world_policies(p, {}))


def test_the_plane_model_places_both_sandboxes_in_their_own_namespaces() -> None:
    env = plane_environment(SHARED)
    bob = plane_namespace(workspace(name="bob-frontend"))
    assert env.workload("alice-api").namespace == IN_PLANE
    assert env.workload("bob-frontend").namespace == bob
    assert env.workload("alice-api").labels == {
        WORKSPACE_LABEL: IDENTITY,
        EGRESS_LABEL: "Internet",
    }
    assert env.namespace_labels_of(IN_PLANE)["pod-security.kubernetes.io/enforce"] == "restricted"
    policies = _internet_policies(SHARED)
    assert sorted((m["kind"], m["metadata"]["namespace"]) for m in policies) == [
        ("CiliumNetworkPolicy", IN_PLANE),
        ("CiliumNetworkPolicy", bob),
        ("NetworkPolicy", IN_PLANE),
        ("NetworkPolicy", bob),
    ]


# Cilium's policy-default-local-cluster, on and off: the verdicts may not depend on it.
LOCAL_CLUSTER = pytest.mark.parametrize(
    "local", [True, False], ids=["local-cluster-default", "no-local-cluster-default"]
)


@LOCAL_CLUSTER
@pytest.mark.parametrize("p", BOTH)
@pytest.mark.parametrize(("flow", "allowed"), POD_TABLE)
def test_the_isolation_truth_table_holds_inside_a_plane(
    p: Placement, flow: Flow, allowed: bool, local: bool
) -> None:
    v = evaluate(flow, _internet_policies(p), plane_environment(p, local))
    assert v.allowed is allowed, v.reason


@LOCAL_CLUSTER
@pytest.mark.parametrize("p", BOTH)
def test_the_local_host_may_still_probe_a_sandbox_inside_a_plane(p: Placement, local: bool) -> None:
    # Kubelet probes come from the node's own address, whatever Cilium's local-cluster default.
    for policies in (_internet_policies(p), _allowlist_policies(p)):
        v = evaluate(
            Flow("192.168.100.11", "alice-api", 49983), policies, plane_environment(p, local)
        )
        assert v.allowed, v.reason


@pytest.mark.parametrize("p", BOTH)
@pytest.mark.parametrize(
    ("flow", "allowed"),
    [
        pytest.param(from_alice("151.101.0.223"), True, id="public-v4"),
        pytest.param(from_alice("2a04:4e42::223"), True, id="public-v6"),
        pytest.param(from_alice("10.0.0.5"), False, id="private"),
        pytest.param(from_alice("169.254.169.254", 80), False, id="metadata"),
        pytest.param(from_alice("10.244.1.22", 3000), False, id="other-sandbox"),
        pytest.param(from_alice("10.244.0.10", 53, "UDP"), False, id="kube-dns"),
        pytest.param(into_alice("sandbox-gateway"), True, id="gateway"),
        pytest.param(into_alice("sandbox-gateway", 3000), True, id="gateway-declared-port"),
        pytest.param(into_alice("sandbox-gateway", 8080), False, id="gateway-undeclared-port"),
        pytest.param(into_alice("gateway-debug"), False, id="gateway-namespace-without-label"),
        pytest.param(into_alice("bob-frontend"), False, id="other-sandbox-ingress"),
        pytest.param(into_alice("mallory-shell"), False, id="other-tenant"),
    ],
)
def test_the_network_policy_alone_isolates_too(p: Placement, flow: Flow, allowed: bool) -> None:
    v = evaluate(flow, _internet_policies(p), plane_environment(p), enforcement="kubernetes")
    assert v.allowed is allowed, v.reason


NAMED = {
    "network": {
        "egress": "Allowlist",
        "allow": [
            {"fqdn": "pypi.org"},
            {"fqdn": "*.pythonhosted.org", "ports": [443]},
            {"fqdn": "rebind.example.net"},
            {"cidr": "140.82.121.0/24", "ports": [22]},
        ],
    }
}


@cache
def _allowlist_policies(p: Placement) -> tuple[Manifest, ...]:
    return tuple(plane_world_policies(p, NAMED))


@LOCAL_CLUSTER
@pytest.mark.parametrize("p", BOTH)
@pytest.mark.parametrize(
    ("flow", "allowed"),
    [
        pytest.param(from_alice("pypi.org", dns_resolver="9.9.9.9"), True, id="listed-name"),
        pytest.param(
            from_alice("files.pythonhosted.org", dns_resolver="9.9.9.9"), True, id="wildcard-name"
        ),
        pytest.param(
            from_alice("files.pythonhosted.org", 80, dns_resolver="9.9.9.9"),
            False,
            id="wildcard-name-other-port",
        ),
        pytest.param(
            from_alice("upload.pypi.org", dns_resolver="9.9.9.9"),
            False,
            id="subdomain-of-exact-name",
        ),
        pytest.param(from_alice("github.com", dns_resolver="9.9.9.9"), False, id="unlisted-name"),
        pytest.param(
            from_alice("registry.npmjs.org", dns_resolver="9.9.9.9"), False, id="unlisted-name-2"
        ),
        pytest.param(
            from_alice("rebind.example.net", dns_resolver="9.9.9.9"),
            False,
            id="listed-name-resolving-private",
        ),
        pytest.param(from_alice("151.101.0.223"), True, id="address-of-listed-name"),
        pytest.param(from_alice("140.82.121.4", 22), True, id="listed-cidr-listed-port"),
        pytest.param(from_alice("140.82.121.4", 443), False, id="listed-cidr-other-port"),
        pytest.param(from_alice("1.1.1.1"), False, id="unlisted-public"),
        pytest.param(from_alice("2a04:4e42::223"), True, id="v6-address-of-listed-name"),
        pytest.param(from_alice("2001:4860:4860::8888"), False, id="unlisted-v6"),
        pytest.param(from_alice("9.9.9.9", 53, "UDP", dns_name="pypi.org"), True, id="dns-listed"),
        pytest.param(
            from_alice("9.9.9.9", 53, "UDP", dns_name="github.com"),
            False,
            id="dns-unlisted-refused",
        ),
        pytest.param(
            from_alice("1.1.1.1", 53, "UDP", dns_name="pypi.org"), False, id="dns-other-resolver"
        ),
        pytest.param(from_alice("10.0.0.5"), False, id="private"),
        pytest.param(from_alice("169.254.169.254", 80), False, id="metadata"),
        pytest.param(from_alice("10.244.1.22", 3000), False, id="other-sandbox"),
        pytest.param(from_alice("10.244.0.10", 53, "UDP"), False, id="cluster-dns"),
        pytest.param(from_alice("192.168.100.12", 22), False, id="node"),
        pytest.param(into_alice("sandbox-gateway"), True, id="gateway-still-reaches-agent"),
        pytest.param(into_alice("mallory-shell"), False, id="other-tenant-ingress"),
    ],
)
def test_an_allowlist_with_names_is_enforced_inside_a_plane(
    p: Placement, flow: Flow, allowed: bool, local: bool
) -> None:
    v = evaluate(flow, _allowlist_policies(p), plane_environment(p, local))
    assert v.allowed is allowed, v.reason


def test_names_are_refused_where_the_namespace_allows_the_internet_but_not_in_a_plane() -> None:
    with pytest.raises(FieldError) as err:
        render(workspace({"preset": "gvisor", **NAMED}), PLATFORM, {}, NOW)
    assert str(err.value) == (
        "spec.network.allow[0].fqdn: names can't be enforced on this platform: its namespaces "
        "already allow all internet egress, and Cilium can only take that away by address; use a "
        "preset that gives each sandbox a namespace of its own (dedicated-plane, isolated, "
        "isolated-kata, shared-plane), or list the destination's addresses as cidr entries"
    )
    out, _ = settled_in_plane(SHARED, NAMED)
    cilium = inner(out, "cilium-policy")["spec"]
    assert {"toFQDNs": [{"matchName": "pypi.org"}]} in cilium["egress"]
    # Allows only: nothing in the plane allows the internet, so no deny has to take it away.
    denied = {c["cidr"] for r in cilium["egressDeny"] for c in r.get("toCIDRSet", [])}
    assert {"0.0.0.0/0", "::/0"}.isdisjoint(denied)


BUNDLED = {"network": {"egress": "Allowlist", "allow": [{"bundle": "package-registries"}]}}


def test_a_bundle_renders_inside_a_plane_as_its_entries_listed_by_hand() -> None:
    entries = platform_input()["network"]["egressBundles"]["package-registries"]
    by_hand = {"network": {"egress": "Allowlist", "allow": entries}}
    bundled, _ = settled_in_plane(SHARED, BUNDLED)
    listed, _ = settled_in_plane(SHARED, by_hand)
    assert bundled.resources == listed.resources
    pypi = {
        "toFQDNs": [{"matchName": "pypi.org"}],
        "toPorts": [{"ports": [{"port": "443", "protocol": "ANY"}]}],
    }
    assert pypi in inner(bundled, "cilium-policy")["spec"]["egress"]


@cache
def _bundled_policies(p: Placement) -> tuple[Manifest, ...]:
    return tuple(plane_world_policies(p, BUNDLED))


@LOCAL_CLUSTER
@pytest.mark.parametrize("p", BOTH)
@pytest.mark.parametrize(
    ("flow", "allowed"),
    [
        pytest.param(from_alice("pypi.org", dns_resolver="9.9.9.9"), True, id="pypi"),
        pytest.param(
            from_alice("files.pythonhosted.org", dns_resolver="9.9.9.9"), True, id="pypi-files"
        ),
        pytest.param(from_alice("registry.npmjs.org", dns_resolver="9.9.9.9"), True, id="npm"),
        pytest.param(from_alice("github.com", dns_resolver="9.9.9.9"), True, id="github"),
        pytest.param(
            from_alice("github.com", 22, dns_resolver="9.9.9.9"), False, id="github-ssh-unlisted"
        ),
        pytest.param(
            from_alice("pypi.org", 80, dns_resolver="9.9.9.9"), False, id="port-the-entry-lacks"
        ),
        pytest.param(
            from_alice("upload.pypi.org", dns_resolver="9.9.9.9"), False, id="unlisted-name"
        ),
        pytest.param(
            from_alice("9.9.9.9", 53, "UDP", dns_name="registry.npmjs.org"), True, id="dns-listed"
        ),
        pytest.param(
            from_alice("9.9.9.9", 53, "UDP", dns_name="upload.pypi.org"),
            False,
            id="dns-unlisted-refused",
        ),
        pytest.param(from_alice("1.1.1.1"), False, id="unlisted-public"),
        pytest.param(from_alice("10.0.0.5"), False, id="private"),
    ],
)
def test_a_bundle_is_enforced_inside_a_plane(
    p: Placement, flow: Flow, allowed: bool, local: bool
) -> None:
    v = evaluate(flow, _bundled_policies(p), plane_environment(p, local))
    assert v.allowed is allowed, v.reason


def test_a_bundle_of_names_is_refused_where_the_namespace_allows_the_internet() -> None:
    with pytest.raises(FieldError) as err:
        render(workspace({"preset": "gvisor", **BUNDLED}), PLATFORM, {}, NOW)
    assert err.value.path == "spec.network.allow[0].bundle"
