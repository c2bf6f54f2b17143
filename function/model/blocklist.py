"""The destinations no sandbox may reach, by address: the invariants of docs/security.md, pinned.

Decisions use these lists, never `ipaddress.is_private`/`is_global`: those call CGNAT neither
private nor global, miss the IPv4-embedding IPv6 prefixes, and move between Python versions.
Each range carries the reason a tenant reads when an allow-list entry overlaps it.
"""

from ipaddress import IPv4Network, IPv6Network, collapse_addresses
from itertools import pairwise

from function.model.address import Network, ip_text

DENY_V4: tuple[tuple[IPv4Network, str], ...] = tuple(
    (IPv4Network(cidr), reason)
    for cidr, reason in (
        ("0.0.0.0/8", "this network"),
        ("10.0.0.0/8", "private network"),
        ("100.64.0.0/10", "carrier-grade NAT, and the node join network"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local, including cloud metadata"),
        ("172.16.0.0/12", "private network"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast"),
        ("192.168.0.0/16", "private network"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
    )
)

DENY_V6: tuple[tuple[IPv6Network, str], ...] = tuple(
    (IPv6Network(cidr), reason)
    for cidr, reason in (
        ("::/96", "IPv4-compatible and loopback"),
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("64:ff9b::/96", "NAT64"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("100::/64", "discard-only"),
        ("100:0:0:1::/64", "dummy prefix"),
        ("2001::/23", "IETF protocol assignments, including Teredo"),
        ("2001:db8::/32", "documentation"),
        ("2002::/16", "6to4"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "segment routing"),
        ("fc00::/7", "unique local, including cloud metadata"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)

# Prefixes whose addresses carry an IPv4 address inside: allowing one could reach a denied
# IPv4 destination through a translator. All of them are also in DENY_V6.
IPV4_EMBEDDING: tuple[tuple[IPv6Network, str], ...] = tuple(
    (IPv6Network(cidr), reason)
    for cidr, reason in (
        ("::/96", "IPv4-compatible"),
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("64:ff9b::/96", "NAT64"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("2002::/16", "6to4"),
        ("2001::/32", "Teredo"),
    )
)


def deny_ranges(site: tuple[Network, ...] = ()) -> tuple[tuple[Network, str], ...]:
    """Every blocked range with its reason: the pinned lists, then the platform's own."""
    return (*DENY_V4, *DENY_V6, *((n, "the platform's site deny list") for n in site))


def span(network: Network) -> tuple[int, int, int]:
    """A network as (version, first, last) integers: comparisons without ipaddress objects."""
    return network.version, int(network.network_address), int(network.broadcast_address)


_PINNED: tuple[tuple[tuple[int, int, int], Network, str], ...] = tuple(
    (span(n), n, reason) for n, reason in deny_ranges()
)


def blocked(network: Network, site: tuple[Network, ...] = ()) -> tuple[Network, str] | None:
    """The first blocked range that shares any address with `network`, and why it's blocked."""
    version, first, last = span(network)
    ranges = _PINNED + tuple((span(n), n, "the platform's site deny list") for n in site)
    for (v, lo, hi), denied, reason in ranges:
        if v == version and first <= hi and lo <= last:
            return denied, reason
    return None


def embedding(network: Network, nat64: tuple[IPv6Network, ...] = ()) -> str | None:
    """Why `network` can carry IPv4 addresses inside IPv6 ones, or None.

    `nat64` are the site's own NAT64 prefixes, beside the well-known ones.
    """
    if isinstance(network, IPv6Network):
        site = tuple((prefix, "the site's NAT64") for prefix in nat64)
        for prefix, reason in (*IPV4_EMBEDDING, *site):
            if network.overlaps(prefix):
                return f"{reason} addresses ({ip_text(prefix)}) embed IPv4 addresses"
    return None


def refusal(
    network: Network, site: tuple[Network, ...], nat64: tuple[IPv6Network, ...]
) -> str | None:
    """Why an allow entry's `network` is refused, or None: what a tenant and a bundle share."""
    why = embedding(network, nat64)
    if why is not None:
        return f"{ip_text(network)} is refused: {why}"
    hit = blocked(network, site)
    if hit is not None:
        return f"{ip_text(network)} overlaps the blocked range {ip_text(hit[0])} ({hit[1]})"
    return None


def first_overlap(networks: list[Network]) -> tuple[int, int] | None:
    """The (earlier, later) positions of two overlapping networks, or None.

    Overlapping entries would make one entry's port denies close the other's ports. Sorted by
    start, any overlap shows between neighbours.
    """
    ordered = sorted((span(n), i) for i, n in enumerate(networks))
    for ((v1, _, last), i), ((v2, first, _), j) in pairwise(ordered):
        if v1 == v2 and first <= last:
            return min(i, j), max(i, j)
    return None


NAT64_LENGTHS = (32, 40, 48, 56, 64, 96)
"""The prefix lengths RFC 6052 section 2.2 defines for IPv4-embedded IPv6 addresses."""
_U_OCTET = 64  # bits 64-71: RFC 6052's "u" octet, which the IPv4 bits skip


def nat64_embedding(prefix: IPv6Network, v4: IPv4Network) -> IPv6Network:
    """The addresses through which `prefix`'s translator reaches `v4` (RFC 6052 section 2.2).

    A /96 prefix carries the IPv4 address in its last 32 bits. The shorter ones carry it right
    after the prefix, and what does not fit before bit 64 continues after the u octet. RFC 6052
    has the u octet zero, but translators read the IPv4 bits around it whatever it holds, so a
    range is cut at bit 64: wider than the IPv4 range, never narrower. A /64 prefix puts the
    whole IPv4 address after the u octet, so every range is the whole prefix.
    """
    length = prefix.prefixlen
    if length == NAT64_LENGTHS[-1]:
        embedded = int(prefix.network_address) | int(v4.network_address)
        return IPv6Network((embedded, length + v4.prefixlen))
    bits = min(v4.prefixlen, _U_OCTET - length)
    top = int(v4.network_address) >> (32 - bits) if bits else 0
    return IPv6Network(
        (int(prefix.network_address) | (top << (128 - length - bits)), length + bits)
    )


def nat64_denies(
    prefixes: tuple[IPv6Network, ...], v4: tuple[IPv4Network, ...]
) -> tuple[IPv6Network, ...]:
    """Every address through which a site's NAT64 `prefixes` reach a denied IPv4 range.

    A prefix inside a pinned range (the well-known 64:ff9b::/96 is one) is denied whole already.
    """
    pinned = [n for n, _ in DENY_V6]
    embedded = [
        nat64_embedding(prefix, network)
        for prefix in prefixes
        if not any(prefix.subnet_of(p) for p in pinned)
        for network in (*(n for n, _ in DENY_V4), *v4)
    ]
    return tuple(collapse_addresses(embedded))
