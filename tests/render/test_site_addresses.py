"""Addresses of the site that Cilium sees as `world`: stated by the platform, or warned about.

A control-plane VIP, node addresses Cilium does not list, the cluster's load balancers (seen
from a ComputePlane) and a NAT64 prefix are all "the internet" to a CIDR rule. Only the platform
engineer knows them. While they are not stated every call gets a warning, and the truth tables
show why: each is reachable until it is stated, and denied once it is.
"""

from ipaddress import IPv4Network, IPv6Address, IPv6Network, ip_address
from typing import Any

import pytest
from click.testing import CliRunner
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.compose.guard import guard_policy
from function.errors import FieldError
from function.fn import FunctionRunner
from function.main import cli
from function.model.address import ip_text
from function.model.blocklist import nat64_embedding
from function.model.platform import SandboxPlatform
from function.policy import Flow, cozystack_baseline, cozystack_environment, evaluate
from function.policy.environment import (
    CONTROL_PLANE_VIP,
    LOAD_BALANCER_IP,
    NAT64_PREFIX,
    UNLISTED_NODE_IPS,
)
from function.render import render
from tests.policy.isolation import ALICE, NS
from tests.schemas import validate
from tests.support import (
    AGENT_WARNING,
    NOW,
    PLATFORM,
    ROOT,
    platform,
    platform_input,
    request,
    workspace,
    xr,
)

ENV = cozystack_environment()
STATED = {
    "controlPlaneCidrs": ["185.12.64.100/32"],
    "nodeCidrs": ["185.12.64.16/28", "2a01:4f8:0:1::/64"],
    "loadBalancerCidrs": ["185.12.65.0/28"],
    "nat64Prefixes": ["2a01:4f8:c0c:6400::/96"],
}
NONE: dict[str, Any] = {k: [] for k in STATED}


def site(addresses: dict[str, Any] | None, **network: Any) -> SandboxPlatform:
    stated = {} if addresses is None else {"siteAddresses": addresses}
    return platform(network={**platform_input()["network"], **stated, **network})


SITE = site(STATED)
UNSTATED_MESSAGE = (
    "input.network.siteAddresses: controlPlaneCidrs, nodeCidrs, loadBalancerCidrs and "
    "nat64Prefixes are not stated, so sandboxes may reach addresses of this site that Cilium "
    "sees as the internet (a control-plane VIP, node addresses it does not list, the cluster's "
    "load balancers from a ComputePlane, the metadata service through a NAT64 prefix); list "
    "them, or [] where there are none"
)


# --- The warning ------------------------------------------------------------------------------


async def _results(step_input: dict[str, Any]) -> list[tuple[int, str, str]]:
    """Every result but the warning about the agent, which the shipped platform leaves unset."""
    rsp = await FunctionRunner(clock=lambda: NOW).RunFunction(request(xr(), None, step_input), None)
    return [(r.severity, r.message, r.reason) for r in rsp.results if r.reason != AGENT_WARNING]


async def test_the_shipped_platform_is_warned_on_every_call_until_it_states_them() -> None:
    assert PLATFORM.network.site_addresses.unstated() == list(STATED)
    assert await _results(platform_input()) == [
        (fnv1.SEVERITY_WARNING, UNSTATED_MESSAGE, "SiteAddressesNotStated")
    ]


@pytest.mark.parametrize("addresses", [STATED, NONE], ids=["listed", "none-there"])
async def test_stating_them_silences_the_warning(addresses: dict[str, Any]) -> None:
    network = {**platform_input()["network"], "siteAddresses": addresses}
    assert await _results({**platform_input(), "network": network}) == []


async def test_the_warning_names_only_what_is_still_unstated() -> None:
    network = {**platform_input()["network"], "siteAddresses": {**NONE, "nat64Prefixes": None}}
    network["siteAddresses"] = {k: v for k, v in network["siteAddresses"].items() if v is not None}
    ((severity, message, _),) = await _results({**platform_input(), "network": network})
    assert severity == fnv1.SEVERITY_WARNING
    assert message.startswith("input.network.siteAddresses: nat64Prefixes is not stated, so ")


