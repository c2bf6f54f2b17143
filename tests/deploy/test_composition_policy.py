"""The admission policy that keeps the Composition the platform's choice."""

import copy
from typing import Any

import pytest

from tests.deploy.admission import (
    COMPOSITION_MESSAGE,
    COMPOSITION_POLICY,
    COMPOSITION_REVISION,
    PLATFORM_CHOICE,
    sandbox_request,
    verdict,
)
from tests.deploy.install import CROSSPLANE, TENANT, documents, find, xrd
from tests.schemas import validate_xrd_object
from tests.support import (
    NAMESPACE,
)


def test_the_policy_matches_the_platform_composition_and_update_policy() -> None:
    (composition,) = (d for d in documents() if d["kind"] == "Composition")
    assert xrd()["spec"]["defaultCompositionRef"]["name"] == composition["metadata"]["name"]
    assert composition["metadata"]["name"] == "workspacesandbox"
    assert xrd()["spec"]["defaultCompositionUpdatePolicy"] == "Automatic"


def test_the_policy_denies_tenant_writes_of_workspacesandboxes() -> None:
    policy = find("ValidatingAdmissionPolicy", COMPOSITION_POLICY)
    binding = find("ValidatingAdmissionPolicyBinding", COMPOSITION_POLICY)
    assert binding["spec"] == {"policyName": COMPOSITION_POLICY, "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    spec = xrd()["spec"]
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [spec["group"]],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": [spec["names"]["plural"]],
        }
    ]


def admission(
    crossplane: dict[str, Any] | None,
    *,
    username: str = TENANT,
    old: dict[str, Any] | None = None,
) -> str | list[str]:
    """The policy's verdict on a WorkspaceSandbox with this spec.crossplane.

    Returns "exempt" when a match condition leaves the request alone, otherwise the messages
    of the failing validations ([] is admitted). The object is what the API server hands to
    admission: defaulted (the XRD's defaultCompositionUpdatePolicy fills compositionUpdatePolicy
    in once spec.crossplane exists) and valid against the XR's schema.
    """
    obj: dict[str, Any] = {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": "alice-api", "namespace": NAMESPACE},
        "spec": {"image": "ubuntu-24.04"},
    }
    if crossplane is not None:
        obj["spec"]["crossplane"] = {"compositionUpdatePolicy": "Automatic", **crossplane}
    assert validate_xrd_object(xrd(), obj) == []
    old_obj = None
    if old is not None:
        old_obj = copy.deepcopy(obj)
        old_obj["spec"]["crossplane"] = {"compositionUpdatePolicy": "Automatic", **old}
    request = sandbox_request("CREATE" if old is None else "UPDATE", username)
    return verdict(COMPOSITION_POLICY, request, obj, old_obj)


@pytest.mark.parametrize(
    ("crossplane", "username", "old", "want"),
    [
        pytest.param(None, TENANT, None, [], id="create-without-spec-crossplane"),
        pytest.param({}, TENANT, None, [], id="create-with-the-defaulted-update-policy-only"),
        pytest.param(
            {"compositionRef": {"name": "workspacesandbox"}},
            TENANT,
            None,
            [],
            id="create-naming-the-platform-composition",
        ),
        pytest.param(
            {"compositionRef": {"name": "open-sandbox"}},
            TENANT,
            None,
            [COMPOSITION_MESSAGE.format("compositionRef")],
            id="create-naming-another-composition",
        ),
        pytest.param(
            {"compositionSelector": {"matchLabels": {"tier": "open"}}},
            TENANT,
            None,
            [COMPOSITION_MESSAGE.format("compositionSelector")],
            id="create-selecting-a-composition",
        ),
        pytest.param(
            {"compositionUpdatePolicy": "Manual"},
            TENANT,
            None,
            [COMPOSITION_MESSAGE.format("compositionUpdatePolicy")],
            id="create-pinning-a-revision-manually",
        ),
        pytest.param(
            {"compositionRevisionSelector": {"matchLabels": {"channel": "old"}}},
            TENANT,
            None,
            [COMPOSITION_MESSAGE.format("compositionRevisionSelector")],
            id="create-selecting-a-revision",
        ),
        pytest.param(
            {"compositionRevisionRef": {"name": "workspacesandbox-open-3f9c2a1"}},
            TENANT,
            None,
            [COMPOSITION_MESSAGE.format("compositionRevisionRef")],
            id="create-naming-a-revision-of-another-composition",
        ),
        pytest.param(
            {
                "compositionRef": {"name": "open-sandbox"},
                "compositionSelector": {"matchLabels": {"tier": "open"}},
                "compositionUpdatePolicy": "Manual",
            },
            TENANT,
            None,
            [
                COMPOSITION_MESSAGE.format(f)
                for f in ("compositionRef", "compositionSelector", "compositionUpdatePolicy")
            ],
            id="create-reports-every-forbidden-field",
        ),
        pytest.param(
            {
                **PLATFORM_CHOICE,
                "resourceRefs": [{"apiVersion": "v1", "kind": "Service", "name": "alice-api"}],
            },
            TENANT,
            PLATFORM_CHOICE,
            [],
            id="update-applying-back-what-crossplane-wrote",
        ),
        pytest.param(
            {
                "compositionRef": {"name": "open-sandbox"},
                "compositionRevisionRef": {"name": COMPOSITION_REVISION},
            },
            TENANT,
            PLATFORM_CHOICE,
            [COMPOSITION_MESSAGE.format("compositionRef")],
            id="update-switching-to-another-composition",
        ),
        pytest.param(
            {**PLATFORM_CHOICE, "compositionUpdatePolicy": "Manual"},
            TENANT,
            PLATFORM_CHOICE,
            [COMPOSITION_MESSAGE.format("compositionUpdatePolicy")],
            id="update-freezing-the-revision",
        ),
        pytest.param(
            {"compositionRef": {"name": "anything"}, "compositionUpdatePolicy": "Manual"},
            CROSSPLANE,
            None,
            "exempt",
            id="crossplane-itself-is-never-checked",
        ),
        pytest.param(
            PLATFORM_CHOICE,
            CROSSPLANE,
            {},
            "exempt",
            id="crossplane-selecting-the-default-composition",
        ),
        pytest.param(
            {"compositionRef": {"name": "open-sandbox"}},
            "system:serviceaccount:crossplane-system:crossplane-rbac-manager",
            None,
            [COMPOSITION_MESSAGE.format("compositionRef")],
            id="other-crossplane-system-accounts-are-checked",
        ),
        pytest.param(
            {"compositionRef": {"name": "open-sandbox"}},
            "system:serviceaccount:tenant-acme:crossplane",
            None,
            [COMPOSITION_MESSAGE.format("compositionRef")],
            id="a-tenant-account-named-crossplane-is-checked",
        ),
    ],
)
def test_admission_policy(
    crossplane: dict[str, Any] | None,
    username: str,
    old: dict[str, Any] | None,
    want: str | list[str],
) -> None:
    assert admission(crossplane, username=username, old=old) == want


def test_the_exempt_account_is_the_one_granted_cloning() -> None:
    (condition,) = find("ValidatingAdmissionPolicy", COMPOSITION_POLICY)["spec"]["matchConditions"]
    assert f"'{CROSSPLANE}'" in condition["expression"]
