"""deploy/argocd: the argocd-cm changes, the resource exclusions and the Application's scope."""

import fnmatch
import json
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.deploy.argocd import ARGOCD, GOLDEN, HEALTH_KEY, HEALTH_LUA
from tests.schemas import validate
from tests.support import (
    ROOT,
    load_stream,
)


def argocd_cm() -> dict[str, Any]:
    docs = load_stream(ARGOCD / "argocd-cm.yaml")
    assert len(docs) == 1
    return docs[0]


def test_argocd_cm_holds_health_lua_byte_for_byte() -> None:
    assert argocd_cm()["data"][HEALTH_KEY].encode() == HEALTH_LUA.read_bytes()


def test_argocd_cm_is_a_valid_configmap_holding_only_the_health_key() -> None:
    cm = argocd_cm()
    assert validate(cm) == []
    assert (cm["apiVersion"], cm["kind"]) == ("v1", "ConfigMap")
    assert (cm["metadata"]["name"], cm["metadata"]["namespace"]) == ("argocd-cm", "argocd")
    assert cm["metadata"]["labels"]["app.kubernetes.io/part-of"] == "argocd"
    # Every other argocd-cm key is the whole instance's (the tracking method, exclusions, the
    # resource.customizations blob): merging one would change every other Application too.
    assert list(cm["data"]) == [HEALTH_KEY]
    assert HEALTH_KEY.endswith(".sandbox.cozystack.io_WorkspaceSandbox")


def test_no_manifest_sets_the_instance_wide_tracking_method() -> None:
    # Argo CD has no per-Application tracking method; switching is the README's opt-in step.
    for path in sorted(ARGOCD.glob("*.yaml")):
        text = json.dumps(list(yaml.safe_load_all(path.read_text())))
        assert "resourceTrackingMethod" not in text, path.name


EXCLUSIONS = ARGOCD / "resource-exclusions.yaml"
EXCLUSIONS_JQ = ARGOCD / "resource-exclusions.jq"
IN_CLUSTER = "https://kubernetes.default.svc"
# Part of Argo CD's default argocd-cm (manifests/base/config/argocd-cm.yaml): what an append
# must keep.
DEFAULT_EXCLUSIONS = """\
### Internal Kubernetes resources excluded reduce the number of watched events
- apiGroups:
  - coordination.k8s.io
  kinds:
  - Lease
- apiGroups:
  - cilium.io
  kinds:
  - CiliumIdentity
  - CiliumEndpoint
  - CiliumEndpointSlice
"""


def exclusion_rules() -> list[dict[str, Any]]:
    rules = yaml.safe_load(EXCLUSIONS.read_text())
    assert isinstance(rules, list)
    return rules


def is_excluded(rules: list[dict[str, Any]], group: str, kind: str) -> bool:
    """Argo CD's FilteredResource.Match: group globs, exact kinds or "*", empty lists match all."""

    def matches(patterns: list[str] | None, value: str, *, glob: bool) -> bool:
        if not patterns:
            return True
        return any(fnmatch.fnmatchcase(value, p) if glob else p in {"*", value} for p in patterns)

    return any(
        matches(r.get("apiGroups"), group, glob=True)
        and matches(r.get("kinds"), kind, glob=False)
        and matches(r.get("clusters"), IN_CLUSTER, glob=True)
        for r in rules
    )


def test_exclusion_rules_are_crossplanes_provider_config_usage_rule() -> None:
    rules = exclusion_rules()
    assert rules == [{"apiGroups": ["*"], "kinds": ["ProviderConfigUsage"]}]


@pytest.mark.parametrize(
    "group",
    ["kubernetes.m.crossplane.io", "kubernetes.crossplane.io", "aws.m.upbound.io"],
)
def test_exclusion_hides_provider_config_usages(group: str) -> None:
    assert is_excluded(exclusion_rules(), group, "ProviderConfigUsage")


def applied_and_composed() -> set[tuple[str, str]]:
    """(group, kind) of everything the platform Application applies and a sandbox becomes."""
    docs = [d for path in sorted((ROOT / "deploy").glob("*.yaml")) for d in load_stream(path)]
    docs += [d for path in sorted(GOLDEN.glob("*.yaml")) for d in load_stream(path)]
    docs += [d["spec"]["forProvider"]["manifest"] for d in docs if d["kind"] == "Object"]
    return {(d["apiVersion"].rpartition("/")[0], d["kind"]) for d in docs if "kind" in d}


def test_exclusion_hides_nothing_applied_or_composed() -> None:
    kinds = applied_and_composed()
    assert ("kubernetes.m.crossplane.io", "Object") in kinds  # the plane placements are there
    assert ("apiextensions.crossplane.io", "CompositeResourceDefinition") in kinds
    assert [k for k in sorted(kinds) if is_excluded(exclusion_rules(), *k)] == []


