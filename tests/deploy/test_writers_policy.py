"""The admission policy on who writes provider-kubernetes objects and configs."""

from collections.abc import Mapping

import pytest

from tests.deploy.admission import PROVIDER_KINDS, provider_request, verdict
from tests.deploy.install import (
    COLLECTOR,
    CONTROLLER_MANAGER,
    CROSSPLANE,
    NAMESPACE_CONTROLLER,
    PROVIDER,
    TENANT,
    TENANT_NAMESPACE,
    find,
    provider_account,
)

WRITERS = "provider-kubernetes-writers"
WRITERS_MESSAGE = (
    "only Crossplane and provider-kubernetes write provider-kubernetes objects and provider "
    "configs here: they act with a ComputePlane's admin credential or the provider's own identity"
)


def writers(
    operation: str,
    username: str,
    resource: str = "objects",
    *,
    labels: Mapping[str, str] = TENANT_NAMESPACE,
    **where: str,
) -> str | list[str]:
    """The writers policy's verdict, which depends on who asks, never on the object."""
    request = provider_request(operation, username, resource, **where)
    meta = {"name": request["name"], "namespace": request.get("namespace")}
    stored = {
        "apiVersion": f"{request['resource']['group']}/v1alpha1",
        "kind": PROVIDER_KINDS[resource],
        "metadata": {k: v for k, v in meta.items() if v},
    }
    new = None if operation == "DELETE" else stored
    old = None if operation == "CREATE" else stored
    return verdict(WRITERS, request, new, old, labels)


