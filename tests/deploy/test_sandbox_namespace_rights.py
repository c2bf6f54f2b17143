"""Who holds rights in a sandbox namespace: the platform's accounts only, never a tenant."""

from collections.abc import Mapping
from typing import Any

import pytest

from tests.deploy.admission import verdict
from tests.deploy.install import (
    ALL,
    DEPLOY,
    MARKER,
    NAMESPACES_CONFIG,
    documents,
    find,
    grants,
    provider_account,
)
from tests.support import NAMESPACE, load_stream

SANDBOX = "sandbox-alice-api-0123456789abcdefghijklmnop"
SANDBOX_NAMESPACE = {"kubernetes.io/metadata.name": SANDBOX, MARKER: NAMESPACE}
ROLE = "function-workspace-sandbox:sandbox-namespaces"
RBAC_GROUP = "rbac.authorization.k8s.io"


def shipped() -> list[dict[str, Any]]:
    """Everything deploy/ installs: the platform, and the gateway's own folder."""
    gateway = [d for p in sorted((DEPLOY / "gateway").glob("*.yaml")) for d in load_stream(p)]
    return [*documents(), *gateway]


def platform_account(subject: Mapping[str, str]) -> bool:
    """A ServiceAccount of the platform's own namespaces: Crossplane's, Kubernetes', Cozystack's
    (cozy-*, the gateway's included). Users and Groups are people, tenants among them."""
    namespace = subject.get("namespace", "")
    return subject["kind"] == "ServiceAccount" and (
        namespace in {"crossplane-system", "kube-system"} or namespace.startswith("cozy-")
    )


def reaches_sandbox_namespaces(binding: Mapping[str, Any]) -> bool:
    """A ClusterRoleBinding grants in every namespace; a RoleBinding in its own alone."""
    return binding["kind"] == "ClusterRoleBinding" or binding["metadata"]["namespace"].startswith(
        "sandbox-"
    )


