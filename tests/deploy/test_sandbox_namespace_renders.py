"""What the function renders for a SandboxNamespace preset is what the install lets through.

The admission policies and the provider's role in deploy/ are written against a contract; these
tests hold the function's own output to it: every Object it composes is admitted when Crossplane
writes it, every object the provider then writes into the sandbox's namespace is admitted and
granted, and the namespace it creates carries the marker the policies key on.
"""

from typing import Any

import pytest

from function.compose.placements import sandbox_namespace
from function.model import Manifest
from function.render import Rendered, render
from tests.cluster import applied
from tests.deploy.admission import provider_request, verdict
from tests.deploy.install import (
    CROSSPLANE,
    MARKER,
    NAMESPACES_CONFIG,
    PLURALS,
    PROVIDER,
    documents,
    group_of,
)
from tests.support import NAMESPACE, NOW, PLATFORM, owned, platform_input, workspace

ISOLATED = sorted(
    name
    for name, preset in platform_input()["presets"].items()
    if preset.get("placement") == "SandboxNamespace"
)
OBJECTS_POLICY = "workspace-sandbox-namespaces-objects"
HOST_WRITES = "provider-kubernetes-host-writes"
MARKER_POLICY = "sandbox-namespace-marker"
# The kinds only ever wrapped, beside those Crossplane composes itself.
RESOURCES = {
    **PLURALS,
    ("", "Namespace"): "namespaces",
    ("", "ResourceQuota"): "resourcequotas",
    ("", "LimitRange"): "limitranges",
}
EVERYTHING = {
    "snapshots": [{"name": "before-refactor"}],
    "network": {"egress": "Allowlist", "allow": [{"fqdn": "pypi.org", "ports": [443]}]},
}


def settled(preset: str, spec: dict[str, Any] | None = None) -> Rendered:
    """The sandbox rendered until nothing changes in a healthy cluster."""
    ws = workspace({"preset": preset, **(spec or {})})
    observed: dict[str, Any] = {}
    for _ in range(8):
        out = render(ws, PLATFORM, owned(observed), NOW)
        after = applied(out)
        if after == observed:
            return out
        observed = after
    raise AssertionError("the placement never settled")


def objects(out: Rendered) -> list[Manifest]:
    return [m for m in out.resources.values() if m["kind"] == "Object"]


def test_the_shipped_composition_offers_isolated_presets() -> None:
    assert ISOLATED == ["isolated", "isolated-kata"]
    assert PLATFORM.sandbox_namespaces.cluster_provider_config == NAMESPACES_CONFIG


@pytest.mark.parametrize("preset", ISOLATED)
def test_crossplane_writing_each_object_is_admitted(preset: str) -> None:
    out = settled(preset, EVERYTHING)
    assert len(objects(out)) >= 8
    for obj in objects(out):
        stored = {**obj, "metadata": {**obj["metadata"], "namespace": NAMESPACE}}
        # The API server defaults what the function leaves out before admission sees it.
        stored["spec"] = {"managementPolicies": ["*"], "watch": False, **obj["spec"]}
        sent = {**provider_request("CREATE", CROSSPLANE), "name": obj["metadata"]["name"]}
        assert verdict(OBJECTS_POLICY, sent, stored, None) == [], obj["metadata"]["name"]


def _request(manifest: Manifest, username: str) -> dict[str, Any]:
    group, kind = group_of(manifest["apiVersion"]), manifest["kind"]
    version = manifest["apiVersion"].rpartition("/")[2]
    resource = RESOURCES[group, kind]
    out: dict[str, Any] = {
        "operation": "CREATE",
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "name": manifest["metadata"]["name"],
    }
    if "namespace" in manifest["metadata"]:
        out["namespace"] = manifest["metadata"]["namespace"]
    return out


@pytest.mark.parametrize("preset", ISOLATED)
def test_the_provider_writing_each_wrapped_object_is_admitted(preset: str) -> None:
    out = settled(preset, EVERYTHING)
    wrapped = [o["spec"]["forProvider"]["manifest"] for o in objects(out)]
    (ns,) = [m for m in wrapped if m["kind"] == "Namespace"]
    labels = {"kubernetes.io/metadata.name": ns["metadata"]["name"], **ns["metadata"]["labels"]}
    assert labels[MARKER] == NAMESPACE
    assert verdict(MARKER_POLICY, _request(ns, PROVIDER), ns, None) == []
    assert verdict(HOST_WRITES, _request(ns, PROVIDER), ns, None) == []
    for manifest in wrapped:
        if manifest["kind"] == "Namespace":
            continue
        assert manifest["metadata"]["namespace"] == ns["metadata"]["name"]
        sent = _request(manifest, PROVIDER)
        assert verdict(HOST_WRITES, sent, manifest, None, labels) == [], manifest["kind"]


@pytest.mark.parametrize("preset", ISOLATED)
def test_the_provider_is_granted_every_kind_it_writes(preset: str) -> None:
    bound = {
        d["roleRef"]["name"]
        for d in documents()
        if d["kind"] == "ClusterRoleBinding"
        and any(s.get("name") == PROVIDER.rpartition(":")[2] for s in d["subjects"])
    }
    granted = {
        (g, r, v)
        for d in documents()
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] in bound
        for rule in d["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    out = settled(preset, EVERYTHING)
    for obj in objects(out):
        manifest = obj["spec"]["forProvider"]["manifest"]
        group, kind = group_of(manifest["apiVersion"]), manifest["kind"]
        resource = RESOURCES[group, kind]
        verbs = {"get", "patch"} if obj["spec"].get("managementPolicies") else {"create", "delete"}
        for verb in verbs:
            assert (group, resource, verb) in granted, (kind, verb)


def test_the_disk_grows_through_the_sandbox_namespaces_identity() -> None:
    out = settled("isolated")
    ws = workspace({"preset": "isolated", "resources": {"disk": "40Gi"}})
    grown = render(ws, PLATFORM, owned(applied(out)), NOW).resources["workspace-volume-size"]
    assert grown["spec"]["providerConfigRef"] == {
        "kind": "ClusterProviderConfig",
        "name": NAMESPACES_CONFIG,
    }
    assert grown["spec"]["managementPolicies"] == ["Observe", "Update"]
    claim = grown["spec"]["forProvider"]["manifest"]
    namespace = out.status["sandboxNamespace"]
    assert claim["metadata"]["namespace"] == namespace
    assert claim["spec"]["resources"]["requests"]["storage"] == "40Gi"
    stored = {**grown, "metadata": {**grown["metadata"], "namespace": NAMESPACE}}
    stored["spec"] = {"watch": False, **grown["spec"]}
    sent = {**provider_request("CREATE", CROSSPLANE), "name": grown["metadata"]["name"]}
    assert verdict(OBJECTS_POLICY, sent, stored, None) == []


def test_the_marker_is_the_placements_label() -> None:
    assert sandbox_namespace.TENANT_LABEL == MARKER
