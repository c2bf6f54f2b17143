"""The words every part of the validator uses: JSON, a schema, the Kubernetes release."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

JSON = Any
Schema = Mapping[str, Any]

# Cozystack v1.6.2 installs these releases; the newer folders are there for comparison only.
KUBERNETES_VERSION: Final = (1, 33)

DEFS_URI: Final = "https://kubernetes.io/api/_definitions.json"
OBJECT_META: Final[Mapping[str, str]] = {
    "$ref": f"{DEFS_URI}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
}
ROOT = "<root>"


class UnsupportedCELError(Exception):
    """A CEL rule uses something this module cannot evaluate faithfully."""

    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(f"cannot evaluate CEL rule {rule!r}: {reason}")
        self.rule = rule
        self.reason = reason
