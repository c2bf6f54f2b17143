"""Isolation over random specs and random addresses, not just the table's rows."""

from ipaddress import ip_address, ip_network
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from function.policy import Flow, evaluate
from tests.policy.isolation import ENV, ENVS, world
from tests.strategies import allowlists, blocked_addresses, public_addresses, specs

NODE_ADDRESSES = {ip_address(ip) for node in ENV.nodes for ip in node.ips}
ports = st.integers(1, 65535)
protocols = st.sampled_from(["TCP", "UDP", "SCTP", "ICMP"])
networks = st.sampled_from(
    [{"egress": "Internet"}, {"egress": "None"}, {"egress": "Allowlist", "allow": []}]
)


@settings(max_examples=150, deadline=None)
@given(spec=specs, network=networks, address=blocked_addresses, port=ports, protocol=protocols)
def test_every_blocked_address_is_denied_whatever_the_spec(
    spec: dict[str, Any], network: dict[str, Any], address: str, port: int, protocol: str
) -> None:
    policies = world({**spec, "network": network}, baseline=True)
    flow = Flow("alice-api", address, port, protocol)  # type: ignore[arg-type]
    for env in ENVS.values():
        v = evaluate(flow, policies, env)
        assert not v.allowed, v.reason


@settings(max_examples=150, deadline=None)
@given(spec=specs, address=public_addresses, port=ports, protocol=protocols)
def test_public_addresses_are_reachable_in_internet_mode(
    spec: dict[str, Any], address: str, port: int, protocol: str
) -> None:
    if ip_address(address) in NODE_ADDRESSES:
        return  # a node's public address is a node first, and denied as one
    flow = Flow("alice-api", address, port, protocol)  # type: ignore[arg-type]
    for baseline in (True, False):
        policies = world({**spec, "network": {"egress": "Internet"}}, baseline=baseline)
        for env in ENVS.values():
            v = evaluate(flow, policies, env)
            assert v.allowed, v.reason


@settings(max_examples=150, deadline=None)
@given(allow=allowlists(), address=public_addresses, port=ports)
def test_allowlist_mode_allows_exactly_the_listed_addresses_and_ports(
    allow: list[dict[str, Any]], address: str, port: int
) -> None:
    if ip_address(address) in NODE_ADDRESSES:
        return
    listed = [
        e
        for e in allow
        if ip_address(address) in ip_network(e["cidr"]) and port in e.get("ports", [port])
    ]
    spec = {"network": {"egress": "Allowlist", "allow": allow}}
    for baseline in (True, False):
        policies = world(spec, baseline=baseline)
        for env in ENVS.values():
            v = evaluate(Flow("alice-api", address, port), policies, env)
            assert v.allowed is bool(listed), v.reason


@settings(max_examples=60, deadline=None)
@given(allow=allowlists())
def test_allowlist_mode_allows_an_address_inside_each_entry(allow: list[dict[str, Any]]) -> None:
    spec = {"network": {"egress": "Allowlist", "allow": allow}}
    policies = world(spec, baseline=True)
    for entry in allow:
        network = ip_network(entry["cidr"])
        inside = str(network.network_address + (network.num_addresses // 2))
        if ip_address(inside) in NODE_ADDRESSES:
            continue
        port = entry.get("ports", [443])[0]
        for env in ENVS.values():
            v = evaluate(Flow("alice-api", inside, port), policies, env)
            assert v.allowed, v.reason
