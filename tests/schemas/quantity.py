"""Kubernetes resource quantities, as the API server reads them (apimachinery's resource package).

The one parser on the test side: the CEL quantity library and the Pod Security checks both ask
it, so a quantity they disagree on cannot exist.
"""

import re
from decimal import Decimal, InvalidOperation
from typing import Final

# ASCII digits only, as in apimachinery: `\d` would take any Unicode digit.
_QUANTITY: Final = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_SCALE: Final = {
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{
        s: Decimal(10) ** e
        for s, e in zip("numkMGTPE", (-9, -6, -3, 3, 6, 9, 12, 15, 18), strict=True)
    },
    "": Decimal(1),
}


def parse_quantity(text: str) -> Decimal | None:
    """The exact value of a quantity such as `500m`, `4Gi` or `1e3`; None if `text` is not one."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        return None
    suffix = match["suffix"] or ""
    # "E" and "Ei" are suffixes; any other letter e starts a decimal exponent such as e3.
    scale = _SCALE[suffix] if suffix in _SCALE else Decimal(10) ** int(suffix[1:])
    try:
        return Decimal(match["number"]) * scale
    except InvalidOperation:
        return None


def binary_fraction(text: str) -> bool:
    """Whether the API server keeps a quantity as a scaled decimal rather than an int64, so its
    CEL `isInteger()` is false whatever the value (apimachinery's ParseQuantity takes its fast
    int64 path only while the digits leave room for the scale): a binary suffix with a decimal
    point (`1.5Gi`, `1.0Gi`) or too many digits for its exponent (`1Pi`, `1Ei`, where `1Ti` and
    `1E` fit), and a decimal amount of more than 18 digits. `1.5G` is 1500000000, an int64.
    """
    match = _QUANTITY.fullmatch(text)
    if match is None:
        return False
    whole, _, fraction = match["number"].lstrip("+-").partition(".")
    whole = whole.lstrip("0")
    suffix = match["suffix"] or ""
    if suffix.endswith("i"):
        exponent = 10 * ("KMGTPE".index(suffix[0]) + 1)
        return bool(fraction) or 15 - len(whole) - exponent * 3 // 10 - 1 < 0
    return 18 - len(whole) - len(fraction) < 0
