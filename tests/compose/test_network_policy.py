from typing import Any

import pytest
from hypothesis import given

from function.compose.guard import guard_policy
from function.compose.names import new_identity
from function.compose.network_policy import DENIED_ENTITIES, network_policies
from function.compose.workloads import kind_of
from function.model import parse
from function.model.address import ip_text
from function.model.blocklist import DENY_V4, DENY_V6
from function.model.platform import Preset, SandboxPlatform
from tests.strategies import specs
from tests.support import PLATFORM, platform, platform_input, workspace

STANDARD = platform_input()["presets"]["standard"]
PRESET = PLATFORM.presets["standard"]
SSH = kind_of(PRESET).serves_ssh
CLUSTER_DNS = parse(Preset, {**STANDARD, "clusterDns": True}, "input.presets.standard")
# A cluster whose namespaces don't already allow internet egress: allow-lists work by name.
OPEN = platform(network={**platform_input()["network"], "namespacesAllowInternet": False})


def policies(
    spec: dict[str, Any], preset: Preset = PRESET, p: SandboxPlatform = PLATFORM
) -> dict[str, Any]:
    return network_policies(workspace(spec), preset, p, ssh=kind_of(preset).serves_ssh)


def cilium(
    spec: dict[str, Any], preset: Preset = PRESET, p: SandboxPlatform = PLATFORM
) -> dict[str, Any]:
    spec_out: dict[str, Any] = policies(spec, preset, p)["cilium-policy"]["spec"]
    return spec_out


def allowlist(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"network": {"egress": "Allowlist", "allow": list(entries)}}


def test_every_sandbox_gets_entity_endpoint_and_address_denies() -> None:
    deny = cilium({})["egressDeny"]
    assert deny[0] == {"toEntities": DENIED_ENTITIES}
    assert deny[1] == {
        "toEndpoints": [
            {"matchExpressions": [{"key": "io.kubernetes.pod.namespace", "operator": "Exists"}]}
        ]
    }
    assert [c["cidr"] for c in deny[2]["toCIDRSet"]] == [
        ip_text(n) for n, _ in (*DENY_V4, *DENY_V6)
    ]


def test_site_ranges_join_the_address_denies_in_both_policies() -> None:
    site = platform(
        network={
            **platform_input()["network"],
            "siteDenyCidrs": ["185.12.64.0/22", "2a01:4f8::/32"],
        }
    )
    out = network_policies(workspace({}), PRESET, site, ssh=SSH)
    cidrs = [c["cidr"] for c in out["cilium-policy"]["spec"]["egressDeny"][2]["toCIDRSet"]]
    assert cidrs[-2:] == ["185.12.64.0/22", "2a01:4f8::/32"]
    v4, v6 = out["network-policy"]["spec"]["egress"][0]["to"]
    assert v4["ipBlock"]["except"][-1] == "185.12.64.0/22"
    assert v6["ipBlock"]["except"][-1] == "2a01:4f8::/32"


def test_internet_mode_allows_public_v4_and_v6() -> None:
    assert cilium({})["egress"] == [{"toCIDRSet": [{"cidr": "0.0.0.0/0"}, {"cidr": "::/0"}]}]


def test_none_mode_denies_everything_and_allows_nothing() -> None:
    out = policies({"network": {"egress": "None"}})
    assert out["cilium-policy"]["spec"]["egressDeny"] == [{"toEntities": ["all"]}]
    assert out["cilium-policy"]["spec"]["egress"] == []
    assert out["network-policy"]["spec"]["egress"] == []
    assert out["network-policy"]["spec"]["policyTypes"] == ["Ingress", "Egress"]


def test_allowlist_resolves_only_the_listed_names_at_the_platform_resolvers() -> None:
    spec = allowlist({"fqdn": "pypi.org"}, {"fqdn": "*.pythonhosted.org", "ports": [443]})
    egress = cilium(spec, p=OPEN)["egress"]
    assert egress[0] == {
        "toCIDRSet": [{"cidr": "9.9.9.9/32"}, {"cidr": "149.112.112.112/32"}],
        "toPorts": [
            {
                "ports": [{"port": "53", "protocol": "UDP"}, {"port": "53", "protocol": "TCP"}],
                "rules": {
                    "dns": [{"matchPattern": "*.pythonhosted.org"}, {"matchName": "pypi.org"}]
                },
            }
        ],
    }
    assert egress[1:] == [
        {
            "toFQDNs": [{"matchPattern": "*.pythonhosted.org"}],
            "toPorts": [{"ports": [{"port": "443", "protocol": "ANY"}]}],
        },
        {"toFQDNs": [{"matchName": "pypi.org"}]},
    ]


