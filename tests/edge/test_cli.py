"""The `workspace-sandbox render` command, and golden renders of every example."""

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import offline
from function.fn import FunctionRunner
from function.main import cli
from tests.support import (
    AGENT_COMPOSITION,
    COMPOSITION,
    EXAMPLES,
    NOW_ARG,
    ROOT,
    load_stream,
    render_args,
)

GOLDEN = ROOT / "tests" / "golden"


@pytest.mark.parametrize("case", EXAMPLES, ids=[c.name for c in EXAMPLES])
def test_every_example_renders_as_its_golden_file(case: Path) -> None:
    result = CliRunner().invoke(cli, render_args(case))
    assert result.exit_code == 0, result.output
    want = GOLDEN / f"{case.name}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        want.write_text(result.stdout)
    assert result.stdout == want.read_text()


# The examples of a VM and a pod sandbox on a platform that delivers the agent.
WITH_AGENT = [c for c in EXAMPLES if c.name in ("full", "kata")]


@pytest.mark.parametrize("case", WITH_AGENT, ids=[c.name for c in WITH_AGENT])
def test_with_the_agent_delivered_an_example_renders_as_its_golden_file(case: Path) -> None:
    args = [*render_args(case), "--composition", str(AGENT_COMPOSITION)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    want = GOLDEN / "with-agent" / f"{case.name}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        want.parent.mkdir(exist_ok=True)
        want.write_text(result.stdout)
    assert result.stdout == want.read_text()


async def rendered_at(case: Path, now: datetime) -> fnv1.RunFunctionResponse:
    def given(name: str) -> Path | None:
        return case / name if (case / name).exists() else None

    required = given("required.yaml")
    files = offline.request(
        case / "xr.yaml", COMPOSITION, given("observed.yaml"), [required] if required else []
    )
    return await offline.run(FunctionRunner(clock=lambda: now), files)


@pytest.mark.parametrize("case", EXAMPLES, ids=[c.name for c in EXAMPLES])
async def test_every_example_renders_the_same_on_any_day(case: Path) -> None:
    # The README renders examples without --now: nothing in them may depend on the day.
    early = await rendered_at(case, datetime(2020, 1, 1, tzinfo=UTC))
    late = await rendered_at(case, datetime(2200, 1, 1, tzinfo=UTC))
    # The whole response: desired state, XR status and conditions, results, requirements, TTL.
    assert late == early
    assert early.meta.ttl.seconds == 60


DEADLINE = "2030-01-01T18:00:00Z"


def full_with_deadline(tmp_path: Path) -> Path:
    """The full example with spec.lifetime.suspendAt, as examples/README.md shows it."""
    xr = yaml.safe_load((ROOT / "examples" / "full" / "xr.yaml").read_text())
    xr["spec"]["lifetime"] = {"suspendAt": DEADLINE}
    path = tmp_path / "xr.yaml"
    path.write_text(yaml.safe_dump(xr))
    return path


@pytest.mark.parametrize(
    ("now", "run_strategy", "suspended"),
    [
        pytest.param(
            "2030-01-01T17:59:00Z",
            "Always",
            {"status": "False", "reason": "PowerRunning"},
            id="before-the-deadline-the-vm-runs",
        ),
        pytest.param(
            DEADLINE,
            "Halted",
            {"status": "False", "reason": "LifetimeExpired"},
            id="from-the-deadline-the-vm-is-halted",
        ),
    ],
)
def test_a_suspend_deadline_renders_by_the_clock_it_is_given(
    tmp_path: Path, now: str, run_strategy: str, suspended: dict[str, Any]
) -> None:
    result = CliRunner().invoke(cli, ["render", str(full_with_deadline(tmp_path)), "--now", now])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    status = docs[0]["status"]
    assert status["suspendAt"] == DEADLINE
    condition = next(c for c in status["conditions"] if c["type"] == "Suspended")
    assert {k: condition[k] for k in suspended} == suspended
    [vm] = [d for d in docs if d["kind"] == "VirtualMachine"]
    assert vm["spec"]["runStrategy"] == run_strategy


def test_render_prints_the_xr_first_then_each_composed_resource() -> None:
    result = CliRunner().invoke(cli, render_args(ROOT / "examples" / "running"))
    docs = list(yaml.safe_load_all(result.stdout))
    assert docs[0]["kind"] == "WorkspaceSandbox"
    assert docs[0]["status"]["phase"] == "Running"
    composed = [d for d in docs[1:] if d["kind"] != "Result"]
    names = [
        d["metadata"]["annotations"]["crossplane.io/composition-resource-name"] for d in composed
    ]
    assert names == [
        "cilium-policy",
        "network-policy",
        "service",
        "snapshot-before-refactor",
        "vm",
        "workspace-volume",
    ]
    for d in composed:
        assert d["metadata"]["namespace"] == "tenant-acme"
        assert d["metadata"]["ownerReferences"][0]["kind"] == "WorkspaceSandbox"


def test_fatal_exits_non_zero_with_the_message_on_stderr(tmp_path: Path) -> None:
    xr = tmp_path / "xr.yaml"
    xr.write_text(
        "apiVersion: sandbox.cozystack.io/v1alpha1\nkind: WorkspaceSandbox\n"
        "metadata: {name: a, namespace: t}\nspec: {image: ubuntu-24.04, preset: xl}\n"
    )
    result = CliRunner().invoke(cli, ["render", str(xr), "--include-results"])
    assert result.exit_code == 1
    assert (
        result.stderr
        == "error: spec.preset: 'xl' is not offered; use one of: dedicated-plane, gvisor, isolated, isolated-kata, kata, shared-plane, standard\n"
    )
    results = list(yaml.safe_load_all(result.stdout))
    assert results == [
        {
            "apiVersion": "render.crossplane.io/v1beta1",
            "kind": "Result",
            "step": "compose-sandbox",
            "severity": "SEVERITY_FATAL",
            "message": "spec.preset: 'xl' is not offered; use one of: dedicated-plane, gvisor, isolated, isolated-kata, kata, shared-plane, standard",
            "reason": "InvalidSpec",
        }
    ]


def test_a_composition_without_our_step_is_a_usage_error(tmp_path: Path) -> None:
    composition = tmp_path / "c.yaml"
    composition.write_text("apiVersion: apiextensions.crossplane.io/v1\nkind: Composition\n")
    args = ["render", str(ROOT / "examples/minimal/xr.yaml"), "--composition", str(composition)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "no pipeline step has a SandboxPlatform input" in result.stderr


def test_observed_resources_need_their_composition_resource_name(tmp_path: Path) -> None:
    observed = tmp_path / "o.yaml"
    observed.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: x}\n")
    args = ["render", str(ROOT / "examples/minimal/xr.yaml"), "--observed", str(observed)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "lacks the crossplane.io/composition-resource-name annotation" in result.stderr


# --------------------------------------------------------------------------- as crossplane render

PLANE = ROOT / "examples" / "dedicated-plane"
OBSERVED, REQUIRED = str(PLANE / "observed.yaml"), str(PLANE / "required.yaml")


def render_plane(*flags: str) -> str:
    args = ["render", str(PLANE / "xr.yaml"), "--now", NOW_ARG, *flags]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(
            [
                "--observed-resources",
                OBSERVED,
                "--required-resources",
                REQUIRED,
                "--include-function-results",
            ],
            id="crossplane-names",
        ),
        pytest.param(["-o", OBSERVED, "-e", REQUIRED, "-r"], id="crossplane-short-forms"),
        pytest.param(
            ["--observed", OBSERVED, "--extra-resources", REQUIRED, "--include-results"],
            id="extra-resources",
        ),
    ],
)
def test_render_takes_crossplane_render_option_names(flags: list[str]) -> None:
    assert render_plane(*flags) == (GOLDEN / "dedicated-plane.yaml").read_text()


