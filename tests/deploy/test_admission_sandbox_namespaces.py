"""deploy/admission-sandbox-namespaces.yaml: sandbox namespaces are the platform's alone."""

from collections.abc import Mapping
from typing import Any

import pytest

from tests.deploy.admission import provider_request, verdict
from tests.deploy.install import (
    CROSSPLANE,
    HOST_CONFIG,
    MARKER,
    NAMESPACES_CONFIG,
    PROVIDER,
    TENANT,
    TENANT_NAMESPACE,
    find,
    provider_account,
)
from tests.deploy.objects import ADMIN, READING, finalized, writers
from tests.schemas import validate
from tests.support import NAMESPACE

SANDBOX = "sandbox-alice-api-0123456789abcdefghijklmnop"
PSS = {f"pod-security.kubernetes.io/{m}": "restricted" for m in ("enforce", "audit", "warn")}
SANDBOX_LABELS = {
    MARKER: NAMESPACE,
    "sandbox.cozystack.io/workspace": "alice-api",
    "app.kubernetes.io/managed-by": "function-workspace-sandbox",
    **PSS,
}
SANDBOX_NAMESPACE = {"kubernetes.io/metadata.name": SANDBOX, **SANDBOX_LABELS}
OWN_NAMESPACE = {"kubernetes.io/metadata.name": "crossplane-system"}


def request(
    operation: str,
    username: str,
    resource: str,
    kind: str,
    *,
    group: str = "",
    version: str = "v1",
    namespace: str = "",
    sub_resource: str = "",
    name: str = "alice-api",
) -> dict[str, Any]:
    """An admission request ("" namespace: cluster-scoped)."""
    out: dict[str, Any] = {
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "name": name,
    }
    if namespace:
        out["namespace"] = namespace
    if sub_resource:
        out["subResource"] = sub_resource
    return out


def stored(operation: str, obj: Mapping[str, Any]) -> tuple[Any, Any]:
    """(object, oldObject) of a write that leaves `obj` as it is."""
    return (None if operation == "DELETE" else obj), (None if operation == "CREATE" else obj)


# --------------------------------------------------------------------------- the marker

MARKER_POLICY = "sandbox-namespace-marker"
MARKER_MESSAGES = {
    "creator": "only provider-kubernetes creates sandbox namespaces: remove the label "
    "sandbox.cozystack.io/tenant-namespace",
    "name": "a sandbox namespace's name starts with sandbox-",
    "pss": "a sandbox namespace enforces, audits and warns Pod Security restricted: set "
    "pod-security.kubernetes.io/enforce, audit and warn to restricted, and no version but latest",
    "change": "the label sandbox.cozystack.io/tenant-namespace is set when provider-kubernetes "
    "creates a sandbox namespace, and never added, changed or removed",
}


def namespace(labels: Mapping[str, str], name: str = SANDBOX) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def without(labels: Mapping[str, str], key: str) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != key}


def marker_verdict(
    operation: str,
    username: str,
    new: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None = None,
    sub_resource: str = "",
) -> str | list[str]:
    for obj in (new, old):
        assert obj is None or validate(obj) == []
    name = (new or old or {})["metadata"]["name"]
    # The API server names a Namespace's own namespace in requests for it, but on create.
    where = {} if operation == "CREATE" else {"namespace": name}
    sent = request(
        operation, username, "namespaces", "Namespace", sub_resource=sub_resource, **where
    )
    return verdict(MARKER_POLICY, {**sent, "name": name}, new, old)


def messages(*keys: str) -> list[str]:
    return [MARKER_MESSAGES[k] for k in keys]


