"""Every rendered object is schema valid; every pod passes Pod Security."""

import copy
import json
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from typing import Any

import jsonschema
import pytest

from function.compose.names import (
    service_account_name,
)
from function.render import Rendered
from tests.plane.provider import (
    ALICE_API,
    DEDICATED,
    PLACEMENTS,
    Placement,
    expected_violations,
    inner,
    pod_spec,
    settled_in_plane,
)
from tests.render.pod_security import all_violations
from tests.schemas import composed_errors, crds_root, validate
from tests.support import (
    AGENT_IMAGE,
    AGENT_PLATFORM,
    NAMESPACE,
)

RICH = {
    "resources": {"cpu": "1500m", "memory": "4096Mi", "disk": "50Gi"},
    "ports": [{"name": "preview", "port": 3000}, {"name": "api", "port": 8080}],
    "snapshots": [{"name": "nightly"}, {"name": "before-refactor"}],
    "network": {
        "egress": "Allowlist",
        "allow": [
            {"fqdn": "pypi.org"},
            {"fqdn": "*.pythonhosted.org", "ports": [443]},
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


def _strict(schema: Any) -> Any:
    """A copy in which every object with listed properties allows no others.

    The chart's schema leaves unknown node-group fields to pass through unvalidated; a
    misspelt field would then validate and be silently ignored.
    """
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


@cache
def _plane_values() -> jsonschema.protocols.Validator:
    path = crds_root() / "cozystack" / "apps" / "computeplane" / "values.schema.json"
    schema = _strict(json.loads(path.read_text()))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def plane_values_errors(values: Mapping[str, Any]) -> list[str]:
    return sorted(
        f"{'.'.join(str(x) for x in e.absolute_path)}: {e.message}"
        for e in _plane_values().iter_errors(values)
    )


def schema_errors(out: Rendered) -> dict[str, list[str]]:
    errors = composed_errors(out.resources, NAMESPACE)
    for key, composed in out.resources.items():
        m = (
            composed["spec"]["forProvider"]["manifest"]
            if composed["kind"] == "Object"
            else composed
        )
        if m["kind"] == "ComputePlane" and (values := plane_values_errors(m["spec"])):
            errors[key] = [*errors.get(key, []), *(f"values: {e}" for e in values)]
    return errors


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize("spec", SPECS)
def test_every_object_and_every_wrapped_manifest_is_schema_valid(
    p: Placement, spec: dict[str, Any]
) -> None:
    out, _ = settled_in_plane(p, spec)
    kinds = {inner(out, k)["kind"] for k, m in out.resources.items() if m["kind"] == "Object"}
    assert p.workload_kind in kinds
    if spec.get("snapshots"):
        assert "VolumeSnapshot" in kinds
    assert schema_errors(out) == {}


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize("spec", SPECS)
def test_the_simulated_provider_reports_objects_the_api_server_would(
    p: Placement, spec: dict[str, Any]
) -> None:
    _, observed = settled_in_plane(p, spec)
    for key, m in observed.items():
        if m["kind"] == "Object":
            assert validate(m) == [], key
            assert validate(m["status"]["atProvider"]["manifest"]) == [], key


def test_the_checks_would_catch_a_broken_render() -> None:
    out, _ = settled_in_plane(DEDICATED)
    broken = copy.deepcopy(out.resources)
    broken["compute-plane"]["spec"]["forProvider"]["manifest"]["spec"]["nodeGroups"]["md0"][
        "instancetype"
    ] = "u1.xlarge"
    broken["plane-namespace"]["spec"]["readiness"] = {"policy": "DeriveFromCelQuery"}
    broken["statefulset"]["spec"]["forProvider"]["manifest"]["spec"]["replicas"] = "one"
    broken["plane-access"]["spec"]["credentials"]["source"] = "Kubeconfig"
    errors = schema_errors(replace(out, resources=broken))
    assert sorted(errors) == ["compute-plane", "plane-access", "plane-namespace", "statefulset"]
    unknown = "Additional properties are not allowed ('instancetype' was unexpected)"
    assert errors["compute-plane"] == [
        "manifest: spec.nodeGroups.md0.instancetype: unknown field",
        f"values: nodeGroups.md0: {unknown}",
    ]


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize("spec", SPECS)
def test_every_wrapped_pod_passes_pod_security(p: Placement, spec: dict[str, Any]) -> None:
    out, _ = settled_in_plane(p, spec)
    pod = pod_spec(inner(out, p.workload))
    account = inner(out, "service-account")["metadata"]["name"]
    assert account == service_account_name(ALICE_API)
    assert all_violations(pod, service_account=account) == expected_violations(p)


@pytest.mark.parametrize("p", PLACEMENTS)
def test_a_delivered_agent_reaches_the_wrapped_pod_hardened_and_schema_valid(p: Placement) -> None:
    delivering = replace(p, platform=p.platform.model_copy(update={"agent": AGENT_PLATFORM.agent}))
    out, _ = settled_in_plane(delivering)
    assert schema_errors(out) == {}
    pod = pod_spec(inner(out, p.workload))
    (copy_in,) = pod["initContainers"]
    assert copy_in["image"] == AGENT_IMAGE
    assert pod["containers"][0]["command"][:3] == [
        "/usr/bin/python3",
        "-I",
        "/opt/workspace-sandbox-agent/workspace-sandbox-agent",
    ]
    assert pod["containers"][0]["readinessProbe"]["httpGet"] == {"path": "/health", "port": 49983}
    account = inner(out, "service-account")["metadata"]["name"]
    assert all_violations(pod, service_account=account) == expected_violations(p)
