"""Kubernetes resource quantities, parsed strictly into exact decimals.

Tenants write `cpu: "2"`, `memory: 4Gi`, `disk: 20Gi`. We keep the exact value (cores or bytes)
as a Decimal so that bounds are compared exactly, and print one canonical form so that writing
`4096Mi` or `4Gi` renders the same manifest.
"""

import re
from decimal import Decimal, InvalidOperation

# The Kubernetes quantity grammar, without signs: tenants never mean a negative size.
_QUANTITY = re.compile(
    r"(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
# Nothing a sandbox asks for comes near an exbibyte; bigger numbers are typos or attacks.
_CEILING = Decimal(2**63)
_MILLI = Decimal("0.001")


def parse_quantity(value: object) -> Decimal:
    """Parse a quantity string (or a plain number) into its exact value."""
    if isinstance(value, bool):
        raise ValueError("must be a quantity such as '2', '500m' or '4Gi', not a boolean")
    if isinstance(value, int | float):
        # Structs carry every number as a float: 2 arrives as 2.0.
        value = format(Decimal(str(value)).normalize(), "f")
    if not isinstance(value, str):
        raise ValueError("must be a quantity such as '2', '500m' or '4Gi'")
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise ValueError(f"{value!r} is not a quantity; write it like '2', '500m' or '4Gi'")
    suffix = match["suffix"]
    try:
        number = Decimal(match["number"])
    except InvalidOperation:  # pragma: no cover  # the regex admits only decimal digits
        raise ValueError(f"{value!r} is not a quantity") from None
    scaled = number * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])
    if scaled > _CEILING:
        raise ValueError(f"{value!r} is far larger than any sandbox can have")
    return scaled


def parse_cpu(value: object) -> Decimal:
    cores = parse_quantity(value)
    if cores <= 0:
        raise ValueError("must be more than zero")
    if cores % _MILLI:
        raise ValueError("must be a whole number of millicores, such as '1500m' or '1.5'")
    return cores


def parse_bytes(value: object) -> Decimal:
    size = parse_quantity(value)
    if size <= 0:
        raise ValueError("must be more than zero")
    if size % 1:
        raise ValueError("must be a whole number of bytes, such as '512Mi' or '4Gi'")
    return size


def parse_tenant_bytes(value: object) -> Decimal:
    """A size in a WorkspaceSandbox: whole bytes, as the API server's CEL `isInteger()` has it.

    The API server keeps a binary-suffixed amount with a decimal point (`1.5Gi`, `1.0Gi`) as a
    scaled decimal, which its quantity library never calls an integer; the XRD refuses it, and
    so does the function, so the two agree on every value.
    """
    if isinstance(value, str) and "." in value and value.endswith(tuple(_BINARY)):
        raise ValueError("must be a whole number of bytes, such as '1536Mi' rather than '1.5Gi'")
    return parse_bytes(value)


def format_cpu(cores: Decimal) -> str:
    """Canonical CPU: whole cores as '2', anything else in millicores as '1500m'."""
    if cores % 1 == 0:
        return str(int(cores))
    return f"{int(cores * 1000)}m"


def format_bytes(size: Decimal) -> str:
    """Canonical size: the largest binary suffix that states it exactly ('4Gi', '1536Mi')."""
    whole = int(size)
    for suffix, factor in reversed(_BINARY.items()):
        if whole % factor == 0:
            return f"{whole // factor}{suffix}"
    return str(whole)