@pytest.mark.parametrize(
    ("username", "labels", "name", "want"),
    [
        pytest.param(
            PROVIDER, SANDBOX_LABELS, SANDBOX, [], id="provider-creates-a-sandbox-namespace"
        ),
        pytest.param(ADMIN, SANDBOX_LABELS, SANDBOX, messages("creator"), id="admin-may-not"),
        pytest.param(TENANT, SANDBOX_LABELS, SANDBOX, messages("creator"), id="tenant-may-not"),
        pytest.param(
            CROSSPLANE, SANDBOX_LABELS, SANDBOX, messages("creator"), id="crossplane-may-not"
        ),
        pytest.param(
            "system:serviceaccount:tenant-acme:provider-kubernetes",
            SANDBOX_LABELS,
            SANDBOX,
            messages("creator"),
            id="an-account-named-like-the-provider-may-not",
        ),
        pytest.param(
            PROVIDER, SANDBOX_LABELS, "tenant-acme-scratch", messages("name"), id="name-prefix"
        ),
        pytest.param(
            PROVIDER, SANDBOX_LABELS, "kube-sandbox-x", messages("name"), id="prefix-only"
        ),
        pytest.param(
            PROVIDER,
            {**SANDBOX_LABELS, "pod-security.kubernetes.io/enforce": "baseline"},
            SANDBOX,
            messages("pss"),
            id="enforce-baseline",
        ),
        pytest.param(
            PROVIDER,
            without(SANDBOX_LABELS, "pod-security.kubernetes.io/audit"),
            SANDBOX,
            messages("pss"),
            id="audit-missing",
        ),
        pytest.param(
            PROVIDER,
            {**SANDBOX_LABELS, "pod-security.kubernetes.io/warn": "privileged"},
            SANDBOX,
            messages("pss"),
            id="warn-privileged",
        ),
        pytest.param(
            PROVIDER,
            {**SANDBOX_LABELS, "pod-security.kubernetes.io/enforce-version": "v1.22"},
            SANDBOX,
            messages("pss"),
            id="an-older-profile",
        ),
        pytest.param(
            PROVIDER,
            {**SANDBOX_LABELS, "pod-security.kubernetes.io/enforce-version": "latest"},
            SANDBOX,
            [],
            id="latest-profile",
        ),
        pytest.param(
            ADMIN,
            {**PSS, MARKER: NAMESPACE},
            "tenant-acme-scratch",
            messages("creator", "name"),
            id="both-rules-speak",
        ),
        pytest.param(ADMIN, {"team": "a"}, "tenant-acme-scratch", [], id="unmarked-is-not-ours"),
        pytest.param(
            ADMIN,
            {MARKER.replace("tenant", "Tenant"): NAMESPACE},
            "x",
            [],
            id="label-keys-match-exactly",
        ),
    ],
)
def test_only_the_provider_creates_marked_namespaces_restricted_and_named_sandbox(
    username: str, labels: dict[str, str], name: str, want: list[str]
) -> None:
    assert marker_verdict("CREATE", username, namespace(labels, name)) == want


@pytest.mark.parametrize(
    ("username", "old", "new", "sub_resource", "want"),
    [
        pytest.param(
            ADMIN,
            PSS,
            {**PSS, MARKER: NAMESPACE},
            "",
            messages("change"),
            id="admin-adds-the-marker-to-an-existing-namespace",
        ),
        pytest.param(
            PROVIDER,
            PSS,
            {**PSS, MARKER: NAMESPACE},
            "",
            messages("change"),
            id="so-does-the-provider",
        ),
        pytest.param(
            PROVIDER,
            SANDBOX_LABELS,
            without(SANDBOX_LABELS, MARKER),
            "",
            messages("change"),
            id="removing-it",
        ),
        pytest.param(
            PROVIDER,
            SANDBOX_LABELS,
            {**SANDBOX_LABELS, MARKER: "tenant-other"},
            "",
            messages("change"),
            id="moving-it-to-another-tenant",
        ),
        pytest.param(
            ADMIN,
            SANDBOX_LABELS,
            without(SANDBOX_LABELS, MARKER),
            "status",
            messages("change"),
            id="through-the-status-subresource-too",
        ),
        pytest.param(
            ADMIN,
            SANDBOX_LABELS,
            {**SANDBOX_LABELS, "pod-security.kubernetes.io/enforce": "privileged"},
            "",
            messages("pss"),
            id="weakening-pod-security",
        ),
        pytest.param(
            PROVIDER,
            SANDBOX_LABELS,
            without(SANDBOX_LABELS, "pod-security.kubernetes.io/warn"),
            "",
            messages("pss"),
            id="dropping-a-mode",
        ),
        pytest.param(
            ADMIN,
            SANDBOX_LABELS,
            {**SANDBOX_LABELS, "pod-security.kubernetes.io/audit-version": "v1.25"},
            "",
            messages("pss"),
            id="pinning-an-older-profile",
        ),
        pytest.param(
            PROVIDER,
            SANDBOX_LABELS,
            {**SANDBOX_LABELS, "sandbox.cozystack.io/workspace": "alice-api"},
            "",
            [],
            id="reapplying-the-same-labels",
        ),
        pytest.param(
            ADMIN, SANDBOX_LABELS, {**SANDBOX_LABELS, "team": "a"}, "", [], id="other-labels"
        ),
        pytest.param(
            "system:serviceaccount:kube-system:namespace-controller",
            SANDBOX_LABELS,
            SANDBOX_LABELS,
            "finalize",
            [],
            id="namespace-controller-finalizes",
        ),
        pytest.param(ADMIN, {"team": "a"}, {"team": "b"}, "", [], id="unmarked-namespaces"),
    ],
)
def test_nobody_adds_moves_or_removes_the_marker_or_weakens_pod_security(
    username: str,
    old: dict[str, str],
    new: dict[str, str],
    sub_resource: str,
    want: list[str],
) -> None:
    got = marker_verdict("UPDATE", username, namespace(new), namespace(old), sub_resource)
    assert got == want


