"""IP addresses and networks as text, spelled the same on every supported Python.

`str()` of an `ipaddress` object depends on the interpreter: since Python 3.13 it writes
IPv4-mapped IPv6 addresses with a dotted quad (`::ffff:0.0.0.0/96` where 3.11 and 3.12 write
`::ffff:0:0/96`), in its error messages too. Policies, messages and the check that a CIDR is
written canonically must not change with the Python that runs them, so every address the
function prints is spelled here: RFC 5952's recommended form, all hexadecimal, as the README's
deny lists and Python 3.11 and 3.12 write it. IPv4's dotted quad has never changed.
"""

from ipaddress import (
    IPv4Address,
    IPv4Network,
    IPv6Address,
    IPv6Network,
    ip_address,
    ip_interface,
    ip_network,
)
from itertools import groupby

Address = IPv4Address | IPv6Address
Network = IPv4Network | IPv6Network


def _v6(address: IPv6Address) -> str:
    value = int(address)
    hextets = [(value >> shift) & 0xFFFF for shift in range(112, -1, -16)]
    # RFC 5952 4.2: "::" shortens the longest run of two or more zero fields, the first if tied.
    start, length, at = 0, 1, 0
    for zero, run in groupby(hextets, key=lambda h: h == 0):
        n = len(list(run))
        if zero and n > length:
            start, length = at, n
        at += n
    fields = [f"{h:x}" for h in hextets]
    if length > 1:
        text = f"{':'.join(fields[:start])}::{':'.join(fields[start + length :])}"
    else:
        text = ":".join(fields)
    return f"{text}%{address.scope_id}" if address.scope_id else text


def ip_text(value: Address | Network) -> str:
    """`value` as text, the same on every Python: `::ffff:a00:5`, `::ffff:0:0/96`, `10.0.0.0/8`."""
    if isinstance(value, IPv4Network | IPv6Network):
        return f"{ip_text(value.network_address)}/{value.prefixlen}"
    if isinstance(value, IPv6Address):
        return _v6(value)
    return str(value)


def _no_zone(text: str) -> None:
    # ipaddress keeps an IPv6 scope zone (`fe80::1%eth0`), and the zone would be copied into
    # policies and resolver lists; it names an interface of one host and means nothing there.
    if "%" in text:
        raise ValueError("a scope zone (%...) names one host's interface; leave it out")


def parse_address(text: str) -> Address:
    """An IP address without a scope zone; ValueError if it isn't one."""
    _no_zone(text)
    return ip_address(text)


def parse_network(text: str) -> Network:
    """A CIDR without host bits; ValueError, in this module's spelling, if it isn't one."""
    _no_zone(text)
    try:
        return ip_network(text, strict=True)
    except ValueError as err:
        try:
            interface = ip_interface(text)
        except ValueError:
            raise err from None  # no address and prefix at all; the message quotes the input
        # An address and prefix that make no network have host bits set; ipaddress's message
        # would print the address in its own spelling.
        found = f"{ip_text(interface.ip)}/{interface.network.prefixlen}"
        raise ValueError(f"{found} has host bits set") from None
