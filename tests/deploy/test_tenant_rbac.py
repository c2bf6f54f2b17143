"""The tenant roles in deploy/: WorkspaceSandboxes only, nothing that holds credentials."""

import pytest

from tests.deploy.install import ALL, DEPLOY, PROVIDER_GROUPS, READ, documents, find, grants
from tests.support import (
    load_stream,
)

TENANT_ROLES = [
    pytest.param(
        "function-workspace-sandbox:tenant-view",
        {"rbac.cozystack.io/aggregate-to-tenant-view": "true"},
        READ,
        id="view-and-use-read",
    ),
    pytest.param(
        "function-workspace-sandbox:tenant-admin",
        {
            "rbac.cozystack.io/aggregate-to-tenant-admin": "true",
            "rbac.cozystack.io/aggregate-to-tenant": "true",
        },
        ALL,
        id="admin-and-tenant-service-account-write",
    ),
]


@pytest.mark.parametrize(("name", "labels", "verbs"), TENANT_ROLES)
def test_tenant_roles_grant_workspacesandboxes_only(
    name: str, labels: dict[str, str], verbs: set[str]
) -> None:
    role = find("ClusterRole", name)
    assert role["metadata"]["labels"] == labels
    assert grants(role) == {("sandbox.cozystack.io", "workspacesandboxes")}
    assert {v for rule in role["rules"] for v in rule["verbs"]} == verbs


def test_every_tenant_role_is_listed() -> None:
    tenant_roles = {
        d["metadata"]["name"]
        for d in documents()
        if d["kind"] == "ClusterRole"
        and any(k.startswith("rbac.cozystack.io/") for k in d["metadata"].get("labels", {}))
    }
    assert tenant_roles == {p.values[0] for p in TENANT_ROLES}


def test_tenant_roles_grant_nothing_that_holds_credentials() -> None:
    # An Object or ProviderConfig of the tenant's own would borrow a plane's admin kubeconfig or
    # the provider's identity; a Secret could be, or stand in for, that kubeconfig.
    roles = [
        d for d in load_stream(DEPLOY / "rbac-tenants.yaml") if d["kind"] in {"ClusterRole", "Role"}
    ]
    assert {r["metadata"]["name"] for r in roles} == {p.values[0] for p in TENANT_ROLES}
    for role in roles:
        assert "aggregationRule" not in role
        for rule in role["rules"]:
            groups, resources = set(rule["apiGroups"]), set(rule["resources"])
            assert not groups & (PROVIDER_GROUPS | {"*"}), role["metadata"]["name"]
            assert not {r.partition("/")[0] for r in resources} & {"secrets", "*"}