JQ = shutil.which("jq")


def append_exclusions(cm: dict[str, Any]) -> dict[str, Any]:
    """The README's command, without the cluster: argocd-cm through resource-exclusions.jq."""
    assert JQ is not None
    out = subprocess.run(
        [JQ, "--rawfile", "add", str(EXCLUSIONS), "-f", str(EXCLUSIONS_JQ)],
        input=json.dumps(cm),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def configmap(data: dict[str, str] | None) -> dict[str, Any]:
    cm: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "argocd-cm"},
    }
    if data is not None:
        cm["data"] = data
    return cm


@pytest.mark.skipif(JQ is None, reason="needs jq")
@pytest.mark.parametrize(
    "existing",
    [
        pytest.param(DEFAULT_EXCLUSIONS, id="argo-cd-default-rules"),
        pytest.param(DEFAULT_EXCLUSIONS.rstrip("\n"), id="no-trailing-newline"),
        pytest.param("", id="empty"),
        pytest.param(None, id="unset"),
    ],
)
def test_appending_keeps_every_rule_already_there(existing: str | None) -> None:
    data = {"application.instanceLabelKey": "argocd.argoproj.io/instance"}
    if existing is not None:
        data["resource.exclusions"] = existing
    cm = append_exclusions(configmap(data))
    rules = yaml.safe_load(cm["data"]["resource.exclusions"])
    assert rules == (yaml.safe_load(existing or "[]") or []) + exclusion_rules()
    assert cm["data"]["application.instanceLabelKey"] == "argocd.argoproj.io/instance"
    assert cm["metadata"] == {"name": "argocd-cm"}
    assert append_exclusions(cm) == cm, "a second run changes nothing"


@pytest.mark.skipif(JQ is None, reason="needs jq")
def test_appending_to_a_configmap_without_data() -> None:
    cm = append_exclusions(configmap(None))
    assert yaml.safe_load(cm["data"]["resource.exclusions"]) == exclusion_rules()


@pytest.mark.skipif(JQ is None, reason="needs jq")
def test_an_existing_provider_config_usage_rule_is_left_alone() -> None:
    guide = '- apiGroups:\n  - "*"\n  kinds:\n  - ProviderConfigUsage\n'
    cm = configmap({"resource.exclusions": DEFAULT_EXCLUSIONS + guide})
    assert append_exclusions(cm) == cm


def test_readme_runs_the_filter_on_the_live_configmap() -> None:
    readme = (ARGOCD / "README.md").read_text()
    command = (
        "jq --rawfile add deploy/argocd/resource-exclusions.yaml"
        " -f deploy/argocd/resource-exclusions.jq"
    )
    assert command in readme
    assert "| kubectl replace -f -" in readme


def test_application_shape() -> None:
    docs = load_stream(ARGOCD / "application.yaml")
    assert len(docs) == 1
    app = docs[0]
    assert (app["apiVersion"], app["kind"]) == ("argoproj.io/v1alpha1", "Application")
    assert (app["metadata"]["name"], app["metadata"]["namespace"]) == (
        "function-workspace-sandbox",
        "argocd",
    )
    spec = app["spec"]
    assert spec["project"] == "default"
    assert spec["source"] == {
        "repoURL": "https://github.com/cozystack/function-workspace-sandbox",
        "targetRevision": "v0.1.0",
        "path": "deploy",
    }
    assert spec["destination"] == {"server": "https://kubernetes.default.svc"}
    assert spec["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
    assert "ServerSideApply=true" in spec["syncPolicy"]["syncOptions"]
    assert (ROOT / spec["source"]["path"]).is_dir()


def test_the_application_does_not_apply_the_argocd_folder() -> None:
    source = load_stream(ARGOCD / "application.yaml")[0]["spec"]["source"]
    folder = ROOT / source["path"]
    assert folder == ARGOCD.parent
    kustomization = folder / "kustomization.yaml"
    if kustomization.exists():
        assert "directory" not in source, "a directory source would skip kustomize"
        listed = yaml.safe_load(kustomization.read_text()).get("resources", [])
        assert not [r for r in listed if (folder / r).resolve().is_relative_to(ARGOCD)]
    else:
        assert source.get("directory", {}).get("recurse") is False


def test_yaml_files_parse_without_duplicate_keys() -> None:
    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader: Strict, node: yaml.MappingNode) -> dict[Any, Any]:
        keys = [loader.construct_object(k) for k, _ in node.value]
        assert len(keys) == len(set(keys)), f"duplicate keys in {node.start_mark}"
        return loader.construct_mapping(node)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    for path in sorted(ARGOCD.glob("*.yaml")):
        assert list(yaml.load_all(path.read_text(), Strict)), path  # a SafeLoader
