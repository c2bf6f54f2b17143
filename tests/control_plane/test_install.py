"""The shipped install on the real API server: every manifest accepted by server-side apply, the
admission policies' CEL type-checked by the server against the schemas it serves."""

import time
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.control_plane.install import Installed, kubectl
from tests.deploy.install import documents

pytestmark = pytest.mark.control_plane


def test_every_crd_is_served(installed: Installed) -> None:
    api = k8s.ApiextensionsV1Api(installed.plane.client())
    served = {c.metadata.name: c for c in api.list_custom_resource_definition().items}
    for name in installed.crds:
        conditions = {c.type: c.status for c in served[name].status.conditions}
        assert conditions.get("Established") == "True", name
        assert conditions.get("NamesAccepted") == "True", name


def test_every_shipped_object_is_stored_as_applied(installed: Installed) -> None:
    for doc in documents():
        meta = doc["metadata"]
        where = ["-n", meta["namespace"]] if meta.get("namespace") else []
        kind = f"{doc['kind']}.{doc['apiVersion'].rpartition('/')[0]}".rstrip(".")
        got = kubectl(installed.plane, "get", kind, meta["name"], *where, "-o", "name")
        assert got.stdout.strip(), (kind, meta["name"])


CHECKED_SECONDS = 30


def checked(policy: dict[str, Any]) -> bool:
    """Whether the controller manager has type-checked the policy's current generation."""
    status = policy.get("status") or {}
    return bool(status.get("observedGeneration") == policy["metadata"]["generation"])


def policies(installed: Installed) -> list[dict[str, Any]]:
    api = k8s.AdmissionregistrationV1Api(installed.plane.client())
    raw = api.api_client.sanitize_for_serialization(api.list_validating_admission_policy())
    return [p for p in raw["items"] if not p["metadata"]["name"].startswith("test-")]


def test_the_server_type_checks_every_admission_policy_clean(installed: Installed) -> None:
    # The server checks each expression against the schemas of the kinds the policy matches
    # (the upstream CRDs above), which cel-python cannot: a field that is not in the schema, or a
    # comparison of a string with a number, is a warning here and a refusal that never comes.
    shipped = {
        d["metadata"]["name"] for d in documents() if d["kind"] == "ValidatingAdmissionPolicy"
    }
    deadline = time.monotonic() + CHECKED_SECONDS
    found = policies(installed)
    while not all(checked(p) for p in found):
        assert time.monotonic() < deadline, "the policies were not type-checked"
        time.sleep(0.2)
        found = policies(installed)
    assert {p["metadata"]["name"] for p in found} >= shipped
    for policy in found:
        status = policy.get("status") or {}
        checking = status.get("typeChecking") or {}
        assert checking.get("expressionWarnings", []) == [], policy["metadata"]["name"]
        assert status.get("observedGeneration") == policy["metadata"]["generation"]
