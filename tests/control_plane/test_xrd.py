"""The XRD served by real Crossplane as a CRD: its names on kubectl, and its CEL rules and
OpenAPI bounds refusing bad input on the real API server with the messages the docs promise
(the cases of tests/api/test_api_messages.py, which cel-python judges)."""

import shutil
from typing import Any

import pytest

from tests.api.test_api_messages import CASES, xr_with
from tests.control_plane.crossplane import XRD
from tests.control_plane.install import Installed, kubectl

pytestmark = pytest.mark.control_plane

NAMESPACE = "tenant-xrd"


@pytest.fixture(scope="module")
def served(crossplane: Installed) -> Installed:
    kubectl(crossplane.plane, "create", "namespace", NAMESPACE)
    return crossplane


def test_the_xrd_is_a_served_crd_kubectl_names(served: Installed) -> None:
    crd = kubectl(served.plane, "get", "crd", XRD, "-o", "jsonpath={.spec.versions[*].name}")
    assert crd.stdout.split() == ["v1alpha1"]
    # As a kubectl session that starts now sees them: the discovery kubectl cached while the
    # install was applied has no WorkspaceSandbox yet (it keeps a cache for minutes).
    shutil.rmtree(served.plane.root / "kubectl-cache", ignore_errors=True)
    for name in ("workspace-sandbox", "workspacesandboxes", "wss"):
        got = kubectl(served.plane, "get", name, "-n", NAMESPACE)
        assert "No resources found" in got.stderr, (name, got.stderr)


def refusals(answer: dict[str, Any]) -> list[str]:
    """The API server's refusal as "field: message" lines."""
    causes = answer.get("details", {}).get("causes", [])
    return [f"{c.get('field', '')}: {c.get('message', '')}" for c in causes]


@pytest.mark.parametrize(("path", "value", "message"), CASES)
def test_each_rule_refuses_with_its_plain_message_on_the_server(
    served: Installed, path: str, value: Any, message: str | None
) -> None:
    xr = xr_with(path, value)
    xr["metadata"]["namespace"] = NAMESPACE
    status, answer = served.plane.request(
        "POST",
        f"/apis/sandbox.cozystack.io/v1alpha1/namespaces/{NAMESPACE}/workspacesandboxes",
        xr,
        query="dryRun=All",
    )
    if message is None:
        assert status == 201, answer.get("message")
    else:
        assert status == 422, answer
        # The server quotes the value it refuses before the rule's message.
        (cause,) = refusals(answer)
        field, _, said = cause.partition(": ")
        assert field == f"spec.{path}"
        assert said.endswith(message), said
