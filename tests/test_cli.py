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
from function.main import DEFAULT_COMPOSITION, cli
from tests.support import EXAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden"
NOW = "2026-11-29T12:00:00Z"


def render_args(case: Path) -> list[str]:
    args = ["render", str(case / "xr.yaml"), "--include-results", "--now", NOW]
    if (case / "observed.yaml").exists():
        args += ["--observed", str(case / "observed.yaml")]
    if (case / "required.yaml").exists():
        args += ["--required", str(case / "required.yaml")]
    return args


@pytest.mark.parametrize("case", EXAMPLES, ids=[c.name for c in EXAMPLES])
def test_every_example_renders_as_its_golden_file(case: Path) -> None:
    result = CliRunner().invoke(cli, render_args(case))
    assert result.exit_code == 0, result.output
    want = GOLDEN / f"{case.name}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        want.write_text(result.stdout)
    assert result.stdout == want.read_text()


async def rendered_at(case: Path, now: datetime) -> fnv1.RunFunctionResponse:
    def given(name: str) -> Path | None:
        return case / name if (case / name).exists() else None

    files = offline.request(
        case / "xr.yaml", DEFAULT_COMPOSITION, given("observed.yaml"), given("required.yaml")
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
        == "error: spec.preset: 'xl' is not offered; use one of: dedicated-plane, gvisor, kata, shared-plane, standard\n"
    )
    results = list(yaml.safe_load_all(result.stdout))
    assert results == [
        {
            "apiVersion": "render.crossplane.io/v1beta1",
            "kind": "Result",
            "step": "compose-sandbox",
            "severity": "SEVERITY_FATAL",
            "message": "spec.preset: 'xl' is not offered; use one of: dedicated-plane, gvisor, kata, shared-plane, standard",
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
