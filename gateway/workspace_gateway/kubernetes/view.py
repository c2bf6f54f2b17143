"""What of a WorkspaceSandbox the watch cache keeps: the fields the gateway reads, within a budget.

Any tenant may write objects that carry the gateway's ID label, with up to 256 KiB of
annotations each (the API server's limit), and every replica's watch sees them all. So the
cache never keeps an object as listed: it keeps this view of it, and an object whose view is
still larger than MAX_VIEW_BYTES (its gateway annotations, in practice) is not kept at all.

This is the one place that knows which fields the gateway reads from cached objects
(`objects`: `ours`, `alive`, `sandbox_of`, `agent_url`, `is_paused`, `refusal_of`,
`handout_patch`, `is_member`, `is_ready`; `calls`: `_init`; `backend`: `reap`, `_stopping`;
`pools`: `made_at`, `stale`, `pooled_namespaces`). A new read of a cached field must be added
here, or it reads nothing. Objects read straight from the API server are whole; only the
cache's are views.

The gateway refuses a create whose own annotations would pass MAX_CALLER_NOTES_BYTES
(`objects`), so every sandbox it made has a view well within the budget: only
objects the gateway did not write (or that someone else inflated) are left out.
"""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# A sandbox's view is under 2 KiB without metadata, env vars and its two conditions' messages
# (2 KiB each at most); the caller's notes are the rest.
MAX_VIEW_BYTES = 32 * 1024
MAX_CALLER_NOTES_BYTES = 24 * 1024
MAX_CONDITION_MESSAGE = 2048  # refusal_of reads Crossplane's FATAL reason out of Synced's
CONDITION_TYPES = ("Ready", "Synced")  # the first of each: a type appears once on an object
SPEC_FIELDS = (
    "power",
    "lifetime",
    "image",
    "preset",
    "resources",
    "ports",
    "snapshots",
    "network",
)
METADATA_FIELDS = ("namespace", "name", "resourceVersion", "generation", "uid", "deletionTimestamp")
STATUS_FIELDS = ("phase", "endpoint", "snapshots")
CONDITION_FIELDS = ("type", "status", "observedGeneration", "message")


def notes_bytes(annotations: Mapping[str, str]) -> int:
    """Annotations' size as the API server counts it: keys and values, in bytes."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())


@dataclass(frozen=True)
class Projection:
    """The view: `labels` are the label keys kept, `prefix` the annotations' (all under it)."""

    labels: frozenset[str]
    prefix: str
    budget: int = MAX_VIEW_BYTES

    def __call__(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """The view of `obj`, or None when it is larger than the budget."""
        view = self.view(obj)
        size = len(json.dumps(view, separators=(",", ":"), ensure_ascii=False).encode())
        return view if size <= self.budget else None

    def view(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        metadata = _mapping(obj.get("metadata"))
        kept: dict[str, Any] = _some(metadata, METADATA_FIELDS)
        labels = _strings(metadata.get("labels"), lambda k: k in self.labels)
        notes = _strings(metadata.get("annotations"), lambda k: k.startswith(self.prefix))
        if labels:
            kept["labels"] = labels
        if notes:
            kept["annotations"] = notes
        out: dict[str, Any] = {"metadata": kept}
        spec = _some(_mapping(obj.get("spec")), SPEC_FIELDS)
        if spec:
            out["spec"] = spec
        status = _mapping(obj.get("status"))
        if status or "status" in obj:
            out["status"] = _status(status)
        return out


def _status(status: Mapping[str, Any]) -> dict[str, Any]:
    out = _some(status, STATUS_FIELDS)
    first: dict[str, dict[str, Any]] = {}
    for c in status.get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") in CONDITION_TYPES:
            first.setdefault(c["type"], _condition(c))
    if first:
        out["conditions"] = list(first.values())
    return out


def _condition(condition: Mapping[str, Any]) -> dict[str, Any]:
    out = _some(condition, CONDITION_FIELDS)
    if isinstance(out.get("message"), str):
        out["message"] = out["message"][:MAX_CONDITION_MESSAGE]
    return out


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _some(source: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {n: source[n] for n in names if n in source}


def _strings(value: object, wanted: Callable[[str], bool]) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {
        k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str) and wanted(k)
    }
