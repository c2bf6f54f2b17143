"""Typed models of the tenant's WorkspaceSandbox and the platform's SandboxPlatform.

Models hold data and validation, never composition. They are frozen so render can't mutate its
inputs, and camelCase on the wire like the XRD and the input CRD.
"""

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from function.errors import FieldError, join_path

Manifest = dict[str, Any]
"""A whole Kubernetes object as plain JSON-like data."""

Observed = dict[str, Mapping[str, Any]]
"""Observed composed resources by composition-resource name: read-only, maybe lazy views."""


class Model(BaseModel):
    # camelCase like the XRD, snake_case in Python; frozen so render can't mutate its inputs.
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        frozen=True,
    )


M = TypeVar("M", bound=BaseModel)

# pydantic prefixes the messages of our own validators; the field path already says enough.
_PREFIXES = ("Value error, ", "Assertion failed, ")
_MESSAGES = {
    "extra_forbidden": "is not a known field; remove it or check its spelling",
    "missing": "is required",
}


def parse(model: type[M], data: object, root: str) -> M:
    """Validate `data` as `model`, or raise one FieldError for the first problem found."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        message = first["msg"]
        for prefix in _PREFIXES:
            message = message.removeprefix(prefix)
        message = _MESSAGES.get(first["type"], message)
        raise FieldError(join_path(root, first["loc"]), message) from None
