"""Every Object and what it carries into the sandbox namespace is schema valid; pods pass Pod
Security restricted; the XR's status is what the XRD allows."""

import copy
from typing import Any

import pytest
import yaml

from function.compose.names import service_account_name
from function.render import Rendered
from tests.render.pod_security import all_violations
from tests.sandbox_namespace.world import (
    HOME,
    ISOLATED,
    ISOLATED_KATA,
    carried,
    objects,
    settled_in_namespace,
    steps,
)
from tests.schemas import composed_errors, validate, validate_xrd_object
from tests.support import NAMESPACE, ROOT, workspace, xr

XRD = yaml.safe_load((ROOT / "apis" / "workspacesandbox" / "definition.yaml").read_text())
PRESETS = [pytest.param(ISOLATED, id="kubevirt"), pytest.param(ISOLATED_KATA, id="kata")]
RICH = {
    "resources": {"cpu": "1500m", "memory": "4096Mi", "disk": "50Gi"},
    "ports": [{"name": "preview", "port": 3000}, {"name": "api", "port": 8080}],
    "snapshots": [{"name": "nightly"}, {"name": "before-refactor"}],
    "network": {
        "egress": "Allowlist",
        "allow": [
            {"fqdn": "pypi.org"},
            {"fqdn": "*.pythonhosted.org", "ports": [443]},
            {"bundle": "package-registries"},
            {"cidr": "140.82.121.0/24", "ports": [22, 443]},
            {"cidr": "2606:4700::/32"},
        ],
    },
}
SPECS = [
    pytest.param({}, id="defaults"),
    pytest.param(RICH, id="rich"),
    pytest.param({**RICH, "power": "Suspended"}, id="rich-suspended"),
    pytest.param({"network": {"egress": "None"}}, id="egress-none"),
]


def schema_errors(out: Rendered) -> dict[str, list[str]]:
    return composed_errors(out.resources, NAMESPACE)


def _pod_spec(out: Rendered, preset: str) -> dict[str, Any]:
    if preset == ISOLATED_KATA:
        spec: dict[str, Any] = carried(out, "sandbox")["spec"]["podTemplate"]["spec"]
        return spec
    vm: dict[str, Any] = carried(out, "vm")["spec"]["template"]["spec"]
    return vm


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("spec", SPECS)
def test_every_object_and_what_it_carries_is_schema_valid(
    preset: str, spec: dict[str, Any]
) -> None:
    out, _ = settled_in_namespace(preset, spec)
    kinds = {carried(out, k)["kind"] for k in objects(out)}
    assert {"Namespace", "ResourceQuota", "LimitRange", "CiliumNetworkPolicy"} <= kinds
    assert ("VirtualMachine" if preset == ISOLATED else "Sandbox") in kinds
    if spec.get("snapshots"):
        assert "VolumeSnapshot" in kinds
    assert schema_errors(out) == {}


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("spec", SPECS)
def test_the_simulated_provider_reports_objects_the_api_server_would(
    preset: str, spec: dict[str, Any]
) -> None:
    _, observed = settled_in_namespace(preset, spec)
    for key, m in observed.items():
        if m["kind"] == "Object":
            assert validate(m) == [], key
            assert validate(m["status"]["atProvider"]["manifest"]) == [], key


def test_the_checks_would_catch_a_broken_render() -> None:
    out, _ = settled_in_namespace(ISOLATED_KATA)
    broken = copy.deepcopy(out.resources)
    broken["sandbox-namespace"]["spec"]["readiness"] = {"policy": "DeriveFromCelQuery"}
    broken["namespace-quota"]["spec"]["forProvider"]["manifest"]["spec"]["hard"] = ["pods"]
    broken["sandbox"]["spec"]["forProvider"]["manifest"]["spec"]["replicas"] = "one"
    errors = schema_errors(Rendered(**{**out.__dict__, "resources": broken}))
    assert sorted(errors) == ["namespace-quota", "sandbox", "sandbox-namespace"]


@pytest.mark.parametrize("spec", SPECS)
def test_the_kata_pod_passes_pod_security_restricted(spec: dict[str, Any]) -> None:
    out, _ = settled_in_namespace(ISOLATED_KATA, spec)
    account = carried(out, "service-account")["metadata"]
    assert account == {**account, "name": service_account_name(workspace()), "namespace": HOME}
    pod = _pod_spec(out, ISOLATED_KATA)
    assert pod["runtimeClassName"] == "kata-clh"
    assert all_violations(pod, service_account=account["name"]) == []


def test_a_pod_security_weakening_would_be_caught() -> None:
    out, _ = settled_in_namespace(ISOLATED_KATA)
    pod = copy.deepcopy(_pod_spec(out, ISOLATED_KATA))
    pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    assert all_violations(pod, service_account=pod.get("serviceAccountName")) != []


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("spec", SPECS)
def test_the_status_is_what_the_xrd_allows(preset: str, spec: dict[str, Any]) -> None:
    for out, _ in steps(preset, spec):
        composite = {**xr({"preset": preset, **spec}), "status": out.status}
        assert validate_xrd_object(XRD, composite) == []
        assert out.status["sandboxNamespace"] == HOME
        assert out.status["placement"] == "SandboxNamespace"


def test_the_xrd_check_would_catch_a_bad_status() -> None:
    out, _ = settled_in_namespace(ISOLATED)
    status = {**out.status, "sandboxNamespace": "x" * 64}
    assert validate_xrd_object(XRD, {**xr({"preset": ISOLATED}), "status": status}) != []