async def test_a_fatal_call_gets_the_fatal_result_alone() -> None:
    rsp = await FunctionRunner(clock=lambda: NOW).RunFunction(request(xr({"preset": "xl"})), None)
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]


def test_the_policy_commands_warn_the_platform_engineer_on_stderr() -> None:
    for args in (["policy", "guard"], ["policy", "explain", str(ROOT / "examples/full/xr.yaml")]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        assert result.stderr == f"warning: {UNSTATED_MESSAGE}\n"


# --- Bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("addresses", "message"),
    [
        pytest.param(
            {"nat64Prefixes": ["64:ff9b::/80"]},
            "input.network.siteAddresses.nat64Prefixes[0]: 64:ff9b::/80 is not a NAT64 prefix: "
            "RFC 6052 has IPv6 prefixes of /32, /40, /48, /56, /64 or /96",
            id="nat64-length",
        ),
        pytest.param(
            {"nat64Prefixes": ["192.0.2.0/24"]},
            "input.network.siteAddresses.nat64Prefixes[0]: 192.0.2.0/24 is not a NAT64 prefix: "
            "RFC 6052 has IPv6 prefixes of /32, /40, /48, /56, /64 or /96",
            id="nat64-ipv4",
        ),
        pytest.param(
            {"nodeCidrs": ["185.12.64.1/24"]},
            "input.network.siteAddresses.nodeCidrs[0]: '185.12.64.1/24' is not a network in "
            "CIDR notation: 185.12.64.1/24 has host bits set",
            id="node-host-bits",
        ),
        pytest.param(
            {"controlPlaneCidrs": ["185.12.64.100"]},
            "input.network.siteAddresses.controlPlaneCidrs[0]: '185.12.64.100' is not "
            "canonical; write it as 185.12.64.100/32",
            id="vip-without-prefix",
        ),
        pytest.param(
            {"loadBalancerCidrs": "185.12.65.0/28"},
            "input.network.siteAddresses.loadBalancerCidrs: Input should be a valid tuple",
            id="not-a-list",
        ),
        pytest.param(
            {"stated": True},
            "input.network.siteAddresses.stated: is not a known field; remove it or check its "
            "spelling",
            id="unknown-field",
        ),
        pytest.param(
            {"controlPlaneCidrs": ["9.9.9.9/32"]},
            "input.network.resolvers[0]: 9.9.9.9 is in the blocked range 9.9.9.9/32 (the "
            "platform's site deny list), so sandboxes could not reach it; use public resolvers, "
            "or a preset with clusterDns",
            id="resolver-stated-as-control-plane",
        ),
    ],
)
async def test_bad_site_addresses_are_one_fatal_result(
    addresses: dict[str, Any], message: str
) -> None:
    network = {**platform_input()["network"], "siteAddresses": addresses}
    assert await _results({**platform_input(), "network": network}) == [
        (fnv1.SEVERITY_FATAL, message, "InvalidInput")
    ]


# --- NAT64 prefixes: RFC 6052 ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "v4", "want"),
    [
        # /96: the IPv4 address is the last 32 bits.
        ("2a01:4f8:c0c:6400::/96", "169.254.0.0/16", "2a01:4f8:c0c:6400::a9fe:0/112"),
        ("2a01:4f8:c0c:6400::/96", "10.0.0.0/8", "2a01:4f8:c0c:6400::a00:0/104"),
        # /32: bits 32 to 63, before the u octet: exact.
        ("2a01:4f8::/32", "169.254.0.0/16", "2a01:4f8:a9fe::/48"),
        ("2a01:4f8::/32", "192.0.2.0/24", "2a01:4f8:c000:200::/56"),
        # /40, /48, /56: cut at bit 64, since translators read past a non-zero u octet.
        ("2a01:4f8:c00::/40", "169.254.0.0/16", "2a01:4f8:ca9:fe00::/56"),
        ("2a01:4f8:c00::/40", "192.0.2.0/24", "2a01:4f8:cc0:2::/64"),
        ("2a01:4f8:c0c::/48", "169.254.0.0/16", "2a01:4f8:c0c:a9fe::/64"),
        ("2a01:4f8:c0c::/48", "192.0.2.0/24", "2a01:4f8:c0c:c000::/64"),
        ("2a01:4f8:c0c:6400::/56", "10.0.0.0/8", "2a01:4f8:c0c:640a::/64"),
        ("2a01:4f8:c0c:6400::/56", "169.254.0.0/16", "2a01:4f8:c0c:64a9::/64"),
        # /64: the u octet comes first, so every range is the whole prefix.
        ("2a01:4f8:c0c:6400::/64", "169.254.0.0/16", "2a01:4f8:c0c:6400::/64"),
    ],
)
def test_a_nat64_prefix_embeds_each_range_as_rfc_6052_places_it(
    prefix: str, v4: str, want: str
) -> None:
    assert ip_text(nat64_embedding(IPv6Network(prefix), IPv4Network(v4))) == want