def test_observed_and_required_resources_may_be_directories_or_several_files(
    tmp_path: Path,
) -> None:
    observed, required = tmp_path / "observed", tmp_path / "required"
    (observed / "nested").mkdir(parents=True)
    required.mkdir()
    docs = load_stream(Path(OBSERVED))
    # Read by file name, as crossplane render does; other files and folders are left alone.
    (observed / "b.yml").write_text(yaml.safe_dump_all(docs[1:]))
    (observed / "a.yaml").write_text(yaml.safe_dump_all(docs[:1]))
    (observed / "notes.txt").write_text("not YAML: {")
    (observed / "nested" / "c.yaml").write_text("not YAML: {")
    wanted = load_stream(Path(REQUIRED))
    (required / "first.yaml").write_text(yaml.safe_dump_all(wanted[:1]))
    (tmp_path / "rest.yaml").write_text(yaml.safe_dump_all(wanted[1:]))
    flags = ["-o", str(observed), "-e", str(required), "-e", str(tmp_path / "rest.yaml"), "-r"]
    assert render_plane(*flags) == (GOLDEN / "dedicated-plane.yaml").read_text()


def test_a_directory_without_yaml_files_is_a_usage_error(tmp_path: Path) -> None:
    args = ["render", str(ROOT / "examples/minimal/xr.yaml"), "-o", str(tmp_path)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert result.stderr == f"error: {tmp_path}: no YAML files found (.yaml or .yml)\n"


def test_the_xr_carries_its_status_only_unless_the_full_xr_is_asked_for() -> None:
    xr = load_stream(PLANE / "xr.yaml")[0]
    brief = next(yaml.safe_load_all(render_plane("-o", OBSERVED, "-e", REQUIRED)))
    full = next(yaml.safe_load_all(render_plane("-o", OBSERVED, "-e", REQUIRED, "-x")))
    assert sorted(brief) == ["apiVersion", "kind", "metadata", "status"]
    assert brief["metadata"] == {"name": "dana-ml", "namespace": "tenant-acme"}
    assert full == {**brief, "metadata": xr["metadata"], "spec": xr["spec"]}


def test_the_context_is_printed_last_when_asked_for() -> None:
    docs = list(yaml.safe_load_all(render_plane("-o", OBSERVED, "-e", REQUIRED, "-r", "-c")))
    context = {"apiVersion": "render.crossplane.io/v1beta1", "kind": "Context", "fields": {}}
    assert docs[-1] == context
    assert [d for d in docs if d["kind"] == "Context"] == [context]


def response(
    composite: int, resources: dict[str, int], conditions: tuple[fnv1.Condition, ...] = ()
) -> fnv1.RunFunctionResponse:
    rsp = fnv1.RunFunctionResponse(conditions=conditions)
    rsp.desired.composite.ready = composite
    for name, ready in resources.items():
        rsp.desired.resources[name].ready = ready
    return rsp


def ready(status: str, reason: str, message: str | None = None) -> dict[str, str]:
    found = {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "lastTransitionTime": offline.CONDITION_TIME,
    }
    return found | ({"message": message} if message else {})


T, F, U = fnv1.READY_TRUE, fnv1.READY_FALSE, fnv1.READY_UNSPECIFIED


@pytest.mark.parametrize(
    ("composite", "resources", "want"),
    [
        pytest.param(T, {"vm": F}, ready("True", "Available"), id="the-function-says-ready"),
        pytest.param(F, {"vm": T}, ready("False", "Creating"), id="the-function-says-not-ready"),
        pytest.param(U, {"vm": T}, ready("True", "Available"), id="every-resource-ready"),
        pytest.param(U, {}, ready("True", "Available"), id="no-resources"),
        pytest.param(
            U,
            {"vm": F, "service": U},
            ready("False", "Creating", "Unready resources: service, vm"),
            id="two-unready-sorted",
        ),
        pytest.param(
            U,
            {"c": F, "b": F, "a": F},
            ready("False", "Creating", "Unready resources: a, b, and c"),
            id="three-unready",
        ),
        pytest.param(
            U,
            dict.fromkeys("edcba", F),
            ready("False", "Creating", "Unready resources: a, b, c, and 2 more"),
            id="more-than-three-unready",
        ),
    ],
)
def test_the_ready_condition_is_derived_as_crossplane_does(
    composite: int, resources: dict[str, int], want: dict[str, str]
) -> None:
    assert offline.ready_condition(response(composite, resources)) == want


def test_composed_resources_get_crossplane_metadata_and_the_xr_its_conditions() -> None:
    xr = {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": "alice-api", "namespace": "tenant-acme", "uid": "u-1"},
        "spec": {"image": "ubuntu-24.04"},
    }
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    req.observed.resources["kept"].resource.update(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept-x7k2q"}}
    )
    conditions = (
        fnv1.Condition(type="Ready", status=fnv1.STATUS_CONDITION_TRUE, reason="Mine"),
        fnv1.Condition(type="Synced", status=fnv1.STATUS_CONDITION_FALSE, reason="Mine"),
        fnv1.Condition(type="Custom", status=fnv1.STATUS_CONDITION_UNKNOWN, reason="Why"),
    )
    rsp = response(F, {"kept": T, "fresh": T}, conditions)
    for name in ("kept", "fresh"):
        rsp.desired.resources[name].resource.update({"apiVersion": "v1", "kind": "ConfigMap"})
    rsp.desired.resources["kept"].resource.update({"metadata": {"name": "wanted"}})
    composite, fresh, kept = yaml.safe_load_all(
        offline.stream(req, rsp, "step", include_results=False)
    )
    assert composite == {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": "alice-api", "namespace": "tenant-acme"},
        "status": {
            "conditions": [
                ready("False", "Creating"),
                {
                    "type": "Synced",
                    "status": "True",
                    "reason": "ReconcileSuccess",
                    "lastTransitionTime": offline.CONDITION_TIME,
                },
                {
                    "type": "Custom",
                    "status": "Unknown",
                    "reason": "Why",
                    "lastTransitionTime": offline.CONDITION_TIME,
                },
            ]
        },
    }
    owner = {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "name": "alice-api",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert fresh["metadata"] == {
        "generateName": "alice-api-",
        "namespace": "tenant-acme",
        "annotations": {"crossplane.io/composition-resource-name": "fresh"},
        "labels": {"crossplane.io/composite": "alice-api"},
        "ownerReferences": [owner],
    }
    # An existing resource keeps the name it was created with.
    assert kept["metadata"]["name"] == "kept-x7k2q"
    assert "generateName" not in kept["metadata"]