def test_allowlist_cidrs_keep_their_ports_and_reach_the_plain_policy() -> None:
    spec = allowlist({"cidr": "151.101.0.0/16", "ports": [443, 80]}, {"cidr": "2a04:4e42::/32"})
    assert cilium(spec)["egress"] == [
        {
            "toCIDRSet": [{"cidr": "151.101.0.0/16"}],
            "toPorts": [
                {"ports": [{"port": "80", "protocol": "ANY"}, {"port": "443", "protocol": "ANY"}]}
            ],
        },
        {"toCIDRSet": [{"cidr": "2a04:4e42::/32"}]},
    ]
    plain = policies(spec)["network-policy"]["spec"]["egress"]
    assert plain == [
        {
            "to": [{"ipBlock": {"cidr": "151.101.0.0/16"}}],
            "ports": [
                {"port": 80, "protocol": "TCP"},
                {"port": 80, "protocol": "UDP"},
                {"port": 443, "protocol": "TCP"},
                {"port": 443, "protocol": "UDP"},
            ],
        },
        {"to": [{"ipBlock": {"cidr": "2a04:4e42::/32"}}]},
    ]


def test_allowlist_denies_stay_in_place() -> None:
    assert cilium(allowlist({"fqdn": "pypi.org"}), p=OPEN)["egressDeny"] == cilium({})["egressDeny"]


def test_where_namespaces_allow_the_internet_the_allowlist_is_written_as_denies() -> None:
    spec = allowlist({"cidr": "151.101.0.0/16", "ports": [443, 80]}, {"cidr": "2a04:4e42::/32"})
    deny = cilium(spec)["egressDeny"]
    assert deny[:3] == cilium({})["egressDeny"]
    assert deny[3:] == [
        {
            "toCIDRSet": [
                {"cidr": "0.0.0.0/0", "except": ["151.101.0.0/16"]},
                {"cidr": "::/0", "except": ["2a04:4e42::/32"]},
            ]
        },
        {
            "toCIDRSet": [{"cidr": "151.101.0.0/16"}],
            "toPorts": [
                {
                    "ports": [
                        {"port": "1", "endPort": 79, "protocol": "ANY"},
                        {"port": "81", "endPort": 442, "protocol": "ANY"},
                        {"port": "444", "endPort": 65535, "protocol": "ANY"},
                    ]
                }
            ],
        },
    ]


def test_an_allowlist_of_nothing_denies_all_public_addresses() -> None:
    deny = cilium({"network": {"egress": "Allowlist"}})["egressDeny"]
    assert deny[3] == {"toCIDRSet": [{"cidr": "0.0.0.0/0"}, {"cidr": "::/0"}]}


def test_the_highest_port_leaves_no_empty_range() -> None:
    deny = cilium(allowlist({"cidr": "151.101.0.0/16", "ports": [65535, 1]}))["egressDeny"]
    assert deny[4]["toPorts"] == [{"ports": [{"port": "2", "endPort": 65534, "protocol": "ANY"}]}]


def test_cluster_dns_preset_carves_kube_dns_port_53_out_of_the_endpoint_deny() -> None:
    out = cilium({}, CLUSTER_DNS)
    endpoints = out["egressDeny"][1]["toEndpoints"]
    assert endpoints == [
        {
            "matchExpressions": [
                {"key": "io.kubernetes.pod.namespace", "operator": "Exists"},
                {
                    "key": "io.kubernetes.pod.namespace",
                    "operator": "NotIn",
                    "values": ["kube-system"],
                },
            ]
        },
        {
            "matchExpressions": [
                {"key": "io.kubernetes.pod.namespace", "operator": "In", "values": ["kube-system"]},
                {"key": "k8s-app", "operator": "NotIn", "values": ["kube-dns"]},
            ]
        },
    ]
    other_ports = out["egressDeny"][3]
    assert other_ports["toEndpoints"] == [
        {"matchLabels": {"io.kubernetes.pod.namespace": "kube-system", "k8s-app": "kube-dns"}}
    ]
    assert out["egress"][1]["toPorts"] == [
        {"ports": [{"port": "53", "protocol": "UDP"}, {"port": "53", "protocol": "TCP"}]}
    ]


def test_without_cluster_dns_no_rule_mentions_kube_dns() -> None:
    assert "kube-dns" not in str(policies({})) + str(
        policies(allowlist({"fqdn": "pypi.org"}), p=OPEN)
    )


def test_ingress_only_from_gateway_pods_on_the_sandbox_ports() -> None:
    spec = {"ports": [{"name": "preview", "port": 3000}], "ssh": {"authorizedKeys": []}}
    out = cilium(spec)
    assert out["ingress"] == [
        {
            "fromEndpoints": [
                {
                    "matchLabels": {
                        "io.kubernetes.pod.namespace": "cozy-sandbox-gateway",
                        "app.kubernetes.io/name": "sandbox-gateway",
                    }
                }
            ],
            "toPorts": [
                {
                    "ports": [
                        {"port": "3000", "protocol": "TCP"},
                        {"port": "49983", "protocol": "TCP"},
                    ]
                }
            ],
        }
    ]
    assert out["ingressDeny"][0]["fromEntities"] == [
        "world",
        "remote-node",
        "kube-apiserver",
        "health",
        "init",
        "ingress",
        "unmanaged",
    ]


def test_without_cilium_only_the_plain_policy_is_rendered() -> None:
    no_cilium = platform(network={**platform_input()["network"], "cilium": False})
    assert sorted(network_policies(workspace({}), PRESET, no_cilium, ssh=SSH)) == ["network-policy"]


