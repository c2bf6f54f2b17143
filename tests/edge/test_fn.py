"""The edge at the SDK level: a request in, a response compared, as Crossplane would call it."""

from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from crossplane.function.runtime import BetaFunctionRunner
from google.protobuf import json_format

from function import fn
from function.compose.kubernetes_object import GROWN
from function.compose.names import new_identity, object_name
from function.fn import FunctionRunner
from tests.support import (
    AGENT_WARNING,
    EXAMPLES,
    NAMESPACE,
    NOW,
    agent_platform_input,
    load_stream,
    observed_of,
    platform_input,
    request,
    results,
    workspace,
    xr,
)


async def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    return await FunctionRunner(clock=lambda: NOW).RunFunction(req, None)


def desired(rsp: fnv1.RunFunctionResponse) -> dict[str, dict[str, Any]]:
    return {k: resource.struct_to_dict(v.resource) for k, v in rsp.desired.resources.items()}


async def test_new_sandbox_renders_disk_vm_and_service_none_ready() -> None:
    rsp = await run(request(xr()))
    assert not results(rsp)
    assert sorted(rsp.desired.resources) == [
        "cilium-policy",
        "network-policy",
        "service",
        "vm",
        "workspace-volume",
    ]
    assert {v.ready for v in rsp.desired.resources.values()} == {fnv1.READY_FALSE}
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    assert rsp.meta.tag == "test"
    assert rsp.meta.ttl.seconds == 60


async def test_running_example_marks_everything_ready_and_the_xr_ready() -> None:
    case = next(c for c in EXAMPLES if c.name == "running")
    composite = load_stream(case / "xr.yaml")[0]
    rsp = await run(request(composite, observed_of(case)))
    assert all(r.ready == fnv1.READY_TRUE for r in rsp.desired.resources.values())
    assert rsp.desired.composite.ready == fnv1.READY_TRUE
    status = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    assert status["phase"] == "Running"
    assert status["endpoint"] == "alice-api.tenant-acme.svc"
    conditions = [(c.type, c.status, c.reason) for c in rsp.conditions]
    assert conditions == [
        ("Provisioned", fnv1.STATUS_CONDITION_TRUE, "Provisioned"),
        ("Suspended", fnv1.STATUS_CONDITION_FALSE, "PowerRunning"),
        ("Snapshots", fnv1.STATUS_CONDITION_TRUE, "Ready"),
    ]


async def test_suspended_sandbox_is_not_ready_and_says_suspended() -> None:
    case = next(c for c in EXAMPLES if c.name == "suspended")
    composite = load_stream(case / "xr.yaml")[0]
    rsp = await run(request(composite, observed_of(case)))
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
    assert rsp.desired.resources["vm"].ready == fnv1.READY_TRUE  # halted, as desired
    suspended = next(c for c in rsp.conditions if c.type == "Suspended")
    assert (suspended.status, suspended.reason) == (fnv1.STATUS_CONDITION_TRUE, "Suspended")


async def test_spec_crossplane_is_not_tenant_input() -> None:
    crossplane = {"compositionRef": {"name": "workspacesandbox"}, "resourceRefs": []}
    plain, annotated = await run(request(xr())), await run(request(xr({"crossplane": crossplane})))
    assert not results(annotated)
    assert desired(plain) == desired(annotated)


async def test_earlier_steps_resources_and_status_are_kept() -> None:
    req = request(xr())
    req.desired.resources["bucket"].resource.update({"apiVersion": "v1", "kind": "ConfigMap"})
    req.desired.resources["bucket"].ready = fnv1.READY_TRUE
    req.desired.composite.resource.update({"status": {"billing": {"plan": "pro"}}})
    rsp = await run(req)
    assert resource.struct_to_dict(rsp.desired.resources["bucket"].resource) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
    }
    assert rsp.desired.resources["bucket"].ready == fnv1.READY_TRUE
    status = resource.struct_to_dict(rsp.desired.composite.resource)["status"]
    assert status["billing"] == {"plan": "pro"}
    assert status["phase"] == "Pending"


async def test_our_resource_replaces_a_stale_desired_copy_whole() -> None:
    req = request(xr())
    req.desired.resources["vm"].resource.update({"spec": {"running": True, "extra": 1}})
    rsp = await run(req)
    assert "running" not in desired(rsp)["vm"]["spec"]
    assert desired(rsp)["vm"]["spec"]["runStrategy"] == "Always"


