"""Defaults applied and non-nullable nulls pruned, as the API server does before validating."""

from __future__ import annotations

import copy
from collections.abc import Mapping

from tests.schemas.vocabulary import JSON, Schema


def apply_defaults(value: JSON, schema: Schema) -> JSON:
    """Apply schema defaults and prune non-nullable nulls in place, as the API server does."""
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for name, sub in properties.items():
            if name in value and value[name] is None and not sub.get("nullable"):
                if "default" in sub:
                    value[name] = copy.deepcopy(sub["default"])
                else:
                    del value[name]
            elif name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
        for name, child in value.items():
            sub = child_schema(schema, name)
            if sub is not None:
                apply_defaults(child, sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            apply_defaults(item, schema["items"])
    return value


def child_schema(schema: Schema, name: str) -> Schema | None:
    properties = schema.get("properties") or {}
    if name in properties:
        sub: Schema = properties[name]
        return sub
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None