@pytest.mark.parametrize(
    ("operation", "username", "resource", "want"),
    [
        pytest.param("CREATE", TENANT, "objects", [WRITERS_MESSAGE], id="tenant-creates-object"),
        pytest.param("UPDATE", TENANT, "objects", [WRITERS_MESSAGE], id="tenant-updates-object"),
        pytest.param("DELETE", TENANT, "objects", [WRITERS_MESSAGE], id="tenant-deletes-object"),
        pytest.param(
            "CREATE", TENANT, "providerconfigs", [WRITERS_MESSAGE], id="tenant-creates-config"
        ),
        pytest.param(
            "UPDATE", TENANT, "providerconfigs", [WRITERS_MESSAGE], id="tenant-repoints-config"
        ),
        pytest.param(
            "DELETE", TENANT, "providerconfigs", [WRITERS_MESSAGE], id="tenant-deletes-config"
        ),
        pytest.param(
            "CREATE",
            TENANT,
            "observedobjectcollections",
            [WRITERS_MESSAGE],
            id="tenant-creates-a-collection-that-reads-the-plane",
        ),
        pytest.param(
            "CREATE",
            "system:serviceaccount:tenant-acme:default",
            "objects",
            [WRITERS_MESSAGE],
            id="tenant-service-account-creates-object",
        ),
        pytest.param(
            "CREATE",
            "system:serviceaccount:tenant-acme:provider-kubernetes",
            "objects",
            [WRITERS_MESSAGE],
            id="a-tenant-account-named-like-the-provider-is-checked",
        ),
        pytest.param(
            "CREATE",
            "system:serviceaccount:crossplane-system:crossplane-rbac-manager",
            "objects",
            [WRITERS_MESSAGE],
            id="other-crossplane-system-accounts-are-checked",
        ),
        pytest.param("CREATE", CROSSPLANE, "objects", "exempt", id="crossplane-composes-object"),
        pytest.param(
            "UPDATE", CROSSPLANE, "providerconfigs", "exempt", id="crossplane-applies-config"
        ),
        pytest.param(
            "DELETE", CROSSPLANE, "objects", "exempt", id="crossplane-deletes-what-it-dropped"
        ),
        pytest.param(
            "UPDATE", PROVIDER, "objects", "exempt", id="provider-adds-finalizer-and-annotations"
        ),
        pytest.param(
            "CREATE", PROVIDER, "providerconfigusages", "exempt", id="provider-records-usage"
        ),
        pytest.param(
            "DELETE", COLLECTOR, "objects", [], id="garbage-collector-deletes-an-xrs-objects"
        ),
        pytest.param(
            "UPDATE", COLLECTOR, "objects", [], id="garbage-collector-removes-foreground-finalizer"
        ),
        pytest.param(
            "CREATE", COLLECTOR, "objects", [WRITERS_MESSAGE], id="garbage-collector-never-creates"
        ),
        pytest.param(
            "DELETE",
            NAMESPACE_CONTROLLER,
            "providerconfigs",
            [],
            id="namespace-controller-empties-a-namespace",
        ),
        pytest.param(
            "UPDATE",
            NAMESPACE_CONTROLLER,
            "providerconfigs",
            [WRITERS_MESSAGE],
            id="namespace-controller-never-updates",
        ),
        pytest.param(
            "DELETE", CONTROLLER_MANAGER, "objects", [], id="controller-manager-without-sa-creds"
        ),
        pytest.param(
            "CREATE",
            CONTROLLER_MANAGER,
            "objects",
            [WRITERS_MESSAGE],
            id="controller-manager-never-creates",
        ),
    ],
)
def test_only_crossplane_and_the_provider_write_provider_kubernetes_kinds(
    operation: str, username: str, resource: str, want: str | list[str]
) -> None:
    assert writers(operation, username, resource) == want


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        pytest.param(TENANT_NAMESPACE, [WRITERS_MESSAGE], id="tenant-namespace"),
        pytest.param(
            {"kubernetes.io/metadata.name": "cozy-system", "cozystack.io/system": "true"},
            "unmatched",
            id="cozystack-system-namespace",
        ),
        pytest.param(
            {"kubernetes.io/metadata.name": "crossplane-system"},
            "unmatched",
            id="crossplanes-namespace",
        ),
        pytest.param({"kubernetes.io/metadata.name": "kube-system"}, "unmatched", id="kube-system"),
        pytest.param(
            {"kubernetes.io/metadata.name": "tenant-acme", "cozystack.io/system": "false"},
            [WRITERS_MESSAGE],
            id="system-label-must-be-true",
        ),
        pytest.param(
            {"kubernetes.io/metadata.name": "crossplane-system-copy"},
            [WRITERS_MESSAGE],
            id="names-match-exactly",
        ),
    ],
)
def test_the_writers_policy_leaves_only_the_platforms_own_namespaces_alone(
    labels: dict[str, str], want: str | list[str]
) -> None:
    namespace = labels["kubernetes.io/metadata.name"]
    assert writers("CREATE", TENANT, labels=labels, namespace=namespace) == want


@pytest.mark.parametrize(
    ("resource", "where", "want"),
    [
        pytest.param("providerconfigusages", {}, [WRITERS_MESSAGE], id="every-namespaced-kind"),
        pytest.param(
            "objects",
            {"group": "kubernetes.crossplane.io"},
            [WRITERS_MESSAGE],
            id="the-legacy-group-too",
        ),
        pytest.param(
            "clusterproviderconfigs",
            {"namespace": ""},
            "unmatched",
            id="cluster-scoped-kinds-are-beyond-tenant-roles",
        ),
        pytest.param(
            "objects", {"sub_resource": "status"}, "unmatched", id="status-writes-are-not-matched"
        ),
    ],
)
def test_what_the_writers_policy_covers(
    resource: str, where: dict[str, str], want: str | list[str]
) -> None:
    assert writers("UPDATE", TENANT, resource, **where) == want


def test_the_writers_policy_denies_and_exempts_the_shipped_accounts() -> None:
    assert find("ValidatingAdmissionPolicyBinding", WRITERS)["spec"] == {
        "policyName": WRITERS,
        "validationActions": ["Deny"],
    }
    spec = find("ValidatingAdmissionPolicy", WRITERS)["spec"]
    assert spec["failurePolicy"] == "Fail"
    (condition,) = spec["matchConditions"]
    for account in (CROSSPLANE, provider_account()):
        assert f"'{account}'" in condition["expression"]
