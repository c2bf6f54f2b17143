"""The `workspace-sandbox render` command, and golden renders of every example."""

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from function.main import cli
from tests.support import EXAMPLES, ROOT, load_stream

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


# --------------------------------------------------------------------------- as crossplane render

PLANE = ROOT / "examples" / "dedicated-plane"
OBSERVED, REQUIRED = str(PLANE / "observed.yaml"), str(PLANE / "required.yaml")


def render_plane(*flags: str) -> str:
    args = ["render", str(PLANE / "xr.yaml"), "--now", NOW, *flags]
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
