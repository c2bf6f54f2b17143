"""The admission policy on the host identity: it only resizes a claim."""

from collections.abc import Mapping
from typing import Any

import pytest

from function.render import render
from tests.deploy.admission import provider_request, verdict
from tests.deploy.install import CROSSPLANE, HOST_CONFIG, PROVIDER, TENANT, find
from tests.schemas import validate
from tests.support import (
    NAMESPACE,
    NOW,
    PLATFORM,
    owned,
    workspace,
)

HOST_OBJECTS = "workspace-sandbox-host-objects"
HOST_MESSAGES = {
    "policies": "an Object using workspace-sandbox-host only observes and updates: set "
    "spec.managementPolicies to [Observe, Update]",
    "claim": "an Object using workspace-sandbox-host wraps a v1 PersistentVolumeClaim in the "
    "Object's own namespace, with metadata.namespace set",
    "fields": "an Object using workspace-sandbox-host sets only the claim's name, namespace and "
    "spec.resources.requests.storage",
    "reads": "an Object using workspace-sandbox-host reads nothing else: remove spec.references, "
    "spec.connectionDetails and spec.writeConnectionSecretToRef",
}
CLAIM = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "alice-api-workspace", "namespace": NAMESPACE},
    "spec": {"resources": {"requests": {"storage": "40Gi"}}},
}


def host_object(manifest: Mapping[str, Any] = CLAIM, **spec: Any) -> dict[str, Any]:
    """An Object through the host config, as the API server hands it to admission: defaulted."""
    return {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {"name": "alice-api-workspace-volume-size", "namespace": NAMESPACE},
        "spec": {
            "forProvider": {"manifest": manifest},
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": HOST_CONFIG},
            "managementPolicies": ["Observe", "Update"],
            "readiness": {"policy": "SuccessfulCreate"},
            "watch": False,
            **spec,
        },
    }


def host_verdict(obj: dict[str, Any], username: str = CROSSPLANE) -> str | list[str]:
    assert validate(obj) == []
    meta = obj["metadata"]
    request = {
        **provider_request("CREATE", username, namespace=meta["namespace"]),
        "name": meta["name"],
    }
    return verdict(HOST_OBJECTS, request, obj)


def claim(**changes: Any) -> dict[str, Any]:
    return {**CLAIM, **changes}


