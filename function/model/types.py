"""Scalar field types as they arrive from a protobuf Struct.

Structs carry every number as a float, so a port written as 443 arrives as 443.0. Pydantic's lax
mode would also turn the string "443" into 443 and "yes" into True; the XRD rejects those, and so
do we, so that the function never accepts what the schema refuses.
"""

from decimal import Decimal
from typing import Annotated

from pydantic import BeforeValidator, Field, StrictBool

from function.model.quantity import parse_bytes, parse_cpu


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