def test_deleting_a_sandbox_namespace_is_not_the_marker_policys_concern() -> None:
    assert marker_verdict("DELETE", PROVIDER, None, namespace(SANDBOX_LABELS)) == "unmatched"


# --------------------------------------------------------------------------- the host identity

HOST_WRITES = "provider-kubernetes-host-writes"
HOST_MESSAGE = (
    "provider-kubernetes writes only sandbox namespaces and what is in them, its own kinds, "
    "workspace claims' size, events, its own namespace and dedicated ComputePlanes"
)
REFUSED = [HOST_MESSAGE]

# (group, version, resource, kind) of what the tests write.
SERVICE = ("", "v1", "services", "Service")
VM = ("kubevirt.io", "v1", "virtualmachines", "VirtualMachine")
DATA_VOLUME = ("cdi.kubevirt.io", "v1beta1", "datavolumes", "DataVolume")
CILIUM = ("cilium.io", "v2", "ciliumnetworkpolicies", "CiliumNetworkPolicy")
QUOTA = ("", "v1", "resourcequotas", "ResourceQuota")
SECRET = ("", "v1", "secrets", "Secret")
CONFIG_MAP = ("", "v1", "configmaps", "ConfigMap")
LEASE = ("coordination.k8s.io", "v1", "leases", "Lease")
CLAIM = ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
POD = ("", "v1", "pods", "Pod")
EVENT = ("", "v1", "events", "Event")
NEW_EVENT = ("events.k8s.io", "v1", "events", "Event")
ROLE_BINDING = ("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
CLUSTER_ROLE_BINDING = (
    "rbac.authorization.k8s.io",
    "v1",
    "clusterrolebindings",
    "ClusterRoleBinding",
)
CRD = ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition")
COMPUTE_PLANE = ("apps.cozystack.io", "v1alpha1", "computeplanes", "ComputePlane")


def host_writes(
    operation: str,
    what: tuple[str, str, str, str],
    labels: Mapping[str, str] | None,
    username: str = PROVIDER,
    sub_resource: str = "",
) -> str | list[str]:
    """The verdict on a write of `what` in the namespace with `labels` (None: cluster-scoped)."""
    group, version, resource, kind = what
    where = {"namespace": labels["kubernetes.io/metadata.name"]} if labels else {}
    sent = request(
        operation,
        username,
        resource,
        kind,
        group=group,
        version=version,
        sub_resource=sub_resource,
        **where,
    )
    api_version = f"{group}/{version}" if group else version
    meta = {"name": "alice-api", **where}
    new, old = stored(operation, {"apiVersion": api_version, "kind": kind, "metadata": meta})
    return verdict(HOST_WRITES, sent, new, old, labels)


@pytest.mark.parametrize(
    ("operation", "what", "labels", "sub_resource", "want"),
    [
        # Inside a sandbox namespace: what the function composes there.
        pytest.param("CREATE", SERVICE, SANDBOX_NAMESPACE, "", [], id="sandbox-service"),
        pytest.param("CREATE", VM, SANDBOX_NAMESPACE, "", [], id="sandbox-vm"),
        pytest.param("UPDATE", CILIUM, SANDBOX_NAMESPACE, "", [], id="sandbox-policy"),
        pytest.param("DELETE", DATA_VOLUME, SANDBOX_NAMESPACE, "", [], id="sandbox-disk-deleted"),
        pytest.param("CREATE", QUOTA, SANDBOX_NAMESPACE, "", [], id="sandbox-quota"),
        pytest.param("UPDATE", CLAIM, SANDBOX_NAMESPACE, "", [], id="sandbox-disk-grows"),
        # ... but none of what Crossplane grants every provider everywhere.
        pytest.param("CREATE", SECRET, SANDBOX_NAMESPACE, "", REFUSED, id="no-sandbox-secret"),
        pytest.param(
            "CREATE", CONFIG_MAP, SANDBOX_NAMESPACE, "", REFUSED, id="no-sandbox-configmap"
        ),
        pytest.param("CREATE", LEASE, SANDBOX_NAMESPACE, "", REFUSED, id="no-sandbox-lease"),
        # Outside: what the function composes, never.
        pytest.param("CREATE", SERVICE, TENANT_NAMESPACE, "", REFUSED, id="tenant-service"),
        pytest.param("UPDATE", VM, TENANT_NAMESPACE, "", REFUSED, id="tenant-vm"),
        pytest.param("DELETE", CILIUM, TENANT_NAMESPACE, "", REFUSED, id="tenant-policy-deleted"),
        pytest.param("CREATE", POD, TENANT_NAMESPACE, "", REFUSED, id="tenant-pod"),
        pytest.param(
            "CONNECT", POD, TENANT_NAMESPACE, "exec", REFUSED, id="no-exec-into-tenant-pods"
        ),
        pytest.param("CREATE", SECRET, TENANT_NAMESPACE, "", REFUSED, id="tenant-secret"),
        pytest.param(
            "UPDATE", SECRET, TENANT_NAMESPACE, "", REFUSED, id="reference-finalizer-on-a-secret"
        ),
        pytest.param(
            "CREATE",
            SERVICE,
            {"kubernetes.io/metadata.name": "cozy-system", "cozystack.io/system": "true"},
            "",
            REFUSED,
            id="platform-namespace",
        ),
        pytest.param(
            "CREATE",
            SECRET,
            {"kubernetes.io/metadata.name": "kube-system"},
            "",
            REFUSED,
            id="kube-system-secret",
        ),
        pytest.param(
            "CREATE",
            ROLE_BINDING,
            TENANT_NAMESPACE,
            "",
            REFUSED,
            id="tenant-rolebinding",
        ),
        pytest.param("CREATE", CLUSTER_ROLE_BINDING, None, "", REFUSED, id="clusterrolebinding"),
        pytest.param("UPDATE", CRD, None, "", REFUSED, id="crds"),
        # What it did before sandbox namespaces.
        pytest.param("UPDATE", CLAIM, TENANT_NAMESPACE, "", [], id="grows-a-tenant-claim"),
        pytest.param("CREATE", CLAIM, TENANT_NAMESPACE, "", REFUSED, id="never-creates-one"),
        pytest.param("DELETE", CLAIM, TENANT_NAMESPACE, "", REFUSED, id="nor-deletes-one"),
        pytest.param(
            "UPDATE", CLAIM, TENANT_NAMESPACE, "status", REFUSED, id="nor-writes-its-status"
        ),
        pytest.param("CREATE", EVENT, TENANT_NAMESPACE, "", [], id="events"),
        pytest.param("UPDATE", NEW_EVENT, TENANT_NAMESPACE, "", [], id="events-api-events"),
        pytest.param("DELETE", EVENT, TENANT_NAMESPACE, "", REFUSED, id="never-deletes-events"),
        pytest.param("CREATE", LEASE, OWN_NAMESPACE, "", [], id="own-leader-election"),
        pytest.param("UPDATE", SECRET, OWN_NAMESPACE, "", [], id="own-namespace-secret"),
        # Dedicated planes, for Objects through workspace-sandbox-planes; served by
        # cozystack-api, which runs this cluster's admission policies too.
        pytest.param("CREATE", COMPUTE_PLANE, TENANT_NAMESPACE, "", [], id="creates-a-plane"),
        pytest.param("UPDATE", COMPUTE_PLANE, TENANT_NAMESPACE, "", [], id="updates-a-plane"),
        pytest.param("DELETE", COMPUTE_PLANE, TENANT_NAMESPACE, "", [], id="deletes-a-plane"),
        pytest.param(
            "UPDATE", COMPUTE_PLANE, TENANT_NAMESPACE, "status", REFUSED, id="never-its-status"
        ),
    ],
)
def test_the_provider_writes_sandbox_namespaces_and_what_it_wrote_before(
    operation: str,
    what: tuple[str, str, str, str],
    labels: Mapping[str, str] | None,
    sub_resource: str,
    want: str | list[str],
) -> None:
    assert host_writes(operation, what, labels, sub_resource=sub_resource) == want


@pytest.mark.parametrize(
    ("operation", "resource", "where", "want"),
    [
        pytest.param("UPDATE", "objects", {}, [], id="objects"),
        pytest.param("UPDATE", "objects", {"sub_resource": "status"}, [], id="object-status"),
        pytest.param("CREATE", "providerconfigusages", {}, [], id="usages"),
        pytest.param("UPDATE", "providerconfigs", {}, [], id="in-use-finalizer"),
        pytest.param(
            "UPDATE",
            "clusterproviderconfigs",
            {"namespace": ""},
            [],
            id="cluster-config-finalizer",
        ),
        pytest.param(
            "UPDATE",
            "objects",
            {"group": "kubernetes.crossplane.io", "namespace": ""},
            [],
            id="legacy-objects",
        ),
    ],
)
def test_the_provider_writes_its_own_kinds(
    operation: str, resource: str, where: dict[str, Any], want: list[str]
) -> None:
    sent = provider_request(operation, PROVIDER, resource, **where)
    obj = {"apiVersion": "kubernetes.m.crossplane.io/v1alpha1", "kind": "Object", "metadata": {}}
    assert verdict(HOST_WRITES, sent, obj, obj, TENANT_NAMESPACE) == want


@pytest.mark.parametrize(
    ("operation", "old", "new", "want"),
    [
        pytest.param("CREATE", None, SANDBOX_LABELS, [], id="creates-a-sandbox-namespace"),
        pytest.param("UPDATE", SANDBOX_LABELS, SANDBOX_LABELS, [], id="updates-one"),
        pytest.param("DELETE", SANDBOX_LABELS, None, [], id="deletes-one"),
        pytest.param("CREATE", None, PSS, REFUSED, id="never-an-unmarked-namespace"),
        pytest.param("UPDATE", PSS, SANDBOX_LABELS, REFUSED, id="never-marks-one"),
        pytest.param("UPDATE", {"team": "a"}, {"team": "b"}, REFUSED, id="never-updates-one"),
        pytest.param("DELETE", {"team": "a"}, None, REFUSED, id="never-deletes-one"),
    ],
)
def test_the_provider_writes_sandbox_namespaces_and_no_other(
    operation: str,
    old: dict[str, str] | None,
    new: dict[str, str] | None,
    want: list[str],
) -> None:
    name = SANDBOX if (new or old or {}).get(MARKER) else "tenant-acme"
    where = {} if operation == "CREATE" else {"namespace": name}
    sent = {**request(operation, PROVIDER, "namespaces", "Namespace", **where), "name": name}
    obj = None if new is None else namespace(new, name)
    old_obj = None if old is None else namespace(old, name)
    assert verdict(HOST_WRITES, sent, obj, old_obj) == want


def test_a_namespace_request_is_judged_by_the_namespace_not_by_the_one_it_names() -> None:
    # The API server puts a Namespace's own name into requests for it, and gives them no
    # namespaceObject: the provider's own namespace is not the provider's to change.
    own = namespace({"kubernetes.io/metadata.name": "crossplane-system"}, "crossplane-system")
    sent = request("UPDATE", PROVIDER, "namespaces", "Namespace", namespace="crossplane-system")
    assert verdict(HOST_WRITES, sent, own, own, OWN_NAMESPACE) == REFUSED


@pytest.mark.parametrize(
    "username",
    [
        CROSSPLANE,
        TENANT,
        ADMIN,
        "system:serviceaccount:tenant-acme:provider-kubernetes",
        "system:serviceaccount:crossplane-system:provider-kubernetes-other",
    ],
)
def test_only_the_providers_own_account_is_confined(username: str) -> None:
    assert host_writes("CREATE", SERVICE, TENANT_NAMESPACE, username) == "exempt"


def test_the_confined_account_is_the_one_the_runtime_config_fixes() -> None:
    (condition,) = find("ValidatingAdmissionPolicy", HOST_WRITES)["spec"]["matchConditions"]
    assert f"'{provider_account()}'" in condition["expression"]


# --------------------------------------------------------------------------- roles and bindings

RBAC_POLICY = "sandbox-namespace-rbac"
RBAC_MESSAGE = "sandbox namespaces hold no Roles or RoleBindings: only the platform acts there"
ROLE = ("rbac.authorization.k8s.io", "v1", "roles", "Role")


def rbac_verdict(
    operation: str, what: tuple[str, str, str, str], labels: Mapping[str, str] | None, user: str
) -> str | list[str]:
    group, version, resource, kind = what
    where = {"namespace": labels["kubernetes.io/metadata.name"]} if labels else {}
    sent = request(operation, user, resource, kind, group=group, version=version, **where)
    new, old = stored(operation, {"apiVersion": f"{group}/{version}", "kind": kind})
    return verdict(RBAC_POLICY, sent, new, old, labels)


@pytest.mark.parametrize(
    ("operation", "what", "labels", "user", "want"),
    [
        pytest.param(
            "CREATE", ROLE_BINDING, SANDBOX_NAMESPACE, ADMIN, [RBAC_MESSAGE], id="admin-binds"
        ),
        pytest.param(
            "UPDATE", ROLE_BINDING, SANDBOX_NAMESPACE, ADMIN, [RBAC_MESSAGE], id="admin-rebinds"
        ),
        pytest.param("CREATE", ROLE, SANDBOX_NAMESPACE, PROVIDER, [RBAC_MESSAGE], id="provider"),
        pytest.param(
            "CREATE", ROLE_BINDING, SANDBOX_NAMESPACE, CROSSPLANE, [RBAC_MESSAGE], id="crossplane"
        ),
        pytest.param(
            "UPDATE", ROLE, SANDBOX_NAMESPACE, TENANT, [RBAC_MESSAGE], id="tenant-widens-a-role"
        ),
        pytest.param(
            "DELETE", ROLE_BINDING, SANDBOX_NAMESPACE, ADMIN, "unmatched", id="a-bad-one-goes"
        ),
        pytest.param("CREATE", ROLE_BINDING, TENANT_NAMESPACE, TENANT, [], id="tenant-namespaces"),
        pytest.param(
            "CREATE",
            ROLE_BINDING,
            {"kubernetes.io/metadata.name": SANDBOX, MARKER.replace("tenant-", ""): NAMESPACE},
            ADMIN,
            [],
            id="only-the-marker-counts",
        ),
        pytest.param("CREATE", CLUSTER_ROLE_BINDING, None, ADMIN, "unmatched", id="cluster-wide"),
    ],
)
def test_nobody_creates_or_changes_roles_or_bindings_in_sandbox_namespaces(
    operation: str,
    what: tuple[str, str, str, str],
    labels: Mapping[str, str] | None,
    user: str,
    want: str | list[str],
) -> None:
    assert rbac_verdict(operation, what, labels, user) == want


def test_the_provider_is_refused_a_role_by_the_rbac_policy_alone() -> None:
    # The host-writes policy lets the provider write in a sandbox namespace; this one holds.
    assert host_writes("CREATE", ROLE, SANDBOX_NAMESPACE) == []
    assert rbac_verdict("CREATE", ROLE, SANDBOX_NAMESPACE, PROVIDER) == [RBAC_MESSAGE]


# --------------------------------------------------------------------------- Objects

OBJECTS = "workspace-sandbox-namespaces-objects"
WRITERS_MESSAGE = (
    "only Crossplane and provider-kubernetes write provider-kubernetes objects and provider "
    "configs here: they act with a ComputePlane's admin credential or the provider's own identity"
)
OBJECT_MESSAGES = {
    "writer": "only Crossplane writes an Object that uses workspace-sandbox-namespaces: change "
    "the WorkspaceSandbox instead",
    "kind": "an Object using workspace-sandbox-namespaces wraps only what a sandbox namespace "
    "holds: its Namespace, ResourceQuota, LimitRange, ServiceAccount, Service, claim, network "
    "policies, DataVolume, VirtualMachine, Sandbox or VolumeSnapshots",
    "where": "an Object using workspace-sandbox-namespaces writes into a sandbox namespace "
    "(metadata.namespace sandbox-...), or wraps a Namespace named sandbox-... labelled "
    "sandbox.cozystack.io/tenant-namespace with the Object's own namespace",
    "reads": "an Object using workspace-sandbox-namespaces reads nothing else: remove "
    "spec.references, spec.connectionDetails and spec.writeConnectionSecretToRef",
}
NAMESPACES_REF = {"kind": "ClusterProviderConfig", "name": NAMESPACES_CONFIG}
# What a sandbox namespace holds, as the contract lists it.
HELD = [
    ("v1", "ResourceQuota"),
    ("v1", "LimitRange"),
    ("v1", "ServiceAccount"),
    ("v1", "Service"),
    ("v1", "PersistentVolumeClaim"),
    ("cilium.io/v2", "CiliumNetworkPolicy"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("cdi.kubevirt.io/v1beta1", "DataVolume"),
    ("kubevirt.io/v1", "VirtualMachine"),
    ("agents.x-k8s.io/v1beta1", "Sandbox"),
    ("snapshot.storage.k8s.io/v1", "VolumeSnapshot"),
]
NEVER_HELD = [
    ("v1", "Secret"),
    ("v1", "ConfigMap"),
    ("v1", "Pod"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("apps/v1", "StatefulSet"),
]


def wrapped(api_version: str, kind: str, namespace: str = SANDBOX) -> dict[str, Any]:
    if kind == "Namespace":
        return namespace_manifest()
    meta = {"name": "alice-api", "namespace": namespace}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def namespace_manifest(labels: Mapping[str, str] = SANDBOX_LABELS, name: str = SANDBOX) -> Any:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def sandbox_object(
    manifest: Mapping[str, Any], ref: Mapping[str, str] = NAMESPACES_REF, **spec: Any
) -> dict[str, Any]:
    """An Object in the tenant's namespace, as the API server admits it: defaulted."""
    return {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {"name": "alice-api-service", "namespace": NAMESPACE},
        "spec": {
            "forProvider": {"manifest": manifest},
            "providerConfigRef": dict(ref),
            "managementPolicies": ["*"],
            "readiness": {"policy": "SuccessfulCreate"},
            "watch": False,
            **spec,
        },
    }


def objects_verdict(
    new: dict[str, Any],
    old: dict[str, Any] | None = None,
    username: str = CROSSPLANE,
    policy: str = OBJECTS,
    labels: Mapping[str, str] = TENANT_NAMESPACE,
) -> str | list[str]:
    assert validate(new) == []
    meta = new["metadata"]
    operation = "CREATE" if old is None else "UPDATE"
    sent = {
        **provider_request(operation, username, namespace=meta["namespace"]),
        "name": meta["name"],
    }
    return verdict(policy, sent, new, old, labels)


@pytest.mark.parametrize(("api_version", "kind"), [*HELD, ("v1", "Namespace")])
def test_crossplane_wraps_what_a_sandbox_namespace_holds(api_version: str, kind: str) -> None:
    assert objects_verdict(sandbox_object(wrapped(api_version, kind))) == []


@pytest.mark.parametrize(("api_version", "kind"), NEVER_HELD)
def test_nothing_else_is_wrapped(api_version: str, kind: str) -> None:
    got = objects_verdict(sandbox_object(wrapped(api_version, kind)))
    assert got == [OBJECT_MESSAGES["kind"]]


@pytest.mark.parametrize(
    ("manifest", "want"),
    [
        pytest.param(wrapped("v1", "Service", NAMESPACE), ["where"], id="the-tenants-namespace"),
        pytest.param(wrapped("v1", "Service", "kube-system"), ["where"], id="kube-system"),
        pytest.param(
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "alice-api"}},
            ["where"],
            id="no-namespace-means-the-default-one",
        ),
        pytest.param(
            wrapped("kubevirt.io/v1", "VirtualMachine", "sandbox-bob-api-x"),
            [],
            id="any-sandbox-namespace-the-name-is-the-functions",
        ),
        pytest.param(
            namespace_manifest({**SANDBOX_LABELS, MARKER: "tenant-other"}),
            ["where"],
            id="a-namespace-for-another-tenant",
        ),
        pytest.param(
            namespace_manifest(without(SANDBOX_LABELS, MARKER)),
            ["where"],
            id="an-unmarked-namespace",
        ),
        pytest.param(
            namespace_manifest(name="tenant-acme-scratch"), ["where"], id="a-namespace-not-sandbox"
        ),
        pytest.param(
            {"apiVersion": "kubevirt.io/v1", "kind": "Service", "metadata": {"namespace": SANDBOX}},
            ["kind"],
            id="a-kind-of-another-group",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "VirtualMachine", "metadata": {"namespace": SANDBOX}},
            ["kind"],
            id="core-is-v1-only-for-core-kinds",
        ),
        pytest.param(
            {"apiVersion": "kubevirt.io.evil/v1", "kind": "VirtualMachine", "metadata": {}},
            ["kind", "where"],
            id="group-prefixes-match-whole",
        ),
    ],
)
def test_objects_write_into_sandbox_namespaces_of_their_own_tenant(
    manifest: dict[str, Any], want: list[str]
) -> None:
    assert objects_verdict(sandbox_object(manifest)) == [OBJECT_MESSAGES[k] for k in want]


