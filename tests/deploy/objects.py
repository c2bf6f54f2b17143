"""The cases every admission policy over provider-kubernetes Objects of one ClusterProviderConfig
is asked: what such an Object may read, and who may write it. Each policy's test module brings
its own Object; the cases are the same, so that no policy is asked less than another."""

from typing import Any

import pytest

from tests.deploy.install import COLLECTOR, CONTROLLER_MANAGER, CROSSPLANE, PROVIDER, TENANT

ADMIN = "cluster-admin@acme.example"

READING = [
    pytest.param(
        {"references": [{"patchesFrom": {
            "apiVersion": "v1", "kind": "Secret", "name": "x", "fieldPath": "data",
        }}]},
        id="references",
    ),
    pytest.param(
        {"connectionDetails": [{"apiVersion": "v1", "kind": "Secret", "name": "x"}]},
        id="connection-details",
    ),
    pytest.param({"writeConnectionSecretToRef": {"name": "x"}}, id="connection-secret"),
]  # fmt: skip
"""`spec` fields through which an Object would read with the provider's identity."""


def finalized(obj: dict[str, Any], external_name: str) -> dict[str, Any]:
    """`obj` as provider-kubernetes keeps it once it has taken it up."""
    meta = {
        **obj["metadata"],
        "finalizers": ["finalizer.managedresource.crossplane.io"],
        "annotations": {"crossplane.io/external-name": external_name},
    }
    return {**obj, "metadata": meta}


def writers(
    composed: dict[str, Any],
    changed: dict[str, Any],
    finalized: dict[str, Any],
    elsewhere: dict[str, Any],
) -> list[Any]:
    """(username, new, old, refused) for an Object as Crossplane composes it, with its spec
    `changed`, `finalized` by the provider, and moved `elsewhere` (onto another config).
    Crossplane alone writes the spec; the provider, the garbage collector and the controller
    manager touch metadata only; a tenant and an administrator write nothing."""
    return [
        pytest.param(CROSSPLANE, composed, None, False, id="crossplane-composes"),
        pytest.param(CROSSPLANE, changed, composed, False, id="crossplane-changes-the-spec"),
        pytest.param(PROVIDER, finalized, composed, False, id="provider-adds-its-finalizer"),
        pytest.param(COLLECTOR, composed, finalized, False, id="collector-removes-finalizers"),
        pytest.param(CONTROLLER_MANAGER, composed, finalized, False, id="controller-manager"),
        pytest.param(PROVIDER, changed, composed, True, id="provider-changes-spec"),
        pytest.param(COLLECTOR, changed, composed, True, id="collector-changes-spec"),
        pytest.param(PROVIDER, composed, None, True, id="provider-creates"),
        pytest.param(COLLECTOR, composed, None, True, id="collector-creates"),
        pytest.param(ADMIN, composed, None, True, id="an-administrator-creates"),
        pytest.param(TENANT, composed, None, True, id="tenant-creates"),
        pytest.param(TENANT, finalized, composed, True, id="tenant-annotates"),
        pytest.param(TENANT, changed, composed, True, id="tenant-changes-the-spec"),
        pytest.param(TENANT, elsewhere, composed, True, id="tenant-moves-it-off-the-config"),
        pytest.param(TENANT, composed, elsewhere, True, id="tenant-moves-it-onto-the-config"),
    ]