def tenants_with_rights(bindings: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(binding, subject) of every non-platform subject a binding gives rights in a sandbox
    namespace."""
    return [
        (b["metadata"]["name"], s["name"])
        for b in bindings
        if reaches_sandbox_namespaces(b)
        for s in b.get("subjects", [])
        if not platform_account(s)
    ]


def bindings() -> list[dict[str, Any]]:
    return [d for d in shipped() if d["kind"] in {"RoleBinding", "ClusterRoleBinding"}]


def test_no_shipped_binding_gives_a_tenant_rights_in_a_sandbox_namespace() -> None:
    found = bindings()
    assert {b["kind"] for b in found} == {"RoleBinding", "ClusterRoleBinding"}
    assert tenants_with_rights(found) == []


def binding(kind: str, subject: dict[str, str], namespace: str = "") -> dict[str, Any]:
    meta = {"name": "planted", **({"namespace": namespace} if namespace else {})}
    return {"kind": kind, "metadata": meta, "subjects": [subject]}


@pytest.mark.parametrize(
    ("planted", "want"),
    [
        pytest.param(
            binding("ClusterRoleBinding", {"kind": "User", "name": "alice@acme.example"}),
            [("planted", "alice@acme.example")],
            id="a-cluster-binding-to-a-person",
        ),
        pytest.param(
            binding("ClusterRoleBinding", {"kind": "Group", "name": "system:authenticated"}),
            [("planted", "system:authenticated")],
            id="to-everyone",
        ),
        pytest.param(
            binding(
                "ClusterRoleBinding",
                {"kind": "ServiceAccount", "name": "default", "namespace": NAMESPACE},
            ),
            [("planted", "default")],
            id="to-a-tenants-account",
        ),
        pytest.param(
            binding("RoleBinding", {"kind": "User", "name": "alice@acme.example"}, SANDBOX),
            [("planted", "alice@acme.example")],
            id="a-binding-inside-a-sandbox-namespace",
        ),
        pytest.param(
            binding("RoleBinding", {"kind": "User", "name": "alice@acme.example"}, NAMESPACE),
            [],
            id="a-binding-in-the-tenants-namespace-stays-there",
        ),
        pytest.param(
            binding(
                "ClusterRoleBinding",
                {"kind": "ServiceAccount", "name": "crossplane", "namespace": "crossplane-system"},
            ),
            [],
            id="the-platforms-accounts",
        ),
    ],
)
def test_the_walk_finds_a_tenant_wherever_a_binding_puts_one(
    planted: dict[str, Any], want: list[tuple[str, str]]
) -> None:
    assert tenants_with_rights([*bindings(), planted]) == want


@pytest.mark.parametrize(
    "shipped_binding",
    [b for b in bindings() if b["kind"] == "RoleBinding"],
    ids=lambda b: f"{b['metadata']['namespace']}/{b['metadata']['name']}",
)
def test_no_shipped_role_binding_could_be_placed_in_a_sandbox_namespace(
    shipped_binding: dict[str, Any],
) -> None:
    # The one way a RoleBinding reaches a sandbox namespace is being created there: refused.
    moved = {**shipped_binding, "metadata": {**shipped_binding["metadata"], "namespace": SANDBOX}}
    request = {
        "operation": "CREATE",
        "userInfo": {"username": "cluster-admin@acme.example", "groups": ["system:masters"]},
        "kind": {"group": RBAC_GROUP, "version": "v1", "kind": "RoleBinding"},
        "resource": {"group": RBAC_GROUP, "version": "v1", "resource": "rolebindings"},
        "namespace": SANDBOX,
        "name": moved["metadata"]["name"],
    }
    got = verdict("sandbox-namespace-rbac", request, moved, None, SANDBOX_NAMESPACE)
    assert got == ["sandbox namespaces hold no Roles or RoleBindings: only the platform acts there"]


def tenant_roles() -> list[dict[str, Any]]:
    """The roles Cozystack folds into its tenant roles, which it binds in tenant namespaces."""
    return [
        d
        for d in shipped()
        if d["kind"] == "ClusterRole"
        and any(k.startswith("rbac.cozystack.io/") for k in d["metadata"].get("labels", {}))
    ]


def test_tenant_roles_can_neither_reach_nor_open_a_sandbox_namespace() -> None:
    roles = tenant_roles()
    assert {r["metadata"]["name"] for r in roles} == {
        d["metadata"]["name"] for d in load_stream(DEPLOY / "rbac-tenants.yaml")
    }
    for role in roles:
        granted = grants(role)
        # No grant of grants (bindings, roles), no namespaces to create or mark, no wildcards.
        assert not {g for g, _ in granted} & {RBAC_GROUP, "*"}, role["metadata"]["name"]
        assert not {r.partition("/")[0] for _, r in granted} & {"namespaces", "*"}
        verbs = {v for rule in role["rules"] for v in rule["verbs"]}
        assert not verbs & {"bind", "escalate", "impersonate", "*"}


CONTRACT = {
    ("", "resourcequotas"),
    ("", "limitranges"),
    ("", "serviceaccounts"),
    ("", "services"),
    ("", "persistentvolumeclaims"),
    ("cilium.io", "ciliumnetworkpolicies"),
    ("networking.k8s.io", "networkpolicies"),
    ("cdi.kubevirt.io", "datavolumes"),
    ("kubevirt.io", "virtualmachines"),
    ("agents.x-k8s.io", "sandboxes"),
    ("snapshot.storage.k8s.io", "volumesnapshots"),
}


def test_the_provider_may_manage_namespaces_and_what_a_sandbox_namespace_holds_only() -> None:
    role = find("ClusterRole", ROLE)
    assert grants(role) == CONTRACT | {("", "namespaces")}
    assert all(set(rule["verbs"]) == ALL for rule in role["rules"])
    assert all(rule.keys() == {"apiGroups", "resources", "verbs"} for rule in role["rules"])
    granting = [d for d in bindings() if d["roleRef"]["name"] == ROLE]
    assert [b["kind"] for b in granting] == ["ClusterRoleBinding"]
    ((subject,),) = (b["subjects"] for b in granting)
    assert f"system:serviceaccount:{subject['namespace']}:{subject['name']}" == provider_account()


def test_the_sandbox_namespaces_config_is_the_providers_own_identity_synced_after_it() -> None:
    config = find("ClusterProviderConfig", NAMESPACES_CONFIG)
    host = find("ClusterProviderConfig", "workspace-sandbox-host")
    assert config["apiVersion"] == "kubernetes.m.crossplane.io/v1alpha1"
    assert config["spec"] == {"credentials": {"source": "InjectedIdentity"}}
    assert config["metadata"]["annotations"] == host["metadata"]["annotations"]
    assert config["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"] == "1"
