"""What the function composes, accepted by the real API server: every object of every golden
render, and every manifest a provider-kubernetes Object carries, created with `dryRun=All`
against the upstream CRDs (their OpenAPI schemas and CEL rules) and the built-in kinds' own
validation, which no schema file holds."""

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.control_plane.replay import clean
from tests.control_plane.server import ControlPlane
from tests.support import ROOT

pytestmark = pytest.mark.control_plane

GOLDEN = sorted((ROOT / "tests" / "golden").rglob("*.yaml"))
NOT_SERVED = {("apps.cozystack.io", "ComputePlane")}
"""Kinds no API server here serves: Cozystack's aggregated application API, not a CRD."""


def composed(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A rendered object, and the manifest inside it if it is a provider-kubernetes Object.
    Owner references get a UID, as Crossplane gives them from the XR it observes (the
    renders' XR has none)."""
    yield clean(document)
    if document["kind"] == "Object":
        yield document["spec"]["forProvider"]["manifest"]


def objects() -> list[dict[str, Any]]:
    out = []
    for path in GOLDEN:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") not in {"WorkspaceSandbox", "Result"}:
                out += composed(doc)
    return out


def ident(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']}/{meta.get('namespace', '')}/{meta['name']}"


def test_every_composed_object_is_valid_on_the_server(bare: ControlPlane) -> None:
    served = bare.resources()
    refused, unserved = [], set()
    namespaces: set[str] = set()
    for obj in objects():
        group, _, version = obj["apiVersion"].rpartition("/")
        if (group, obj["kind"]) in NOT_SERVED:
            unserved.add((group, obj["kind"]))
            continue
        resource, namespaced = served[group, version, obj["kind"]]
        namespace = obj["metadata"].get("namespace", "")
        if namespaced and namespace not in namespaces:
            status, answer = bare.request(
                "POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}
            )
            assert status in {201, 409}, answer
            namespaces.add(namespace)
        base = f"/apis/{group}/{version}" if group else f"/api/{version}"
        where = f"/namespaces/{namespace}" if namespaced else ""
        status, answer = bare.request("POST", f"{base}{where}/{resource}", obj, query="dryRun=All")
        # 409: the same object in two goldens, or a namespace made above; still validated once.
        if status not in {201, 409}:
            refused.append(f"{ident(obj)}: {status} {answer.get('message')}")
    assert refused == [], "\n".join(refused)
    assert unserved == NOT_SERVED