@pytest.mark.parametrize(
    ("obj", "want"),
    [
        pytest.param(host_object(), [], id="grows-a-claim-in-its-own-namespace"),
        pytest.param(
            host_object(managementPolicies=["Update", "Observe"]), [], id="policies-in-any-order"
        ),
        pytest.param(
            host_object(
                providerConfigRef={"kind": "ProviderConfig", "name": "alice-api-plane-access"}
            ),
            "exempt",
            id="a-planes-provider-config-is-not-the-host",
        ),
        pytest.param(
            host_object(providerConfigRef={"kind": "ProviderConfig", "name": HOST_CONFIG}),
            "exempt",
            id="a-namespaced-config-with-the-same-name-is-not-the-host",
        ),
        pytest.param(
            host_object(providerConfigRef={"kind": "ClusterProviderConfig", "name": "default"}),
            "exempt",
            id="another-cluster-config",
        ),
        pytest.param(
            host_object(managementPolicies=["*"]),
            [HOST_MESSAGES["policies"]],
            id="the-crds-default-may-create-and-delete",
        ),
        pytest.param(
            host_object(managementPolicies=["Observe", "Create", "Update"]),
            [HOST_MESSAGES["policies"]],
            id="no-create",
        ),
        pytest.param(
            host_object(managementPolicies=["Observe", "Update", "Delete"]),
            [HOST_MESSAGES["policies"]],
            id="no-delete",
        ),
        pytest.param(
            host_object(managementPolicies=["Observe"]),
            [HOST_MESSAGES["policies"]],
            id="observe-only-is-still-a-read",
        ),
        pytest.param(
            host_object(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "cozystack-admin", "namespace": "kube-system"},
                }
            ),
            [HOST_MESSAGES["claim"], HOST_MESSAGES["fields"]],
            id="reading-a-secret",
        ),
        pytest.param(
            host_object(claim(metadata={"name": "etcd-data", "namespace": "cozy-etcd"})),
            [HOST_MESSAGES["claim"]],
            id="a-claim-in-another-namespace",
        ),
        pytest.param(
            host_object(claim(metadata={"name": "alice-api-workspace"})),
            [HOST_MESSAGES["claim"]],
            id="a-claim-without-a-namespace",
        ),
        pytest.param(
            host_object(claim(apiVersion="v2")), [HOST_MESSAGES["claim"]], id="another-version"
        ),
        pytest.param(
            host_object(
                claim(
                    metadata={
                        "name": "alice-api-workspace",
                        "namespace": NAMESPACE,
                        "labels": {"sandbox.cozystack.io/workspace": "bob-api"},
                    }
                )
            ),
            [HOST_MESSAGES["fields"]],
            id="labels",
        ),
        pytest.param(
            host_object(claim(spec={"volumeName": "pvc-of-another-tenant"})),
            [HOST_MESSAGES["fields"]],
            id="another-spec-field",
        ),
        pytest.param(
            host_object(claim(spec={"resources": {"limits": {"storage": "40Gi"}}})),
            [HOST_MESSAGES["fields"]],
            id="limits",
        ),
        pytest.param(
            host_object(claim(spec={"resources": {"requests": {"storage": "40Gi", "cpu": "1"}}})),
            [HOST_MESSAGES["fields"]],
            id="another-request",
        ),
        pytest.param(
            host_object({k: v for k, v in CLAIM.items() if k != "spec"}),
            [HOST_MESSAGES["fields"]],
            id="no-spec",
        ),
        pytest.param(
            host_object(claim(status={"phase": "Lost"})),
            [HOST_MESSAGES["fields"]],
            id="status",
        ),
        pytest.param(
            host_object(
                references=[
                    {
                        "patchesFrom": {
                            "apiVersion": "v1",
                            "kind": "Secret",
                            "name": "cozystack-admin",
                            "namespace": "kube-system",
                            "fieldPath": "data",
                        },
                        "toFieldPath": "metadata.annotations",
                    }
                ]
            ),
            [HOST_MESSAGES["reads"]],
            id="patching-from-another-namespace",
        ),
        pytest.param(
            host_object(
                connectionDetails=[
                    {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "name": "cozystack-admin",
                        "namespace": "kube-system",
                        "fieldPath": "data.token",
                        "toConnectionSecretKey": "token",
                    }
                ],
                writeConnectionSecretToRef={"name": "loot"},
            ),
            [HOST_MESSAGES["reads"]],
            id="copying-a-secret-out",
        ),
        pytest.param(
            host_object({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}),
            [HOST_MESSAGES["claim"], HOST_MESSAGES["fields"]],
            id="every-failing-rule-is-reported",
        ),
    ],
)
def test_the_host_identity_only_resizes_a_claim(obj: dict[str, Any], want: str | list[str]) -> None:
    assert host_verdict(obj) == want


@pytest.mark.parametrize(
    "username", [CROSSPLANE, PROVIDER, TENANT], ids=["crossplane", "provider", "tenant"]
)
def test_the_host_policy_checks_every_writer(username: str) -> None:
    assert host_verdict(host_object(managementPolicies=["*"]), username) == [
        HOST_MESSAGES["policies"]
    ]


def test_the_functions_disk_growth_passes_the_host_policy() -> None:
    ws = workspace({"resources": {"disk": "20Gi"}})
    disk = render(ws, PLATFORM, {}, NOW).resources["workspace-volume"]
    made = owned({"workspace-volume": {**disk, "status": {"phase": "Succeeded"}}})
    grown = workspace({"resources": {"disk": "40Gi"}})
    objects = [
        m
        for m in render(grown, PLATFORM, made, NOW).resources.values()
        if m["kind"] == "Object" and m["spec"]["providerConfigRef"]["name"] == HOST_CONFIG
    ]
    assert len(objects) == 1
    # Crossplane puts a namespaced XR's composed resources in the XR's namespace.
    (obj,) = ({**o, "metadata": {**o["metadata"], "namespace": NAMESPACE}} for o in objects)
    assert host_verdict(obj) == []


def test_the_host_policy_guards_the_shipped_host_config_everywhere() -> None:
    assert find("ValidatingAdmissionPolicyBinding", HOST_OBJECTS)["spec"] == {
        "policyName": HOST_OBJECTS,
        "validationActions": ["Deny"],
    }
    spec = find("ValidatingAdmissionPolicy", HOST_OBJECTS)["spec"]
    assert spec["failurePolicy"] == "Fail"
    # No namespaceSelector and no exempt account: Crossplane's writes are checked too.
    assert spec["matchConstraints"] == {
        "resourceRules": [
            {
                "apiGroups": ["kubernetes.m.crossplane.io"],
                "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["objects"],
            }
        ]
    }
    (condition,) = spec["matchConditions"]
    assert (
        f"'{find('ClusterProviderConfig', HOST_CONFIG)['metadata']['name']}'"
        in (condition["expression"])
    )