async def test_argo_and_instance_labels_on_the_xr_are_never_copied() -> None:
    labels = {
        "app.kubernetes.io/instance": "tenant-apps",
        "argocd.argoproj.io/instance": "tenant-apps",
        "team": "payments",
    }
    composite = xr(labels=labels, annotations={"argocd.argoproj.io/tracking-id": "x"})
    rsp = await run(request(composite))
    for manifest in desired(rsp).values():
        text = json_format.MessageToJson(resource.dict_to_struct(manifest))
        assert "argocd" not in text
        assert "app.kubernetes.io/instance" not in text
        assert "payments" not in text


async def test_same_request_gives_byte_identical_responses() -> None:
    case = next(c for c in EXAMPLES if c.name == "running")
    composite = load_stream(case / "xr.yaml")[0]
    first = await run(request(composite, observed_of(case)))
    second = await run(request(composite, observed_of(case)))
    assert first.SerializeToString(deterministic=True) == second.SerializeToString(
        deterministic=True
    )


async def test_v1beta1_requests_get_the_same_answer() -> None:
    req = request(xr())
    beta = fnv1beta1.RunFunctionRequest()
    beta.ParseFromString(req.SerializeToString())
    rsp = await BetaFunctionRunner(FunctionRunner(clock=lambda: NOW)).RunFunction(beta, None)
    assert isinstance(rsp, fnv1beta1.RunFunctionResponse)
    v1 = await run(req)
    assert rsp.SerializeToString(deterministic=True) == v1.SerializeToString(deterministic=True)


async def test_missing_input_is_a_fatal_result_for_the_platform() -> None:
    req = request(xr())
    req.ClearField("input")
    rsp = await run(req)
    assert [(r.severity, r.message, r.reason) for r in results(rsp)] == [
        (
            fnv1.SEVERITY_FATAL,
            "input: the Composition step has no SandboxPlatform input",
            "InvalidInput",
        )
    ]


# The disk of a sandbox made before composed names carried a hash: it keeps its name.
_DATA_VOLUME = {
    "workspace-volume": {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": "alice-api-workspace"},
        "spec": {"storage": {"resources": {"requests": {"storage": "20Gi"}}}},
    }
}


async def test_growing_a_vm_disk_patches_its_claim_through_provider_kubernetes() -> None:
    rsp = await run(request(xr({"resources": {"disk": "40Gi"}}), _DATA_VOLUME))
    assert results(rsp) == []
    out = desired(rsp)
    # The DataVolume can't change; its PVC (of the same name) is raised instead, by an Object
    # that is new, so it gets a new name of its own.
    assert out["workspace-volume"]["spec"]["storage"]["resources"]["requests"] == {
        "storage": "20Gi"
    }
    ws = workspace({"resources": {"disk": "40Gi"}})
    assert out["workspace-volume-size"] == {
        "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
        "kind": "Object",
        "metadata": {
            "name": object_name(ws, "workspace-volume-size"),
            "labels": {
                "app.kubernetes.io/managed-by": "function-workspace-sandbox",
                "sandbox.cozystack.io/workspace": new_identity("alice-api"),
            },
        },
        "spec": {
            "forProvider": {
                "manifest": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "alice-api-workspace", "namespace": NAMESPACE},
                    "spec": {"resources": {"requests": {"storage": "40Gi"}}},
                }
            },
            "providerConfigRef": {
                "kind": "ClusterProviderConfig",
                "name": "workspace-sandbox-host",
            },
            "readiness": {"policy": "DeriveFromCelQuery", "celQuery": GROWN},
            "managementPolicies": ["Observe", "Update"],
        },
    }


async def test_growing_a_vm_disk_without_disk_expansion_warns_instead_of_failing() -> None:
    step_input = {k: v for k, v in platform_input().items() if k != "diskExpansion"}
    rsp = await run(request(xr({"resources": {"disk": "40Gi"}}), _DATA_VOLUME, step_input))
    assert [(r.severity, r.message, r.reason) for r in results(rsp)] == [
        (
            fnv1.SEVERITY_WARNING,
            (
                "spec.resources.disk: the workspace disk stays at 20Gi; the platform sets no "
                "diskExpansion, and a DataVolume can't change after creation"
            ),
            "CannotApply",
        )
    ]
    assert "workspace-volume-size" not in desired(rsp)