def _rfc6052(prefix: str, v4: str, u: int) -> IPv6Address:
    """An address as RFC 6052 builds it, with `u` in bits 64 to 71 (zero in the RFC)."""
    net, value = IPv6Network(prefix), int(ip_address(v4))
    length = net.prefixlen
    if length == 96:
        return IPv6Address(int(net.network_address) | value)
    before = 64 - length
    high, low = value >> (32 - before), value & ((1 << (32 - before)) - 1)
    bits = (high << 64) | (u << 56) | (low << (56 - (32 - before)))
    return IPv6Address(int(net.network_address) | bits)


@pytest.mark.parametrize(
    "prefix",
    [
        "2a01:4f8::/32",
        "2a01:4f8:c00::/40",
        "2a01:4f8:c0c::/48",
        "2a01:4f8:c0c:6400::/56",
        "2a01:4f8:c0c:6400::/64",
        "2a01:4f8:c0c:6400::/96",
    ],
)
@pytest.mark.parametrize("u", [0, 0xFF], ids=["u-zero", "u-set"])
def test_every_metadata_and_private_address_behind_a_prefix_is_denied(prefix: str, u: int) -> None:
    denied = site({"nat64Prefixes": [prefix]}).network.denied_cidrs
    for v4 in ("169.254.169.254", "10.1.2.3", "192.168.100.11", "100.64.0.2", "127.0.0.1"):
        address = _rfc6052(prefix, v4, u)
        assert any(address in n for n in denied), (prefix, v4, str(address))
    # Stated node and load-balancer ranges are denied behind it too.
    stated = site({"nat64Prefixes": [prefix], "nodeCidrs": ["185.12.64.16/28"]})
    address = _rfc6052(prefix, "185.12.64.21", u)
    assert any(address in n for n in stated.network.denied_cidrs)


def test_a_nat64_prefix_still_reaches_public_addresses_unless_it_is_a_slash_64() -> None:
    for prefix in ("2a01:4f8::/32", "2a01:4f8:c0c:6400::/96"):
        public = _rfc6052(prefix, "151.101.0.223", 0)
        denied = site({"nat64Prefixes": [prefix]}).network.denied_cidrs
        assert not any(public in n for n in denied)


def test_the_well_known_prefix_adds_nothing_it_is_denied_whole() -> None:
    assert site({"nat64Prefixes": ["64:ff9b::/96"]}).network.denied_cidrs == ()


# --- Where the stated ranges are denied --------------------------------------------------------


def _cilium_cidrs(policy: dict[str, Any]) -> set[str]:
    return {c["cidr"] for r in policy["spec"]["egressDeny"] for c in r.get("toCIDRSet", [])}


def test_the_policies_and_the_guard_deny_every_stated_range() -> None:
    out = render(workspace(), SITE, {}, NOW).resources
    cilium = _cilium_cidrs(out["cilium-policy"])
    guard = _cilium_cidrs(guard_policy(SITE))
    (internet,) = out["network-policy"]["spec"]["egress"]
    excepts = {e for block in internet["to"] for e in block["ipBlock"]["except"]}
    wanted = {"185.12.64.100/32", "185.12.64.16/28", "2a01:4f8:0:1::/64", "185.12.65.0/28"}
    wanted |= {"2a01:4f8:c0c:6400::a9fe:0/112", "2a01:4f8:c0c:6400::b90c:4064/128"}
    assert wanted <= cilium
    assert wanted <= guard
    assert wanted <= excepts
    assert validate(guard_policy(SITE)) == []


