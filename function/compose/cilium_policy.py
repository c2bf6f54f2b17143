"""Cilium's two policy kinds, built in one place: a CiliumNetworkPolicy and its clusterwide twin.

Every policy the function composes or models (a sandbox's own, the platform guard, the plane's,
Cozystack's baseline) is one of these; the rules inside are their modules' concern.
"""

from collections.abc import Mapping
from typing import Any, Final

from function.model import Manifest

API_VERSION: Final = "cilium.io/v2"
CNP: Final = "CiliumNetworkPolicy"
CCNP: Final = "CiliumClusterwideNetworkPolicy"


def _metadata(name: str, namespace: str | None, labels: Mapping[str, str] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels is not None:
        metadata["labels"] = dict(labels)
    return metadata


def cnp(
    name: str,
    spec: dict[str, Any],
    *,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Manifest:
    """A CiliumNetworkPolicy; a composed one leaves its namespace to the XR's."""
    return {
        "apiVersion": API_VERSION,
        "kind": CNP,
        "metadata": _metadata(name, namespace, labels),
        "spec": spec,
    }


def ccnp(
    name: str,
    spec: dict[str, Any],
    *specs: dict[str, Any],
    labels: Mapping[str, str] | None = None,
) -> Manifest:
    """A CiliumClusterwideNetworkPolicy: `spec`, then any further rule sets in `specs`."""
    manifest: Manifest = {
        "apiVersion": API_VERSION,
        "kind": CCNP,
        "metadata": _metadata(name, None, labels),
        "spec": spec,
    }
    if specs:
        manifest["specs"] = list(specs)
    return manifest
