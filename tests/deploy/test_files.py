"""deploy/: every manifest validates, the kustomization lists and builds them."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.install import (
    DEPLOY,
    KUSTOMIZATION,
    MANIFESTS,
    documents,
    find,
    identity,
    kustomize,
    needs_kubectl,
)
from tests.schemas import validate
from tests.support import (
    ROOT,
    load_stream,
)


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


@needs_kubectl
def test_kustomization_builds_to_the_manifests() -> None:
    _, built = kustomize(DEPLOY)
    assert sorted(built, key=identity) == sorted(documents(), key=identity)


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
