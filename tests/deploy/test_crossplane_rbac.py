"""Crossplane's RBAC in deploy/: exactly the kinds the function composes."""

from tests.deploy.install import (
    ALL,
    CROSSPLANE,
    PLURALS,
    composed_kinds,
    documents,
    find,
    grants,
    provider_account,
)
from tests.support import (
    platform_input,
)


def test_crossplane_may_manage_exactly_the_composed_kinds() -> None:
    role = find("ClusterRole", "function-workspace-sandbox:crossplane")
    assert role["metadata"]["labels"] == {"rbac.crossplane.io/aggregate-to-crossplane": "true"}
    writes = {**role, "rules": [r for r in role["rules"] if set(r["verbs"]) == ALL]}
    assert grants(writes) == composed_kinds() == {(g, r) for (g, _), r in PLURALS.items()}
    # What is only looked up (required resources), never composed: ComputePlanes, the shared
    # one and the name a dedicated one takes. provider-kubernetes creates dedicated planes.
    reads = [r for r in role["rules"] if set(r["verbs"]) != ALL]
    assert reads == [
        {
            "apiGroups": ["apps.cozystack.io"],
            "resources": ["computeplanes"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    assert all(rule.keys() == {"apiGroups", "resources", "verbs"} for rule in role["rules"])


def test_no_role_has_wildcards_or_secrets() -> None:
    for role in (d for d in documents() if d["kind"] == "ClusterRole"):
        assert "aggregationRule" not in role
        for rule in role["rules"]:
            values = [*rule["apiGroups"], *rule["resources"], *rule["verbs"]]
            assert "*" not in "".join(values), role["metadata"]["name"]
            assert not any(r.partition("/")[0] == "secrets" for r in rule["resources"])


def catalog_namespaces() -> set[str]:
    images = platform_input()["images"].values()
    return {src["namespace"] for image in images for src in image.get("kubevirt", {}).values()}


def test_crossplane_and_the_provider_may_clone_from_the_catalog_namespaces_only() -> None:
    # Crossplane creates a DataVolume in the tenant's namespace, provider-kubernetes in a sandbox
    # namespace (SandboxNamespace placement): CDI asks about whoever creates it.
    role = find("ClusterRole", "function-workspace-sandbox:clone-golden-images")
    assert role["rules"] == [
        {"apiGroups": ["cdi.kubevirt.io"], "resources": ["datavolumes/source"], "verbs": ["create"]}
    ]
    bindings = [
        d
        for d in documents()
        if d["kind"] in {"RoleBinding", "ClusterRoleBinding"}
        and d["roleRef"]["name"] == role["metadata"]["name"]
    ]
    assert {b["kind"] for b in bindings} == {"RoleBinding"}
    assert {b["metadata"]["namespace"] for b in bindings} == catalog_namespaces() == {"cozy-public"}
    for binding in bindings:
        assert {s["kind"] for s in binding["subjects"]} == {"ServiceAccount"}
        accounts = [
            f"system:serviceaccount:{s['namespace']}:{s['name']}" for s in binding["subjects"]
        ]
        assert sorted(accounts) == [CROSSPLANE, provider_account()]
