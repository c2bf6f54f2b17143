"""The platform install in deploy/ as documents, and the accounts that act on it."""

import os
import shutil
import subprocess
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from function.model import Manifest
from function.render import render
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


CROSSPLANE_NAMESPACE = CROSSPLANE.split(":")[2]
PROVIDER_GROUPS = {"kubernetes.crossplane.io", "kubernetes.m.crossplane.io"}
HOST_CONFIG = "workspace-sandbox-host"
NAMESPACES_CONFIG = "workspace-sandbox-namespaces"
PLANES_CONFIG = "workspace-sandbox-planes"
MARKER = "sandbox.cozystack.io/tenant-namespace"
PROVIDER = "system:serviceaccount:crossplane-system:provider-kubernetes"


def provider_account() -> str:
    """The provider's username: the runtime config fixes its ServiceAccount's name."""
    config = find("DeploymentRuntimeConfig", "provider-kubernetes")
    name = config["spec"]["serviceAccountTemplate"]["metadata"]["name"]
    return f"system:serviceaccount:{CROSSPLANE_NAMESPACE}:{name}"


@cache
def xrd() -> dict[str, Any]:
    return find("CompositeResourceDefinition", "workspacesandboxes.sandbox.cozystack.io")


COLLECTOR = "system:serviceaccount:kube-system:generic-garbage-collector"
NAMESPACE_CONTROLLER = "system:serviceaccount:kube-system:namespace-controller"
CONTROLLER_MANAGER = "system:kube-controller-manager"
TENANT_NAMESPACE = {"kubernetes.io/metadata.name": NAMESPACE}


def _kubectl() -> str | None:
    """kubectl from PATH, else the one scripts/cluster-tools builds for the control-plane tier."""
    if found := shutil.which("kubectl"):
        return found
    tools = ROOT / "scripts" / "cluster-tools"
    run = subprocess.run(
        [tools, "built", "kubernetes"], capture_output=True, text=True, check=False
    )
    return str(Path(run.stdout.strip()) / "kubectl") if run.returncode == 0 else None


KUBECTL = _kubectl()
# In CI the tools are built (.ci/run), so a missing kubectl fails there rather than skipping.
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None and not os.environ.get("CI"), reason="needs kubectl for kustomize"
)


def kustomize(folder: Path) -> tuple[str, list[dict[str, Any]]]:
    """`kubectl kustomize` of a folder: its output, and the documents in it."""
    assert KUBECTL, "no kubectl: build it with scripts/cluster-tools kubernetes"
    run = subprocess.run(
        [str(KUBECTL), "kustomize", str(folder)], check=False, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    return run.stdout, [d for d in yaml.safe_load_all(run.stdout) if d]