@pytest.mark.parametrize("spec", READING)
def test_objects_read_nothing_with_the_providers_identity(spec: dict[str, Any]) -> None:
    obj = sandbox_object(wrapped("v1", "Service"), **spec)
    assert objects_verdict(obj) == [OBJECT_MESSAGES["reads"]]


SERVICE_OBJECT = sandbox_object(wrapped("v1", "Service"))
CHANGED = sandbox_object(wrapped("v1", "Service", "sandbox-bob-api-x"))


ELSEWHERE = sandbox_object(
    wrapped("v1", "Service"), {"kind": "ClusterProviderConfig", "name": HOST_CONFIG}
)


@pytest.mark.parametrize(
    ("username", "new", "old", "refused"),
    writers(SERVICE_OBJECT, CHANGED, finalized(SERVICE_OBJECT, "alice-api"), ELSEWHERE),
)
def test_only_crossplane_writes_an_objects_spec(
    username: str, new: dict[str, Any], old: dict[str, Any] | None, refused: bool
) -> None:
    assert objects_verdict(new, old, username) == ([OBJECT_MESSAGES["writer"]] if refused else [])


def test_the_objects_policy_holds_in_the_platforms_namespaces_too() -> None:
    # provider-kubernetes-writers leaves the platform's own namespaces alone; this one doesn't.
    obj = {**SERVICE_OBJECT, "metadata": {**SERVICE_OBJECT["metadata"], "namespace": "cozy-system"}}
    platform = {"kubernetes.io/metadata.name": "cozy-system", "cozystack.io/system": "true"}
    by_writers = objects_verdict(obj, None, ADMIN, "provider-kubernetes-writers", platform)
    assert by_writers == "unmatched"
    assert objects_verdict(obj, None, ADMIN, labels=platform) == [OBJECT_MESSAGES["writer"]]


