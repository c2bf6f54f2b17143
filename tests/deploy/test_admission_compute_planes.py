"""deploy/admission-compute-planes.yaml: a dedicated plane's Object makes one ComputePlane, in
its own namespace, and only Crossplane writes it."""

from typing import Any

import pytest

from function.render import render
from tests.deploy.admission import provider_request, verdict
from tests.deploy.install import (
    CROSSPLANE,
    HOST_CONFIG,
    NAMESPACES_CONFIG,
    PLANES_CONFIG,
    PROVIDER,
    TENANT,
    TENANT_NAMESPACE,
    documents,
    find,
    grants,
)
from tests.deploy.objects import READING, finalized, writers
from tests.schemas import validate
from tests.support import NAMESPACE, NOW, PLATFORM, workspace

POLICY = "workspace-sandbox-planes-objects"
MESSAGES = {
    "writer": "only Crossplane writes an Object that uses workspace-sandbox-planes: change the "
    "WorkspaceSandbox instead",
    "kind": "an Object using workspace-sandbox-planes wraps only a ComputePlane (apps.cozystack.io)",
    "where": "an Object using workspace-sandbox-planes places its ComputePlane in its own "
    "namespace: set metadata.namespace to the Object's",
    "reads": "an Object using workspace-sandbox-planes reads nothing else: remove "
    "spec.references, spec.connectionDetails and spec.writeConnectionSecretToRef",
}
PLANES_REF = {"kind": "ClusterProviderConfig", "name": PLANES_CONFIG}


def composed() -> dict[str, Any]:
    """The dedicated-plane preset's plane Object as the function renders it, as admitted."""
    out = render(workspace({"preset": "dedicated-plane"}), PLATFORM, {}, NOW)
    obj = out.resources["compute-plane"]
    spec = {"managementPolicies": ["*"], "watch": False, **obj["spec"]}
    return {**obj, "metadata": {**obj["metadata"], "namespace": NAMESPACE}, "spec": spec}


PLANE_OBJECT = composed()
PLANE = PLANE_OBJECT["spec"]["forProvider"]["manifest"]


def with_manifest(manifest: dict[str, Any], **spec: Any) -> dict[str, Any]:
    body = {**PLANE_OBJECT["spec"], "forProvider": {"manifest": manifest}, **spec}
    return {**PLANE_OBJECT, "spec": body}


def planes_verdict(
    new: dict[str, Any],
    old: dict[str, Any] | None = None,
    username: str = CROSSPLANE,
    policy: str = POLICY,
) -> str | list[str]:
    assert validate(new) == []
    operation = "CREATE" if old is None else "UPDATE"
    meta = new["metadata"]
    sent = {
        **provider_request(operation, username, namespace=meta["namespace"]),
        "name": meta["name"],
    }
    return verdict(policy, sent, new, old, TENANT_NAMESPACE)


def test_the_composed_plane_object_is_admitted() -> None:
    assert PLANE_OBJECT["spec"]["providerConfigRef"] == PLANES_REF
    assert planes_verdict(PLANE_OBJECT) == []


def meta(namespace: str | None) -> dict[str, Any]:
    return {"name": PLANE["metadata"]["name"]} | ({"namespace": namespace} if namespace else {})


@pytest.mark.parametrize(
    ("manifest", "want"),
    [
        pytest.param(
            {**PLANE, "metadata": meta("tenant-other")}, ["where"], id="another-tenants-namespace"
        ),
        pytest.param({**PLANE, "metadata": meta("cozy-system")}, ["where"], id="a-platform-one"),
        pytest.param({**PLANE, "metadata": meta(None)}, ["where"], id="no-namespace"),
        pytest.param(
            {**PLANE, "apiVersion": "apps.cozystack.io.evil/v1alpha1"},
            ["kind"],
            id="group-prefixes-match-whole",
        ),
        pytest.param({**PLANE, "kind": "Kubernetes"}, ["kind"], id="another-cozystack-application"),
        pytest.param(
            {"apiVersion": "v1", "kind": "Secret", "metadata": meta(NAMESPACE)},
            ["kind"],
            id="a-secret",
        ),
        pytest.param(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": meta(NAMESPACE),
            },
            ["kind"],
            id="a-rolebinding",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sandbox-x"}},
            ["kind", "where"],
            id="a-namespace",
        ),
    ],
)
def test_an_object_wraps_one_computeplane_in_its_own_namespace(
    manifest: dict[str, Any], want: list[str]
) -> None:
    assert planes_verdict(with_manifest(manifest)) == [MESSAGES[k] for k in want]


