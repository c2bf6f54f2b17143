"""The platform install in deploy/: schemas, the kustomization, RBAC and the admission policy."""

import copy
import shutil
import subprocess
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel

from function.model import Manifest
from function.policy import selects
from function.render import render
from tests.schemas import _compile_rule, validate, validate_xrd_object
from tests.support import (
    NAMESPACE,
    NOW,
    PLATFORM,
    ROOT,
    load_stream,
    owned,
    platform_input,
    workspace,
)

DEPLOY = ROOT / "deploy"
KUSTOMIZATION = DEPLOY / "kustomization.yaml"
MANIFESTS = sorted(p for p in DEPLOY.glob("*.yaml") if p != KUSTOMIZATION)

CROSSPLANE = "system:serviceaccount:crossplane-system:crossplane"
TENANT = "alice@acme.example"
READ = {"get", "list", "watch"}
WRITE = {"create", "update", "patch", "delete"}
ALL = READ | WRITE

# (API group, kind) -> resource, for every kind the function composes. A new kind fails
# test_crossplane_may_manage_exactly_the_composed_kinds with a KeyError until it is added here
# and to deploy/rbac-crossplane.yaml.
PLURALS = {
    ("cdi.kubevirt.io", "DataVolume"): "datavolumes",
    ("kubevirt.io", "VirtualMachine"): "virtualmachines",
    ("agents.x-k8s.io", "Sandbox"): "sandboxes",
    ("", "Service"): "services",
    ("", "ServiceAccount"): "serviceaccounts",
    ("cilium.io", "CiliumNetworkPolicy"): "ciliumnetworkpolicies",
    ("networking.k8s.io", "NetworkPolicy"): "networkpolicies",
    ("snapshot.storage.k8s.io", "VolumeSnapshot"): "volumesnapshots",
    ("", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("apps.cozystack.io", "ComputePlane"): "computeplanes",
    ("kubernetes.m.crossplane.io", "Object"): "objects",
    ("kubernetes.m.crossplane.io", "ProviderConfig"): "providerconfigs",
    ("protection.crossplane.io", "Usage"): "usages",
}


@cache
def documents() -> tuple[dict[str, Any], ...]:
    return tuple(doc for path in MANIFESTS for doc in load_stream(path))


def find(kind: str, name: str) -> dict[str, Any]:
    (doc,) = (d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name)
    return doc


def identity(doc: Mapping[str, Any]) -> tuple[str, str, str, str]:
    meta = doc["metadata"]
    return doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"]


def grants(role: Mapping[str, Any]) -> set[tuple[str, str]]:
    return {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


# --------------------------------------------------------------------------- files


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_validates(path: Path) -> None:
    docs = load_stream(path)
    assert docs
    errors = {"/".join(identity(doc)): validate(doc) for doc in docs}
    assert {doc: found for doc, found in errors.items() if found} == {}


@pytest.mark.parametrize(
    ("change", "want"),
    [
        pytest.param({}, [], id="as-shipped"),
        pytest.param(
            {"package": "provider-kubernetes:v1.2.1"},
            [
                "spec.package: must be a fully qualified image name, including the registry, repository, and tag or digest. For example, 'registry.example.com/repo/package:tag' or 'registry.example.com/repo/package[:tag]@sha256:1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef'."
            ],
            id="package-without-registry",
        ),
        pytest.param(
            {"packagePullPolicy": 1},
            ["spec.packagePullPolicy: 1 is not of type 'string'"],
            id="wrong-type",
        ),
        pytest.param(
            {"runtimeConfig": {"name": "provider-kubernetes"}},
            ["spec.runtimeConfig: unknown field"],
            id="unknown-field",
        ),
    ],
)
def test_the_provider_is_checked_against_crossplanes_crd(
    change: dict[str, Any], want: list[str]
) -> None:
    provider = find("Provider", "provider-kubernetes")
    assert validate({**provider, "spec": {**provider["spec"], **change}}) == want


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    assert sorted(listed) == [p.name for p in MANIFESTS]
    assert all((DEPLOY / name).is_file() for name in listed)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl for kustomize")
def test_kustomization_builds_to_the_manifests() -> None:
    out = subprocess.run(
        [str(shutil.which("kubectl")), "kustomize", str(DEPLOY)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    built = sorted((d for d in yaml.safe_load_all(out) if d), key=identity)
    assert built == sorted(documents(), key=identity)


# The Composition's source is package data, so that the CLI finds its default when installed;
# kustomize needs a copy inside deploy/, and crossplane render users expect one in compositions/.
@pytest.mark.parametrize(
    ("copy_path", "source"),
    [
        ("deploy/xrd.yaml", "apis/workspacesandbox/definition.yaml"),
        ("deploy/composition.yaml", "function/compositions/workspacesandbox.yaml"),
        ("compositions/workspacesandbox.yaml", "function/compositions/workspacesandbox.yaml"),
    ],
)
def test_copies_match_their_sources(copy_path: str, source: str) -> None:
    assert (ROOT / copy_path).read_bytes() == (ROOT / source).read_bytes(), (
        f"{copy_path} differs from {source}; copy {source} to {copy_path}"
    )


def test_function_runs_with_the_shipped_runtime_config() -> None:
    function = find("Function", "function-workspace-sandbox")
    config = find("DeploymentRuntimeConfig", "function-workspace-sandbox")
    assert function["spec"]["runtimeConfigRef"] == {
        "apiVersion": config["apiVersion"],
        "kind": config["kind"],
        "name": config["metadata"]["name"],
    }
    package = function["spec"]["package"]
    assert package.startswith("ghcr.io/cozystack/function-workspace-sandbox:v")
    pod = config["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "package-runtime"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"].keys() == container["resources"]["limits"].keys()


# --------------------------------------------------------------------------- Crossplane RBAC


READY = {"conditions": [{"type": "Ready", "status": "True"}]}


def as_observed(resources: Mapping[str, Manifest]) -> dict[str, Manifest]:
    """What Crossplane observes once every rendered resource exists and reports Ready."""
    return owned(
        {
            key: {**m, "metadata": {**m["metadata"], "namespace": NAMESPACE}, "status": READY}
            for key, m in resources.items()
        }
    )


def answers(requirements: Mapping[str, Mapping[str, str]]) -> dict[str, list[Manifest]]:
    """Every required resource the function asks for, existing and Ready; names are free."""
    return {
        key: [
            {
                "apiVersion": want["apiVersion"],
                "kind": want["kind"],
                "metadata": {"name": want["name"], "namespace": want["namespace"]},
                "status": READY,
            }
        ]
        for key, want in requirements.items()
        if not key.startswith("existing-")
    } | {key: [] for key in requirements if key.startswith("existing-")}


def placed(preset: str) -> list[Manifest]:
    """Everything a ComputePlane preset renders, stage by stage, as each stage becomes ready."""
    ws = workspace({"preset": preset})
    out = render(ws, PLATFORM, {}, NOW)
    manifests = list(out.resources.values())
    for _ in range(3):
        out = render(ws, PLATFORM, as_observed(out.resources), NOW, answers(out.requirements))
        manifests += out.resources.values()
    return manifests


def composed_kinds() -> set[tuple[str, str]]:
    """(API group, resource) of every kind the function renders: VMs, pods and planes alike."""
    vm = workspace({"snapshots": [{"name": "before-refactor"}]})
    disk = render(vm, PLATFORM, {}, NOW).resources["workspace-volume"]
    cloned = owned({"workspace-volume": {**disk, "status": {"phase": "Succeeded"}}})
    with_snapshot = render(vm, PLATFORM, cloned, NOW).resources
    assert "snapshot-before-refactor" in with_snapshot
    # A bigger disk than the DataVolume was made with: an Object grows its PVC.
    grown = render(workspace({"resources": {"disk": "200Gi"}}), PLATFORM, cloned, NOW).resources
    pod = render(workspace({"preset": "kata"}), PLATFORM, {}, NOW).resources
    manifests = [*with_snapshot.values(), *grown.values(), *pod.values()]
    for name, preset in platform_input()["presets"].items():
        if preset.get("placement", "Namespace") != "Namespace":
            manifests += placed(name)
    return {(g, PLURALS[g, m["kind"]]) for m in manifests for g in [group_of(m["apiVersion"])]}


def test_crossplane_may_manage_exactly_the_composed_kinds() -> None:
    role = find("ClusterRole", "function-workspace-sandbox:crossplane")
    assert role["metadata"]["labels"] == {"rbac.crossplane.io/aggregate-to-crossplane": "true"}
    assert grants(role) == composed_kinds() == {(g, r) for (g, _), r in PLURALS.items()}
    assert all(set(rule["verbs"]) == ALL for rule in role["rules"])
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


def test_crossplane_may_clone_from_the_catalog_namespaces_only() -> None:
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
        (subject,) = binding["subjects"]
        assert f"system:serviceaccount:{subject['namespace']}:{subject['name']}" == CROSSPLANE


# --------------------------------------------------------------------------- provider-kubernetes

CROSSPLANE_NAMESPACE = CROSSPLANE.split(":")[2]
PROVIDER_GROUPS = {"kubernetes.crossplane.io", "kubernetes.m.crossplane.io"}
HOST_CONFIG = "workspace-sandbox-host"
PROVIDER = "system:serviceaccount:crossplane-system:provider-kubernetes"


def provider_account() -> str:
    """The provider's username: the runtime config fixes its ServiceAccount's name."""
    config = find("DeploymentRuntimeConfig", "provider-kubernetes")
    name = config["spec"]["serviceAccountTemplate"]["metadata"]["name"]
    return f"system:serviceaccount:{CROSSPLANE_NAMESPACE}:{name}"


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
    assert shipped == {HOST_CONFIG}


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


# --------------------------------------------------------------------------- tenant RBAC

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


# --------------------------------------------------------------------------- admission policy

POLICY = "workspacesandbox-composition"
MESSAGE = "the platform chooses the Composition for WorkspaceSandboxes; remove spec.crossplane.{}"
REVISION = "workspacesandbox-3f9c2a1"


@cache
def xrd() -> dict[str, Any]:
    return find("CompositeResourceDefinition", "workspacesandboxes.sandbox.cozystack.io")


def test_the_policy_matches_the_platform_composition_and_update_policy() -> None:
    (composition,) = (d for d in documents() if d["kind"] == "Composition")
    assert xrd()["spec"]["defaultCompositionRef"]["name"] == composition["metadata"]["name"]
    assert composition["metadata"]["name"] == "workspacesandbox"
    assert xrd()["spec"]["defaultCompositionUpdatePolicy"] == "Automatic"


def test_the_policy_denies_tenant_writes_of_workspacesandboxes() -> None:
    policy = find("ValidatingAdmissionPolicy", POLICY)
    binding = find("ValidatingAdmissionPolicyBinding", POLICY)
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}
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


def evaluate(expression: str, activation: dict[str, Any]) -> bool:
    result = _compile_rule(expression).runner.evaluate(activation)
    assert isinstance(result, celtypes.BoolType), expression
    return bool(result)


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
    return verdict(POLICY, request, obj, old_obj)


def sandbox_request(
    operation: str, username: str, namespace: str = NAMESPACE, name: str = "alice-api"
) -> dict[str, Any]:
    """An admission request by `username` to write the WorkspaceSandbox `namespace/name`."""
    return {
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "kind": {
            "group": "sandbox.cozystack.io",
            "version": "v1alpha1",
            "kind": "WorkspaceSandbox",
        },
        "resource": {
            "group": "sandbox.cozystack.io",
            "version": "v1alpha1",
            "resource": "workspacesandboxes",
        },
        "namespace": namespace,
        "name": name,
    }


def matches_rule(rule: Mapping[str, Any], request: Mapping[str, Any]) -> bool:
    """Whether a policy's resourceRule covers a request ("*" covers no subresource)."""
    resource = request["resource"]
    sub = request.get("subResource", "")
    name = f"{resource['resource']}/{sub}" if sub else resource["resource"]
    scope = "Namespaced" if request.get("namespace") else "Cluster"
    return (
        request["operation"] in rule["operations"]
        and resource["group"] in rule["apiGroups"]
        and (resource["version"] in rule["apiVersions"] or rule["apiVersions"] == ["*"])
        and (name in rule["resources"] or ("*" in rule["resources"] and not sub))
        and rule.get("scope", "*") in {"*", scope}
    )


def verdict(
    policy: str,
    request: Mapping[str, Any],
    obj: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None = None,
    namespace_labels: Mapping[str, str] | None = None,
) -> str | list[str]:
    """A policy's answer to a request, as the API server reaches it.

    "unmatched" when its matchConstraints leave the request out (a namespaceSelector applies to
    namespaced requests only), "exempt" when a match condition does, otherwise the messages of
    the failing validations ([] is admitted).
    """
    spec = find("ValidatingAdmissionPolicy", policy)["spec"]
    constraints = spec["matchConstraints"]
    if not any(matches_rule(rule, request) for rule in constraints["resourceRules"]):
        return "unmatched"
    labels = namespace_labels or {"kubernetes.io/metadata.name": request.get("namespace", "")}
    if request.get("namespace") and not selects(constraints.get("namespaceSelector", {}), labels):
        return "unmatched"
    activation = {
        "object": json_to_cel(obj),
        "oldObject": json_to_cel(old),
        "request": json_to_cel(request),
        "params": json_to_cel(None),
    }
    if not all(evaluate(c["expression"], activation) for c in spec.get("matchConditions", [])):
        return "exempt"
    # Variables in order, each seeing the ones before it (the API server evaluates them lazily;
    # the policies guard every one, so evaluating them all gives the same answers).
    variables: dict[celtypes.StringType, Any] = {}
    for variable in spec.get("variables", []):
        activation["variables"] = celtypes.MapType(variables)
        rule = _compile_rule(variable["expression"])
        variables[celtypes.StringType(variable["name"])] = rule.runner.evaluate(activation)
    activation["variables"] = celtypes.MapType(variables)
    return [v["message"] for v in spec["validations"] if not evaluate(v["expression"], activation)]


PLATFORM_CHOICE = {
    "compositionRef": {"name": "workspacesandbox"},
    "compositionRevisionRef": {"name": REVISION},
}


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
            [MESSAGE.format("compositionRef")],
            id="create-naming-another-composition",
        ),
        pytest.param(
            {"compositionSelector": {"matchLabels": {"tier": "open"}}},
            TENANT,
            None,
            [MESSAGE.format("compositionSelector")],
            id="create-selecting-a-composition",
        ),
        pytest.param(
            {"compositionUpdatePolicy": "Manual"},
            TENANT,
            None,
            [MESSAGE.format("compositionUpdatePolicy")],
            id="create-pinning-a-revision-manually",
        ),
        pytest.param(
            {"compositionRevisionSelector": {"matchLabels": {"channel": "old"}}},
            TENANT,
            None,
            [MESSAGE.format("compositionRevisionSelector")],
            id="create-selecting-a-revision",
        ),
        pytest.param(
            {"compositionRevisionRef": {"name": "workspacesandbox-open-3f9c2a1"}},
            TENANT,
            None,
            [MESSAGE.format("compositionRevisionRef")],
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
                MESSAGE.format(f)
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
                "compositionRevisionRef": {"name": REVISION},
            },
            TENANT,
            PLATFORM_CHOICE,
            [MESSAGE.format("compositionRef")],
            id="update-switching-to-another-composition",
        ),
        pytest.param(
            {**PLATFORM_CHOICE, "compositionUpdatePolicy": "Manual"},
            TENANT,
            PLATFORM_CHOICE,
            [MESSAGE.format("compositionUpdatePolicy")],
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
            [MESSAGE.format("compositionRef")],
            id="other-crossplane-system-accounts-are-checked",
        ),
        pytest.param(
            {"compositionRef": {"name": "open-sandbox"}},
            "system:serviceaccount:tenant-acme:crossplane",
            None,
            [MESSAGE.format("compositionRef")],
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
    (condition,) = find("ValidatingAdmissionPolicy", POLICY)["spec"]["matchConditions"]
    assert f"'{CROSSPLANE}'" in condition["expression"]


# --------------------------------------------------------------------------- who writes them

WRITERS = "provider-kubernetes-writers"
COLLECTOR = "system:serviceaccount:kube-system:generic-garbage-collector"
NAMESPACE_CONTROLLER = "system:serviceaccount:kube-system:namespace-controller"
CONTROLLER_MANAGER = "system:kube-controller-manager"
WRITERS_MESSAGE = (
    "only Crossplane and provider-kubernetes write provider-kubernetes objects and provider "
    "configs here: they act with a ComputePlane's admin credential or the provider's own identity"
)
KINDS = {
    "objects": "Object",
    "providerconfigs": "ProviderConfig",
    "observedobjectcollections": "ObservedObjectCollection",
    "providerconfigusages": "ProviderConfigUsage",
    "clusterproviderconfigs": "ClusterProviderConfig",
}
TENANT_NAMESPACE = {"kubernetes.io/metadata.name": NAMESPACE}


def provider_request(
    operation: str,
    username: str,
    resource: str = "objects",
    *,
    namespace: str = NAMESPACE,
    group: str = "kubernetes.m.crossplane.io",
    sub_resource: str = "",
) -> dict[str, Any]:
    """An admission request for a provider-kubernetes kind ("" namespace: cluster-scoped)."""
    request: dict[str, Any] = {
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "kind": {"group": group, "version": "v1alpha1", "kind": KINDS[resource]},
        "resource": {"group": group, "version": "v1alpha1", "resource": resource},
        "name": "alice-api-plane-access",
    }
    if namespace:
        request["namespace"] = namespace
    if sub_resource:
        request["subResource"] = sub_resource
    return request


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
        "kind": KINDS[resource],
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


# --------------------------------------------------------------------------- the host identity

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
