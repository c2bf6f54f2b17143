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

from function.render import render
from tests.schemas import _compile_rule, validate, validate_xrd_object
from tests.support import NAMESPACE, NOW, PLATFORM, ROOT, load_stream, platform_input, workspace

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


@pytest.mark.parametrize(
    ("copy_name", "source"),
    [
        ("xrd.yaml", "apis/workspacesandbox/definition.yaml"),
        ("composition.yaml", "compositions/workspacesandbox.yaml"),
    ],
)
def test_deploy_copies_match_their_sources(copy_name: str, source: str) -> None:
    assert (DEPLOY / copy_name).read_bytes() == (ROOT / source).read_bytes(), (
        f"deploy/{copy_name} differs from {source}; copy {source} to deploy/{copy_name}"
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


def composed_kinds() -> set[tuple[str, str]]:
    """(API group, resource) of every kind the function renders, VMs and pods alike."""
    vm = workspace({"snapshots": [{"name": "before-refactor"}]})
    disk = render(vm, PLATFORM, {}, NOW).resources["workspace-volume"]
    cloned = {"workspace-volume": {**disk, "status": {"phase": "Succeeded"}}}
    with_snapshot = render(vm, PLATFORM, cloned, NOW).resources
    assert "snapshot-before-refactor" in with_snapshot
    pod = render(workspace({"preset": "kata"}), PLATFORM, {}, NOW).resources
    manifests = [*with_snapshot.values(), *pod.values()]
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
    request = {
        "operation": "CREATE" if old is None else "UPDATE",
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
        "namespace": NAMESPACE,
        "name": "alice-api",
    }
    activation = {
        "object": json_to_cel(obj),
        "oldObject": json_to_cel(old_obj),
        "request": json_to_cel(request),
        "params": json_to_cel(None),
    }
    spec = find("ValidatingAdmissionPolicy", POLICY)["spec"]
    if not all(evaluate(c["expression"], activation) for c in spec["matchConditions"]):
        return "exempt"
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
