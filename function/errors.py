"""The one error the render core raises: a value at a field path that can't be rendered.

The edge (fn.py) turns it into a single FATAL result. Crossplane then applies and deletes
nothing in that reconcile, which is what we want for bad input: a clear message, no half state.
"""

import re
from collections.abc import Iterable

# Field names print dotted; map keys that aren't plain names print in brackets.
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class FieldError(Exception):
    """A value at `path` can't be rendered. fn.py turns this into a FATAL result."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def join_path(root: str, loc: Iterable[str | int]) -> str:
    """Join a pydantic error location onto a root: ("a", 0, "b") -> "root.a[0].b".

    Map keys such as label keys or image names print in brackets: `nodeSelector[k8s.io/pool]`.
    pydantic marks an error in a key (rather than its value) with "[key]"; the message names
    the key, so the marker is dropped.
    """
    path = root
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(part, int) or not _PLAIN.fullmatch(part):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else part
    return path