@pytest.mark.parametrize("spec", READING)
def test_an_object_reads_nothing_with_the_providers_identity(spec: dict[str, Any]) -> None:
    assert planes_verdict(with_manifest(PLANE, **spec)) == [MESSAGES["reads"]]


BIGGER = with_manifest(
    {
        **PLANE,
        "spec": {"nodeGroups": {"md0": {**PLANE["spec"]["nodeGroups"]["md0"], "maxReplicas": 9}}},
    }
)
ON_THE_HOST_CONFIG = with_manifest(
    PLANE, providerConfigRef={"kind": "ClusterProviderConfig", "name": HOST_CONFIG}
)


@pytest.mark.parametrize(
    ("username", "new", "old", "refused"),
    writers(
        PLANE_OBJECT, BIGGER, finalized(PLANE_OBJECT, PLANE["metadata"]["name"]), ON_THE_HOST_CONFIG
    ),
)
def test_only_crossplane_writes_an_objects_spec(
    username: str, new: dict[str, Any], old: dict[str, Any] | None, refused: bool
) -> None:
    assert planes_verdict(new, old, username) == ([MESSAGES["writer"]] if refused else [])


def test_objects_of_other_configs_are_not_this_policys() -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": meta(NAMESPACE)}
    for name in (HOST_CONFIG, NAMESPACES_CONFIG):
        ref = {"kind": "ClusterProviderConfig", "name": name}
        assert planes_verdict(with_manifest(secret, providerConfigRef=ref)) == "exempt"
    namespaced = {"kind": "ProviderConfig", "name": PLANES_CONFIG}
    assert planes_verdict(with_manifest(secret, providerConfigRef=namespaced)) == "exempt"


def test_tenants_are_refused_these_objects_by_the_writers_policy_already() -> None:
    got = planes_verdict(PLANE_OBJECT, None, TENANT, "provider-kubernetes-writers")
    refused = (
        "only Crossplane and provider-kubernetes write provider-kubernetes objects and provider "
        "configs here: they act with a ComputePlane's admin credential or the provider's own "
        "identity"
    )
    assert got == [refused]


def test_the_policy_is_bound_to_deny_fails_closed_and_names_the_shipped_config() -> None:
    assert find("ValidatingAdmissionPolicyBinding", POLICY)["spec"] == {
        "policyName": POLICY,
        "validationActions": ["Deny"],
    }
    policy = find("ValidatingAdmissionPolicy", POLICY)["spec"]
    assert policy["failurePolicy"] == "Fail"
    assert f"'{PLANES_CONFIG}'" in str(policy)
    assert find("ClusterProviderConfig", PLANES_CONFIG)["spec"] == {
        "credentials": {"source": "InjectedIdentity"}
    }
    assert PLATFORM.compute_planes.cluster_provider_config == PLANES_CONFIG


def test_the_provider_may_write_computeplanes_and_crossplane_only_read_them() -> None:
    role = find("ClusterRole", "function-workspace-sandbox:compute-planes")
    assert role["rules"] == [
        {
            "apiGroups": ["apps.cozystack.io"],
            "resources": ["computeplanes"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        }
    ]
    (binding,) = [
        d
        for d in documents()
        if d["kind"] in {"RoleBinding", "ClusterRoleBinding"}
        and d["roleRef"]["name"] == role["metadata"]["name"]
    ]
    (subject,) = binding["subjects"]
    assert f"system:serviceaccount:{subject['namespace']}:{subject['name']}" == PROVIDER
    crossplane = find("ClusterRole", "function-workspace-sandbox:crossplane")
    (reads,) = [r for r in crossplane["rules"] if "computeplanes" in r["resources"]]
    assert reads["verbs"] == ["get", "list", "watch"]
    writers = [
        d["metadata"]["name"]
        for d in documents()
        if d["kind"] == "ClusterRole"
        and ("apps.cozystack.io", "computeplanes") in grants(d)
        and any("create" in r["verbs"] for r in d["rules"] if "computeplanes" in r["resources"])
    ]
    assert writers == ["function-workspace-sandbox:compute-planes"]
