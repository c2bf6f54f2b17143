"""Hypothesis strategies that build tenant-shaped WorkspaceSandbox specs and names."""

from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from typing import Any

from hypothesis import strategies as st

from function.model.address import ip_text
from function.model.blocklist import DENY_V4, DENY_V6, blocked, embedding

KEYS = [
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ59QzKAgaweWutMQQYQMAhdmOo8JHFmw4Y3BLQLyb4k alice@laptop",
    (
        "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBEhSioHWZwjf54wiu9K4GD"
        "303E4bBA+nSjYJin7GLulLAhqLBJlhmDPwylHmzo5wn1aUxWJXB4NdXdzNwnL/JAw= ci-runner"
    ),
]

_label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)

# XR names are DNS-1123 subdomains: dots, leading digits and up to 253 characters.
xr_names = (
    st.lists(
        st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True), min_size=1, max_size=4
    )
    .map(".".join)
    .filter(lambda n: len(n) <= 253)
)

snapshot_names = st.from_regex(r"[a-z]([-a-z0-9]{0,30}[a-z0-9])?", fullmatch=True)
port_names = st.from_regex(r"[a-z]{1,6}(-[a-z0-9]{1,4})?", fullmatch=True)
ports = st.integers(min_value=1024, max_value=49000)


@st.composite
def service_ports(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(port_names, max_size=5, unique=True))
    numbers = draw(st.lists(ports, min_size=len(names), max_size=len(names), unique=True))
    return [{"name": n, "port": p} for n, p in zip(names, numbers, strict=True)]


resources = st.fixed_dictionaries(
    {},
    optional={
        "cpu": st.sampled_from(["1", "2", "500m", "1500m", "8", 4.0]),
        "memory": st.sampled_from(["1Gi", "4Gi", "4096Mi", "16Gi"]),
        "disk": st.sampled_from(["20Gi", "50Gi", "200Gi", "30Gi"]),
    },
)

specs = st.fixed_dictionaries(
    {"image": st.just("ubuntu-24.04")},
    optional={
        "preset": st.just("standard"),
        "resources": resources,
        "power": st.sampled_from(["Running", "Suspended"]),
        "ports": service_ports(),
        "ssh": st.fixed_dictionaries(
            {"authorizedKeys": st.lists(st.sampled_from(KEYS), max_size=2, unique=True)}
        ),
        "snapshots": st.lists(snapshot_names, max_size=6, unique=True).map(
            lambda names: [{"name": n} for n in names]
        ),
        "lifetime": st.just({"suspendAt": "2026-12-01T18:00:00Z"}),
        "network": st.just({"egress": "Internet"}),
    },
)


def _address_in(network: Any) -> st.SearchStrategy[str]:
    # Offsets from the network's own address, so ::/96 yields IPv6 addresses, not IPv4 ones.
    size = int(network.broadcast_address) - int(network.network_address)
    return st.integers(0, size).map(lambda n: str(network.network_address + n))


# One random address inside a random blocked range, v4 or v6, the site list aside.
blocked_addresses = st.sampled_from([n for n, _ in (*DENY_V4, *DENY_V6)]).flatmap(_address_in)

# Unicast space (1.0.0.0 to 223.255.255.255, and 2000::/3): hypothesis leans towards the ends
# of a range, so drawing from all of 0..2**128 would mostly land in ::/96.
_any_v4 = st.integers(1 << 24, (224 << 24) - 1).map(IPv4Address)
_any_v6 = st.integers(0x2 << 124, (0x4 << 124) - 1).map(IPv6Address)


def _public(address: IPv4Address | IPv6Address) -> bool:
    return blocked(ip_network(address)) is None


public_addresses = st.one_of(_any_v4, _any_v6).filter(_public).map(str)


@st.composite
def public_cidrs(draw: st.DrawFn) -> str:
    """A public network: a public address widened to a random prefix while that stays public."""
    address = ip_address(draw(public_addresses))
    prefix = draw(st.integers(12, 32) if address.version == 4 else st.integers(24, 128))
    network = ip_network(f"{address}/{prefix}", strict=False)
    if blocked(network) is not None or embedding(network) is not None:
        network = ip_network(address)
    return ip_text(network)


@st.composite
def allowlists(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Non-overlapping public CIDR entries, some narrowed to ports."""
    entries: list[dict[str, Any]] = []
    for cidr in draw(st.lists(public_cidrs(), max_size=5)):
        network = ip_network(cidr)
        if any(network.overlaps(ip_network(e["cidr"])) for e in entries):
            continue
        ports = draw(st.lists(st.integers(1, 65535), max_size=3, unique=True))
        entries.append({"cidr": cidr, **({"ports": ports} if ports else {})})
    return entries


@st.composite
def split_pairs(draw: st.DrawFn) -> tuple[tuple[str, str], tuple[str, str]]:
    """Two (XR, snapshot) pairs that join to one string at different dashes."""
    words = draw(
        st.lists(st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True), min_size=3, max_size=6)
    )
    i, j = sorted(
        draw(st.lists(st.integers(1, len(words) - 1), min_size=2, max_size=2, unique=True))
    )
    return ("-".join(words[:i]), "-".join(words[i:])), ("-".join(words[:j]), "-".join(words[j:]))
