"""Scalar field types as they arrive from a protobuf Struct.

Structs carry every number as a float, so a port written as 443 arrives as 443.0. Pydantic's lax
mode would also turn the string "443" into 443 and "yes" into True; the XRD rejects those, and so
do we, so that the function never accepts what the schema refuses.
"""

import re
from datetime import datetime, timedelta
from decimal import Decimal
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Annotated

from pydantic import BeforeValidator, Field, StrictBool

from function.model.address import ip_text, parse_address, parse_network
from function.model.blocklist import NAT64_LENGTHS
from function.model.quantity import parse_bytes, parse_cpu, parse_tenant_bytes


def _whole_number(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a whole number")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError("must be a whole number")
    return int(value)


Int = Annotated[int, BeforeValidator(_whole_number)]
Port = Annotated[int, BeforeValidator(_whole_number), Field(ge=1, le=65535)]
Bool = StrictBool
Cpu = Annotated[Decimal, BeforeValidator(parse_cpu)]
Bytes = Annotated[Decimal, BeforeValidator(parse_bytes)]
TenantBytes = Annotated[Decimal, BeforeValidator(parse_tenant_bytes)]
"""A size a tenant writes: what the XRD's rule admits on a real API server (no `1.5Gi`)."""


def _network(value: object) -> IPv4Network | IPv6Network:
    if not isinstance(value, str):
        raise ValueError("must be a CIDR string such as 203.0.113.0/24")
    try:
        network = parse_network(value)
    except ValueError as err:
        raise ValueError(f"{value!r} is not a network in CIDR notation: {err}") from None
    # One spelling per network, so that the rendered policy is the text the user wrote.
    if (text := ip_text(network)) != value:
        raise ValueError(f"{value!r} is not canonical; write it as {text}")
    return network


def _address(value: object) -> IPv4Address | IPv6Address:
    if not isinstance(value, str):
        raise ValueError("must be an IP address string")
    try:
        return parse_address(value)
    except ValueError as err:
        detail = f": {err}" if "%" in value else ""
        raise ValueError(f"{value!r} is not an IP address{detail}") from None


# RFC 3339 with a zone, as Kubernetes writes times; nothing looser.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")


def _time(value: object) -> datetime:
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError("must be an RFC 3339 time with a zone, such as 2026-12-01T18:00:00Z")
    try:
        # fromisoformat takes at most microseconds; Kubernetes never writes more.
        return datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", value))
    except ValueError:
        raise ValueError(f"{value!r} is not a real point in time") from None


def _nat64_prefix(value: object) -> IPv6Network:
    network = _network(value)
    if not isinstance(network, IPv6Network) or network.prefixlen not in NAT64_LENGTHS:
        lengths = ", ".join(f"/{n}" for n in NAT64_LENGTHS[:-1])
        raise ValueError(
            f"{ip_text(network)} is not a NAT64 prefix: RFC 6052 has IPv6 prefixes of "
            f"{lengths} or /{NAT64_LENGTHS[-1]}"
        )
    return network


Cidr = Annotated[IPv4Network | IPv6Network, BeforeValidator(_network)]
Nat64Prefix = Annotated[IPv6Network, BeforeValidator(_nat64_prefix)]
IpAddress = Annotated[IPv4Address | IPv6Address, BeforeValidator(_address)]
Time = Annotated[datetime, BeforeValidator(_time)]


_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?")


def _duration(value: object) -> timedelta:
    if not isinstance(value, str) or not value or not (match := _DURATION.fullmatch(value)):
        raise ValueError("must be a duration in days, hours and minutes, such as 8h, 7d or 1h30m")
    days, hours, minutes = (int(g or 0) for g in match.groups())
    duration = timedelta(days=days, hours=hours, minutes=minutes)
    if not duration:
        raise ValueError("must be longer than zero")
    return duration


Duration = Annotated[timedelta, BeforeValidator(_duration)]