async def test_a_grown_vm_disk_never_falls_back_or_shrinks() -> None:
    first = await run(request(xr({"resources": {"disk": "40Gi"}}), _DATA_VOLUME))
    observed = {**_DATA_VOLUME, "workspace-volume-size": desired(first)["workspace-volume-size"]}
    # Leaving the size out keeps the grown size.
    kept = await run(request(xr(), observed))
    manifest = desired(kept)["workspace-volume-size"]["spec"]["forProvider"]["manifest"]
    assert manifest["spec"]["resources"]["requests"]["storage"] == "40Gi"
    shrunk = await run(request(xr({"resources": {"disk": "30Gi"}}), observed))
    assert [r.message for r in shrunk.results] == [
        (
            "spec.resources.disk: 30Gi is smaller than the workspace disk already is (40Gi); "
            "disks never shrink"
        )
    ]


@pytest.mark.parametrize("disk", ["10Gi", "19Gi"])
async def test_shrinking_an_existing_disk_is_refused(disk: str) -> None:
    observed = {
        "workspace-volume": {"spec": {"storage": {"resources": {"requests": {"storage": "20Gi"}}}}}
    }
    rsp = await run(request(xr({"resources": {"disk": disk}}), observed))
    assert [r.message for r in results(rsp)] == [
        (
            f"spec.resources.disk: {disk} is smaller than the workspace disk already is (20Gi); "
            "disks never shrink"
        )
    ]


async def test_a_crossplane_without_required_resources_is_told_why_a_restore_waits() -> None:
    req = request(xr({"restoreFrom": {"snapshot": "nightly"}}))
    req.meta.capabilities.extend([fnv1.CAPABILITY_CAPABILITIES, fnv1.CAPABILITY_CONDITIONS])
    rsp = await run(req)
    assert [(r.severity, r.reason) for r in results(rsp)] == [
        (fnv1.SEVERITY_WARNING, "RequiredResourcesUnsupported")
    ]
    assert "workspace-volume" not in rsp.desired.resources


async def test_before_capabilities_were_advertised_everything_is_assumed() -> None:
    rsp = await run(request(xr({"restoreFrom": {"snapshot": "nightly"}})))
    assert not results(rsp)
    assert "restore-snapshot" in rsp.requirements.resources


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    """Every line the runner logs, as structlog's event dicts; level filters as in --debug."""
    structlog.reset_defaults()
    with structlog.testing.capture_logs() as captured:
        yield captured
    structlog.reset_defaults()


XR_NAMED = {"tag": "test", "namespace": NAMESPACE, "name": "alice-api"}


async def test_a_fatal_call_logs_which_xr_it_was(logs: list[dict[str, Any]]) -> None:
    await run(request(xr({"preset": "xl"})))
    assert logs == [
        {"event": "cannot render", "log_level": "info", **XR_NAMED, "path": "spec.preset"}
    ]


