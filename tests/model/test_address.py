import sys
from ipaddress import IPv6Address, ip_address, ip_network

import pytest
from hypothesis import given
from hypothesis import strategies as st

from function.model.address import ip_text, parse_network
from function.model.blocklist import DENY_V4, DENY_V6


@pytest.mark.parametrize(
    ("value", "want"),
    [
        pytest.param("::ffff:0:0/96", "::ffff:0:0/96", id="ipv4-mapped-prefix"),
        pytest.param("::ffff:0.0.0.0/96", "::ffff:0:0/96", id="ipv4-mapped-prefix-dotted"),
        pytest.param("::ffff:10.0.0.0/104", "::ffff:a00:0/104", id="ipv4-mapped-network"),
        pytest.param("::ffff:169.254.169.254", "::ffff:a9fe:a9fe", id="ipv4-mapped-address"),
        pytest.param("::ffff:0.0.0.0", "::ffff:0:0", id="ipv4-mapped-zero"),
        pytest.param("::ffff:0.0.1.2", "::ffff:0:102", id="ipv4-mapped-single-zero-stays"),
        pytest.param("::/96", "::/96", id="ipv4-compatible-prefix"),
        pytest.param("::1.2.3.4", "::102:304", id="ipv4-compatible-address"),
        pytest.param("::", "::", id="unspecified"),
        pytest.param("::1", "::1", id="loopback"),
        pytest.param("64:ff9b::/96", "64:ff9b::/96", id="nat64-prefix"),
        pytest.param("64:ff9b::10.0.0.5", "64:ff9b::a00:5", id="nat64-address"),
        pytest.param("2001:DB8::/32", "2001:db8::/32", id="lower-case"),
        pytest.param("2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1", id="first-of-equal-runs"),
        pytest.param("1:0:0:2:0:0:0:3", "1:0:0:2::3", id="longest-run"),
        pytest.param("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1", id="one-zero-not-shortened"),
        pytest.param("fe80::/10", "fe80::/10", id="trailing-run"),
        pytest.param("1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8", id="no-zeros"),
        pytest.param("fe80::1%eth0", "fe80::1%eth0", id="scope-kept"),
        pytest.param("10.0.0.0/8", "10.0.0.0/8", id="ipv4-network"),
        pytest.param("203.0.113.7", "203.0.113.7", id="ipv4-address"),
    ],
)
def test_addresses_are_spelled_the_rfc_5952_way(value: str, want: str) -> None:
    parsed = ip_network(value) if "/" in value else ip_address(value)
    assert ip_text(parsed) == want


def test_the_pinned_deny_lists_read_as_design_md_writes_them() -> None:
    assert " ".join(ip_text(n) for n, _ in DENY_V4) == (
        "0.0.0.0/8 10.0.0.0/8 100.64.0.0/10 127.0.0.0/8 169.254.0.0/16 172.16.0.0/12 "
        "192.0.0.0/24 192.0.2.0/24 192.88.99.0/24 192.168.0.0/16 198.18.0.0/15 198.51.100.0/24 "
        "203.0.113.0/24 224.0.0.0/4 240.0.0.0/4"
    )
    assert " ".join(ip_text(n) for n, _ in DENY_V6) == (
        "::/96 ::ffff:0:0/96 64:ff9b::/96 64:ff9b:1::/48 100::/64 100:0:0:1::/64 2001::/23 "
        "2001:db8::/32 2002::/16 3fff::/20 5f00::/16 fc00::/7 fe80::/10 fec0::/10 ff00::/8"
    )


# Anywhere, and where the IPv4-compatible and IPv4-mapped addresses are.
_IPV6 = st.one_of(
    st.integers(0, 2**128 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1).map(lambda n: 0xFFFF << 32 | n),
).map(IPv6Address)


@given(_IPV6)
def test_every_ipv6_address_reads_back_as_itself(address: IPv6Address) -> None:
    assert ip_address(ip_text(address)) == address
    # Python printed this spelling before 3.13, and still does for all but IPv4-mapped ones.
    if sys.version_info < (3, 13) or address.ipv4_mapped is None:
        assert ip_text(address) == str(address)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("::ffff:0:0/95", "::ffff:0:0/95 has host bits set", id="mapped-host-bits"),
        pytest.param(
            "::ffff:1.2.3.4/96", "::ffff:102:304/96 has host bits set", id="mapped-dotted-host-bits"
        ),
        pytest.param("10.0.0.1/8", "10.0.0.1/8 has host bits set", id="ipv4-host-bits"),
        pytest.param(
            "::ffff:1.2.3/96",
            "'::ffff:1.2.3/96' does not appear to be an IPv4 or IPv6 network",
            id="not-an-address",
        ),
    ],
)
def test_bad_networks_are_reported_in_the_same_spelling(text: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_network(text)
    assert str(err.value) == message