def test_tenants_are_refused_these_objects_by_the_writers_policy_already() -> None:
    # Not repeated here: the tenant's refusal in its namespaces is provider-kubernetes-writers'.
    got = objects_verdict(SERVICE_OBJECT, None, TENANT, "provider-kubernetes-writers")
    assert got == [WRITERS_MESSAGE]


def test_objects_of_other_configs_are_not_this_policys() -> None:
    host = sandbox_object(
        wrapped("v1", "Secret"), {"kind": "ClusterProviderConfig", "name": HOST_CONFIG}
    )
    assert objects_verdict(host) == "exempt"
    plane = sandbox_object(
        wrapped("v1", "Secret"), {"kind": "ProviderConfig", "name": NAMESPACES_CONFIG}
    )
    assert objects_verdict(plane) == "exempt"


# --------------------------------------------------------------------------- the other policies

COMPOSED = "workspacesandbox-composed-resources"


def test_what_was_composed_in_a_sandbox_namespace_stays_crossplanes_and_the_providers() -> None:
    # A sandbox namespace is no platform namespace: the composed-resources policy applies there.
    labels = {"sandbox.cozystack.io/workspace": "alice-api"}
    vm = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "alice-api", "namespace": SANDBOX, "labels": labels},
    }
    group, version, resource, kind = VM
    for username, want in [(ADMIN, "refused"), (PROVIDER, "exempt"), (CROSSPLANE, "exempt")]:
        sent = request(
            "UPDATE", username, resource, kind, group=group, version=version, namespace=SANDBOX
        )
        got = verdict(COMPOSED, sent, vm, vm, SANDBOX_NAMESPACE)
        assert (got if got == "exempt" else "refused" if got else "admitted") == want, username


@pytest.mark.parametrize("policy", [MARKER_POLICY, HOST_WRITES, RBAC_POLICY, OBJECTS])
def test_each_policy_is_bound_to_deny_and_fails_closed(policy: str) -> None:
    assert find("ValidatingAdmissionPolicyBinding", policy)["spec"] == {
        "policyName": policy,
        "validationActions": ["Deny"],
    }
    assert find("ValidatingAdmissionPolicy", policy)["spec"]["failurePolicy"] == "Fail"


def test_the_policies_name_the_shipped_marker_and_config() -> None:
    text = str([find("ValidatingAdmissionPolicy", p)["spec"] for p in (MARKER_POLICY, OBJECTS)])
    assert f"'{MARKER}'" in text
    assert f"'{NAMESPACES_CONFIG}'" in text
    assert find("ClusterProviderConfig", NAMESPACES_CONFIG)