def test_a_tenant_may_not_allow_a_stated_range_or_the_sites_nat64() -> None:
    for cidr, message in (
        (
            "185.12.64.0/24",
            (
                "spec.network.allow[0].cidr: 185.12.64.0/24 overlaps the blocked range "
                "185.12.64.100/32 (the platform's site deny list)"
            ),
        ),
        (
            "2a01:4f8:c0c:6400::5db8:d800/120",
            (
                "spec.network.allow[0].cidr: 2a01:4f8:c0c:6400::5db8:d800/120 is refused: the "
                "site's NAT64 addresses (2a01:4f8:c0c:6400::/96) embed IPv4 addresses"
            ),
        ),
    ):
        spec = {"network": {"egress": "Allowlist", "allow": [{"cidr": cidr}]}}
        with pytest.raises(FieldError) as err:
            render(workspace(spec), SITE, {}, NOW)
        assert str(err.value) == message


# --- The truth table: reachable while unstated, denied once stated -----------------------------


def _world(p: SandboxPlatform) -> list[dict[str, Any]]:
    policies = [
        {**m, "metadata": {**m["metadata"], "namespace": NS}}
        for name in ("alice-api", "bob-frontend")
        for m in render(
            workspace(ALICE if name == "alice-api" else {}, name), p, {}, NOW
        ).resources.values()
        if m["kind"] in ("CiliumNetworkPolicy", "NetworkPolicy")
    ]
    return [*policies, guard_policy(p), *cozystack_baseline(NS)]


def out(dest: str, port: int | None = 443, protocol: str = "TCP") -> Flow:
    return Flow("alice-api", dest, port, protocol)  # type: ignore[arg-type]


def nat64(v4: str) -> str:
    return str(_rfc6052(NAT64_PREFIX, v4, 0))


# (flow, allowed while unstated, allowed once stated)
SITE_TABLE = [
    pytest.param(out(CONTROL_PLANE_VIP, 6443), True, False, id="control-plane-vip"),
    pytest.param(out("api.cozy.example.net", 6443), True, False, id="control-plane-vip-by-name"),
    pytest.param(out(UNLISTED_NODE_IPS[0], 22), True, False, id="unlisted-node-address"),
    pytest.param(out(UNLISTED_NODE_IPS[1], 10250), True, False, id="unlisted-node-address-v6"),
    pytest.param(out(nat64("169.254.169.254"), 80), True, False, id="nat64-metadata"),
    pytest.param(out(nat64("10.0.0.5")), True, False, id="nat64-private"),
    pytest.param(out(nat64("192.168.100.11"), 10250), True, False, id="nat64-node"),
    pytest.param(out(nat64("185.12.64.100"), 6443), True, False, id="nat64-control-plane-vip"),
    # Inside the cluster, the load balancer is translated to tenant-root's ingress pods, which
    # every sandbox is denied as an endpoint, stated or not.
    pytest.param(out(LOAD_BALANCER_IP), False, False, id="load-balancer-from-the-namespace"),
    pytest.param(out(nat64("151.101.0.223")), True, True, id="nat64-public-stays-open"),
    pytest.param(out("151.101.0.223"), True, True, id="public"),
    pytest.param(out("185.12.64.12", 22), False, False, id="listed-node-address"),
]


@pytest.mark.parametrize(("flow", "unstated", "stated"), SITE_TABLE)
def test_site_addresses_are_reachable_until_stated(
    flow: Flow, unstated: bool, stated: bool
) -> None:
    before = evaluate(flow, _world(PLATFORM), ENV)
    after = evaluate(flow, _world(SITE), ENV)
    assert (before.allowed, after.allowed) == (unstated, stated), (before.reason, after.reason)


def test_the_evaluator_says_where_a_nat64_address_leads() -> None:
    verdict = evaluate(out(nat64("169.254.169.254"), 80), _world(PLATFORM), ENV)
    assert verdict.reason.endswith("[through the site's NAT64 to 169.254.169.254]")
