"""Reading observed composed resources without trusting their shape."""

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from function.model import Manifest, Observed
from function.model.quantity import parse_bytes


def dig(obj: Any, *path: str) -> Any:
    """obj[path[0]][path[1]]..., or None where anything on the way is missing or not a map."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    for c in dig(obj, "status", "conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == kind:
            return c
    return None


def requested_storage(obj: Any, *path: str) -> Decimal | None:
    """The storage a claim-like spec at `path` asks for; None where it asks for none it can say."""
    have = dig(obj, *path, "resources", "requests", "storage")
    try:
        return parse_bytes(have) if isinstance(have, str) else None
    except ValueError:
        return None


def keep_observed_spec(manifest: Manifest, key: str, observed: Observed) -> Manifest:
    """Keep an existing object's spec: for kinds whose spec the API server won't let us change.

    A DataVolume's and a VolumeSnapshot's spec are immutable once created. Re-emitting the
    observed spec means a later spec or preset change can never make Crossplane try (and fail)
    to rewrite them, and a snapshot's source can never move.
    """
    spec = dig(observed.get(key), "spec")
    if not isinstance(spec, Mapping) or not spec:
        return manifest
    return {**manifest, "spec": spec}