async def test_a_call_without_debug_logs_nothing_and_times_nothing(
    logs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def unused(*_: Any) -> None:
        pytest.fail("looked at for a log line that isn't written")

    monkeypatch.setattr(FunctionRunner, "_log", unused)
    monkeypatch.setattr(fn, "_outcome", unused)
    monkeypatch.setattr(fn.time, "perf_counter", unused)
    rsp = await run(request(xr()))
    assert not results(rsp)
    assert logs == []


def _debug(rsp_lines: list[dict[str, Any]]) -> dict[str, Any]:
    (line,) = [line for line in rsp_lines if line["log_level"] == "debug"]
    assert isinstance(line.pop("ms"), float)
    return line


async def test_debug_logs_one_line_per_call_with_its_result(logs: list[dict[str, Any]]) -> None:
    runner = FunctionRunner(clock=lambda: NOW, debug=True)
    await runner.RunFunction(request(xr()), None)
    assert len(logs) == 1
    assert _debug(logs) == {
        "event": "ran",
        "log_level": "debug",
        **XR_NAMED,
        "resources": 5,
        "state": "not ready",
        "results": ["WARNING AgentNotConfigured", "WARNING SiteAddressesNotStated"],
    }


@pytest.mark.parametrize(
    ("spec", "observed", "want"),
    [
        pytest.param(
            {},
            "running",
            {
                "resources": 6,
                "state": "ready",
                "results": ["WARNING AgentNotConfigured", "WARNING SiteAddressesNotStated"],
            },
            id="ready",
        ),
        pytest.param(
            {"preset": "xl"},
            None,
            {"resources": 0, "state": "fatal", "results": ["FATAL InvalidSpec"]},
            id="fatal",
        ),
        pytest.param(
            {"restoreFrom": {"snapshot": "nightly"}},
            None,
            {
                "resources": 3,
                "state": "not ready",
                "results": [
                    "WARNING AgentNotConfigured",
                    "WARNING RequiredResourcesUnsupported",
                    "WARNING SiteAddressesNotStated",
                ],
            },
            id="warning",
        ),
    ],
)
async def test_debug_line_says_ready_fatal_and_each_results_severity(
    logs: list[dict[str, Any]], spec: dict[str, Any], observed: str | None, want: dict[str, Any]
) -> None:
    if observed:
        case = next(c for c in EXAMPLES if c.name == observed)
        composite = load_stream(case / "xr.yaml")[0]
        req = request(composite, observed_of(case))
    else:
        req = request(xr(spec))
    req.meta.capabilities.extend([fnv1.CAPABILITY_CAPABILITIES, fnv1.CAPABILITY_CONDITIONS])
    await FunctionRunner(clock=lambda: NOW, debug=True).RunFunction(req, None)
    line = _debug(logs)
    assert {k: line[k] for k in want} == want
    assert (line["namespace"], line["name"]) == (
        req.observed.composite.resource["metadata"]["namespace"],
        req.observed.composite.resource["metadata"]["name"],
    )


async def test_a_call_that_raises_logs_which_xr_and_still_raises(
    logs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(fn, "render", broken)
    with pytest.raises(RuntimeError, match="boom"):
        await run(request(xr()))
    assert logs == [
        {"event": "cannot run", "log_level": "error", **XR_NAMED, "error": "RuntimeError: boom"}
    ]


async def test_a_request_without_an_xr_logs_without_a_name(logs: list[dict[str, Any]]) -> None:
    req = request(xr())
    req.observed.ClearField("composite")
    await run(req)
    assert logs == [
        {
            "event": "cannot render",
            "log_level": "info",
            "tag": "test",
            "namespace": None,
            "name": None,
            "path": "composite",
        }
    ]


AGENT_MESSAGE = (
    "input.agent: not set, so the VM of preset 'standard' gets no in-sandbox agent: nothing "
    "answers on gateway.agentPort 49983, and files and commands can't be used; build the agent "
    "image (agent/Dockerfile) and set input.agent.image to it, pinned by digest"
)


def _agent_warnings(rsp: fnv1.RunFunctionResponse) -> list[tuple[int, str]]:
    return [(r.severity, r.message) for r in rsp.results if r.reason == AGENT_WARNING]


async def test_a_vm_without_an_agent_renders_and_warns_the_platform_engineer() -> None:
    rsp = await run(request(xr()))
    assert _agent_warnings(rsp) == [(fnv1.SEVERITY_WARNING, AGENT_MESSAGE)]
    # Rendered as ever: the VM, with no agent disk and no probe that nothing would answer.
    vm = desired(rsp)["vm"]["spec"]["template"]["spec"]
    assert [v["name"] for v in vm["volumes"]] == ["workspace", "cloudinit"]
    assert "readinessProbe" not in vm


@pytest.mark.parametrize(
    ("spec", "step_input"),
    [
        pytest.param({}, agent_platform_input(), id="a-vm-with-the-agent"),
        pytest.param({"preset": "kata"}, None, id="a-pod-runs-its-images-agent"),
        pytest.param({"preset": "xl"}, None, id="a-fatal-call"),
    ],
)
async def test_no_agent_warning_where_the_agent_is_delivered_or_may_be_on_the_image(
    spec: dict[str, Any], step_input: dict[str, Any] | None
) -> None:
    rsp = await run(request(xr(spec), None, step_input))
    assert _agent_warnings(rsp) == []