@given(spec=specs)
def test_exactly_one_cilium_policy_selects_the_sandbox_identity(spec: dict[str, Any]) -> None:
    ws = workspace(spec)
    out = network_policies(ws, PRESET, PLATFORM, ssh=SSH)
    selecting = [m for m in out.values() if m["kind"] == "CiliumNetworkPolicy"]
    assert len(selecting) == 1
    assert selecting[0]["spec"]["endpointSelector"] == {
        "matchLabels": {"sandbox.cozystack.io/workspace": new_identity("alice-api")}
    }
    assert out["network-policy"]["spec"]["podSelector"] == selecting[0]["spec"]["endpointSelector"]


@pytest.mark.parametrize("mode", ["Internet", "Allowlist", "None"])
def test_no_allow_rule_ever_names_a_denied_entity_or_endpoint(mode: str) -> None:
    allow = [{"fqdn": "pypi.org"}] if mode == "Allowlist" else []
    for rule in cilium({"network": {"egress": mode, "allow": allow}}, p=OPEN)["egress"]:
        assert "toEntities" not in rule
        assert "toEndpoints" not in rule


NAMESPACE_KEYS = {
    f"{source}io.kubernetes.pod.namespace" for source in ("", "k8s:", "any:", "unspec:")
}
PEER_FIELDS = ("endpointSelector", "toEndpoints", "fromEndpoints")


def selectors(node: Any) -> list[dict[str, Any]]:
    """Every endpoint selector in a policy (the subject's and the peers')."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "endpointSelector":
                found.append(value)
            elif key in PEER_FIELDS:
                found += value
            else:
                found += selectors(value)
    elif isinstance(node, list):
        for item in node:
            found += selectors(item)
    return found


def unpaired(selector: dict[str, Any]) -> list[str]:
    """NotIn/DoesNotExist on the namespace without Exists (or In) on it in the same selector."""
    expressions = selector.get("matchExpressions") or []
    present = {k for k in selector.get("matchLabels") or {} if k in NAMESPACE_KEYS} | {
        e["key"] for e in expressions if e["operator"] in ("Exists", "In")
    }
    return [
        f"{e['key']} {e['operator']}"
        for e in expressions
        if e["key"] in NAMESPACE_KEYS
        and e["operator"] in ("NotIn", "DoesNotExist")
        and not present & NAMESPACE_KEYS
    ]


def every_cilium_policy() -> list[Any]:
    site = {**platform_input()["network"], "siteDenyCidrs": ["185.12.64.0/22"]}
    dns_presets = {**platform_input()["presets"], "internal": {**STANDARD, "clusterDns": True}}
    out: list[Any] = [
        guard_policy(PLATFORM),
        guard_policy(platform(presets=dns_presets, network=site)),
    ]
    modes = [
        {},
        {"network": {"egress": "None"}},
        allowlist({"cidr": "151.101.0.0/16", "ports": [443]}),
    ]
    for preset in (PRESET, CLUSTER_DNS, PLATFORM.presets["kata"]):
        for p in (PLATFORM, OPEN):
            out += [policies(spec, preset, p)["cilium-policy"] for spec in modes]
        out.append(policies(allowlist({"fqdn": "pypi.org"}), preset, OPEN)["cilium-policy"])
    return out


def test_no_selector_depends_on_the_local_cluster_default() -> None:
    # Without Cilium's implicit local-cluster term a NotIn or DoesNotExist on the namespace
    # also selects the node, world and the apiserver; Exists beside it keeps it to pods.
    found = [s for p in every_cilium_policy() for s in selectors(p)]
    negated = [
        e
        for s in found
        for e in s.get("matchExpressions") or []
        if unpaired({"matchExpressions": [e]})
    ]
    assert negated, "no NotIn on the namespace left to check"
    assert [(s, why) for s in found if (why := unpaired(s))] == []


@given(spec=specs)
def test_no_selector_of_any_sandbox_depends_on_the_local_cluster_default(
    spec: dict[str, Any],
) -> None:
    for preset in (PRESET, CLUSTER_DNS):
        found = selectors(policies(spec, preset)["cilium-policy"])
        assert [(s, why) for s in found if (why := unpaired(s))] == []


@pytest.mark.parametrize(
    "fqdn",
    [
        "pypi.org",
        "*.pythonhosted.org",
        "objects.githubusercontent.com",
        "xn--80ak6aa92e.xn--p1ai",
        "svc.example.com",
        "api.svc.example.com",
        "pod.example.com",
        "kube-system.example.com",
        "default.example.com",
    ],
)
def test_public_names_stay_allowed(fqdn: str) -> None:
    # Only cluster-shaped names are refused: a label svc or pod after the first two, or a last
    # label that is no top-level domain (digits, dashes, or the namespace default).
    out = cilium(allowlist({"fqdn": fqdn}), p=OPEN)
    assert {"toFQDNs": [{"matchPattern" if "*" in fqdn else "matchName": fqdn}]} in out["egress"]
