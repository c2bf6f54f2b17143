"""provider-kubernetes in deploy/: a pinned release, its identity and what it may do."""

from tests.deploy.install import (
    HOST_CONFIG,
    NAMESPACES_CONFIG,
    PLANES_CONFIG,
    PROVIDER,
    PROVIDER_GROUPS,
    documents,
    find,
    grants,
    provider_account,
)
from tests.support import (
    platform_input,
)


def test_provider_kubernetes_is_a_pinned_release_serving_the_namespaced_apis() -> None:
    provider = find("Provider", "provider-kubernetes")
    config = find("DeploymentRuntimeConfig", "provider-kubernetes")
    assert provider["spec"]["runtimeConfigRef"] == {
        "apiVersion": config["apiVersion"],
        "kind": config["kind"],
        "name": config["metadata"]["name"],
    }
    image, _, tag = provider["spec"]["package"].rpartition(":")
    assert image == "xpkg.crossplane.io/crossplane-contrib/provider-kubernetes"
    # A release tag, never a moving one; kubernetes.m.crossplane.io exists since v1.0.0.
    major, minor, patch = (int(n) for n in tag.removeprefix("v").split("."))
    assert tag == f"v{major}.{minor}.{patch}"
    assert major >= 1
    assert provider_account() == PROVIDER


def test_the_host_config_is_the_providers_own_identity_and_the_one_the_composition_names() -> None:
    config = find("ClusterProviderConfig", HOST_CONFIG)
    assert config["apiVersion"] == "kubernetes.m.crossplane.io/v1alpha1"
    assert config["spec"] == {"credentials": {"source": "InjectedIdentity"}}
    assert platform_input()["diskExpansion"] == {"clusterProviderConfig": HOST_CONFIG}
    shipped = {d["metadata"]["name"] for d in documents() if d["kind"] == "ClusterProviderConfig"}
    assert shipped == {HOST_CONFIG, NAMESPACES_CONFIG, PLANES_CONFIG}


def test_the_provider_may_read_and_resize_claims_only() -> None:
    role = find("ClusterRole", "function-workspace-sandbox:grow-workspace-disks")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["persistentvolumeclaims"],
            "verbs": ["get", "list", "watch", "patch", "update"],
        }
    ]
    bindings = [
        d
        for d in documents()
        if d["kind"] in {"RoleBinding", "ClusterRoleBinding"}
        and d["roleRef"]["name"] == role["metadata"]["name"]
    ]
    (binding,) = bindings
    assert binding["kind"] == "ClusterRoleBinding"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    (subject,) = binding["subjects"]
    assert subject["kind"] == "ServiceAccount"
    assert f"system:serviceaccount:{subject['namespace']}:{subject['name']}" == provider_account()


def test_only_crossplanes_role_grants_provider_kubernetes_kinds() -> None:
    granting = {
        d["metadata"]["name"]
        for d in documents()
        if d["kind"] in {"ClusterRole", "Role"}
        and any(set(rule["apiGroups"]) & PROVIDER_GROUPS for rule in d["rules"])
    }
    assert granting == {"function-workspace-sandbox:crossplane"}
    role = find("ClusterRole", "function-workspace-sandbox:crossplane")
    assert {r for g, r in grants(role) if g in PROVIDER_GROUPS} == {"objects", "providerconfigs"}
