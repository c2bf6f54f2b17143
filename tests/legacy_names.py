"""The names sandboxes got before composed names carried a long hash, and collisions among them.

Sandboxes made then keep these names; the tests build collisions from them that the current
scheme must keep apart.
"""

import hashlib
import re

_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def legacy(*parts: str) -> str:
    """The parts joined by '-' if that is a DNS-1035 label of at most 63 characters, else a
    prefix and 8 hex digits of SHA-256 (verbatim from that release)."""
    full = "-".join(parts)
    if len(full) <= 63 and _DNS_1035.fullmatch(full):
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    cleaned = re.sub(r"[^a-z0-9-]+", "-", full.lower())
    prefix = cleaned[:54].strip("-")
    if not prefix or not prefix[0].isalpha():
        prefix = f"ws-{prefix}"[:54].rstrip("-")
    return f"{prefix}-{digest}"


def legacy_hash_collision() -> tuple[str, str]:
    """Two long XR names with one legacy name: 32 bits fall to a birthday search in a second."""
    seen: dict[str, str] = {}
    i = 0
    while True:
        xr = f"{'p' * 60}-{i}"
        name = legacy(xr)
        if name in seen:
            return seen[name], xr
        seen[name] = xr
        i += 1
