"""The shipped RBAC, asked of the real API server with SubjectAccessReviews: what a tenant, a
viewer and the gateway may and may not do.

Cozystack grants its tenants roles that aggregate ClusterRoles by label; the roles below stand
for Cozystack's, selecting by the labels deploy/rbac-tenants.yaml carries, and the controller
manager's aggregation controller fills them in as it does on a cluster.
"""

import time
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.control_plane.install import Installed
from tests.deploy.install import TENANT

pytestmark = pytest.mark.control_plane

NAMESPACE = "tenant-rbac"
OTHER = "tenant-next-door"
VIEWER = "bob@acme.example"
GATEWAY = "system:serviceaccount:cozy-sandbox-gateway:sandbox-gateway"
GATEWAY_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:cozy-sandbox-gateway"]
COZYSTACK_ROLES = {
    "test-cozy:tenant-admin": "rbac.cozystack.io/aggregate-to-tenant-admin",
    "test-cozy:tenant-view": "rbac.cozystack.io/aggregate-to-tenant-view",
}
AGGREGATED_SECONDS = 30


def can(
    installed: Installed,
    user: str,
    verb: str,
    resource: str,
    *,
    group: str = "",
    namespace: str = NAMESPACE,
    name: str = "",
    groups: list[str] | None = None,
) -> bool:
    api = k8s.AuthorizationV1Api(installed.plane.client())
    review = api.create_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": [*(groups or []), "system:authenticated"],
                "resourceAttributes": {
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    "namespace": namespace,
                    "name": name,
                },
            },
        }
    )
    return bool(review.status.allowed)


@pytest.fixture(scope="module")
def tenants(installed: Installed) -> Installed:
    api = installed.plane.client()
    rbac, core = k8s.RbacAuthorizationV1Api(api), k8s.CoreV1Api(api)
    for name in (NAMESPACE, OTHER):
        core.create_namespace({"metadata": {"name": name}})
    for role, label in COZYSTACK_ROLES.items():
        rbac.create_cluster_role(
            {
                "metadata": {"name": role},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]},
            }
        )
    for user, role in ((TENANT, "test-cozy:tenant-admin"), (VIEWER, "test-cozy:tenant-view")):
        rbac.create_namespaced_role_binding(
            NAMESPACE,
            {
                "metadata": {"name": f"test-{role.rpartition('-')[2]}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            },
        )
    deadline = time.monotonic() + AGGREGATED_SECONDS
    while not all(rbac.read_cluster_role(r).rules for r in COZYSTACK_ROLES):
        assert time.monotonic() < deadline, "the aggregation controller filled no role"
        time.sleep(0.2)
    return installed


SANDBOXES: dict[str, Any] = {"group": "sandbox.cozystack.io", "resource": "workspacesandboxes"}
WRITES = ("create", "update", "patch", "delete")


@pytest.mark.parametrize("verb", ("get", "list", "watch", *WRITES))
def test_a_tenant_writes_its_own_sandboxes_only(tenants: Installed, verb: str) -> None:
    assert can(tenants, TENANT, verb, **SANDBOXES)
    assert not can(tenants, TENANT, verb, **SANDBOXES, namespace=OTHER)


@pytest.mark.parametrize("verb", WRITES)
def test_a_viewer_reads_sandboxes_and_writes_none(tenants: Installed, verb: str) -> None:
    assert can(tenants, VIEWER, "get", **SANDBOXES)
    assert can(tenants, VIEWER, "watch", **SANDBOXES)
    assert not can(tenants, VIEWER, verb, **SANDBOXES)


@pytest.mark.parametrize(
    ("group", "resource"),
    [
        ("", "secrets"),
        ("kubernetes.m.crossplane.io", "objects"),
        ("kubernetes.m.crossplane.io", "providerconfigs"),
        ("kubevirt.io", "virtualmachines"),
        ("agents.x-k8s.io", "sandboxes"),
        ("", "pods"),
    ],
)
def test_the_tenant_roles_grant_nothing_else(tenants: Installed, group: str, resource: str) -> None:
    # What the function composes, and what holds credentials, comes from Cozystack's other
    # roles or not at all; the project's own add nothing but WorkspaceSandboxes.
    for verb in ("get", "create"):
        assert not can(tenants, TENANT, verb, resource, group=group)
        assert not can(tenants, VIEWER, verb, resource, group=group)


def gateway_can(installed: Installed, verb: str, resource: str, **where: Any) -> bool:
    return can(installed, GATEWAY, verb, resource, groups=GATEWAY_GROUPS, **where)


@pytest.mark.parametrize("verb", ("get", "list", "watch", "create", "patch", "delete"))
def test_the_gateway_manages_sandboxes_in_every_namespace(tenants: Installed, verb: str) -> None:
    for namespace in (NAMESPACE, OTHER, ""):
        assert gateway_can(tenants, verb, **SANDBOXES, namespace=namespace)


def test_the_gateway_reads_no_credentials_and_replaces_nothing(tenants: Installed) -> None:
    assert not gateway_can(tenants, "update", **SANDBOXES)
    # Its key Secrets in its own namespace by list (the watch of its keys), nowhere else; no
    # get, so no name of a Secret it is told opens it.
    assert gateway_can(tenants, "list", "secrets", namespace="cozy-sandbox-gateway")
    assert not gateway_can(tenants, "get", "secrets", namespace="cozy-sandbox-gateway", name="x")
    assert not gateway_can(tenants, "list", "secrets", namespace=NAMESPACE)
    assert gateway_can(
        tenants, "get", "configmaps", namespace=NAMESPACE, name="sandbox-gateway-pools"
    )
    assert not gateway_can(tenants, "get", "configmaps", namespace=NAMESPACE, name="other")
    for resource in ("pods", "services", "endpoints"):
        assert not gateway_can(tenants, "get", resource)


def test_the_gateway_checks_tokens_and_holds_one_lease(tenants: Installed) -> None:
    assert gateway_can(
        tenants, "create", "tokenreviews", group="authentication.k8s.io", namespace=""
    )
    assert gateway_can(
        tenants, "create", "subjectaccessreviews", group="authorization.k8s.io", namespace=""
    )
    lease = {
        "group": "coordination.k8s.io",
        "resource": "leases",
        "namespace": "cozy-sandbox-gateway",
    }
    assert gateway_can(tenants, "create", **lease)
    assert gateway_can(tenants, "update", **lease, name="workspace-sandbox-gateway-reaper")
    assert not gateway_can(tenants, "update", **lease, name="another-lease")
    assert not gateway_can(tenants, "create", **{**lease, "namespace": NAMESPACE})
