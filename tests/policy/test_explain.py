"""`workspace-sandbox policy explain`: verdicts for a rendered sandbox, from the command line."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from function.compose.names import new_identity
from function.main import cli
from tests.support import COMPOSITION, ROOT

FULL = str(ROOT / "examples" / "full" / "xr.yaml")
# The policies a new sandbox gets are named after its identity.
BOB = new_identity("bob-frontend")


def explain(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["policy", "explain", FULL, *args])
    return result.exit_code, result.stdout, result.stderr


def test_the_default_audit_allows_the_internet_and_the_gateway_only() -> None:
    code, out, _ = explain()
    assert code == 0
    lines = out.splitlines()
    allowed = [line.split(": allowed")[0] for line in lines if ": allowed" in line]
    assert allowed == [
        "tenant-acme/bob-frontend -> 151.101.0.223:443/TCP",
        "tenant-acme/bob-frontend -> 2a04:4e42::223:443/TCP",
        "tenant-acme/bob-frontend -> 9.9.9.9:53/UDP",
        "cozy-sandbox-gateway/sandbox-gateway -> tenant-acme/bob-frontend:49983/TCP",
    ]
    assert len(lines) == 21
    assert all(": denied: " in line for line in lines if ": allowed" not in line)


def test_a_named_destination_shows_the_rule_that_decided() -> None:
    code, out, _ = explain("--to", "169.254.169.254", "--port", "80")
    assert code == 0
    assert out == (
        "tenant-acme/bob-frontend -> 169.254.169.254:80/TCP: denied: CiliumNetworkPolicy "
        f"tenant-acme/{BOB} egressDeny[2] matches 169.254.169.254 (toCIDRSet 169.254.0.0/16)\n"
    )


def test_a_caller_on_a_declared_port_and_on_another() -> None:
    assert (
        ": allowed: "
        in explain("--from", "cozy-sandbox-gateway/sandbox-gateway", "--port", "6006")[1]
    )
    assert (
        ": denied: "
        in explain("--from", "cozy-sandbox-gateway/sandbox-gateway", "--port", "6007")[1]
    )


def test_without_cilium_node_public_addresses_are_open_unless_listed() -> None:
    code, out, _ = explain("--to", "185.12.64.12", "--port", "22", "--enforcement", "kubernetes")
    assert code == 0
    assert f": allowed: NetworkPolicy tenant-acme/{BOB} egress[0]" in out


def test_the_sandbox_policies_deny_without_the_baseline_too() -> None:
    assert ": denied: " in explain("--to", "10.0.0.5", "--no-baseline")[1]


def test_to_and_from_together_is_a_usage_error() -> None:
    code, _, err = explain("--to", "1.1.1.1", "--from", "1.1.1.1")
    assert code == 2
    assert err == "error: give --to or --from, not both\n"


def test_an_unknown_destination_is_a_usage_error() -> None:
    code, _, err = explain("--to", "nowhere")
    assert code == 2
    assert "'nowhere'" in err


def test_a_sandbox_that_does_not_render_is_a_fatal_error(tmp_path: Path) -> None:
    xr = tmp_path / "xr.yaml"
    xr.write_text(
        "apiVersion: sandbox.cozystack.io/v1alpha1\nkind: WorkspaceSandbox\n"
        "metadata: {name: a, namespace: tenant-acme}\nspec: {image: windows}\n"
    )
    result = CliRunner().invoke(cli, ["policy", "explain", str(xr)])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: spec.image: 'windows' is not in the catalog")


def test_a_pod_sandbox_is_judged_by_its_own_policies() -> None:
    kata = str(ROOT / "examples" / "kata" / "xr.yaml")
    result = CliRunner().invoke(
        cli, ["policy", "explain", kata, "--to", "10.0.0.5", "--port", "443"]
    )
    assert result.exit_code == 0
    assert result.stdout == (
        "tenant-acme/erin-notebook -> 10.0.0.5:443/TCP: denied: CiliumNetworkPolicy "
        f"tenant-acme/{new_identity('erin-notebook')} egressDeny[2] matches 10.0.0.5 "
        "(toCIDRSet 10.0.0.0/8)\n"
    )


PLANE = ROOT / "examples" / "dedicated-plane"


def test_a_sandbox_in_a_plane_is_judged_inside_it() -> None:
    result = CliRunner().invoke(
        cli,
        [
            "policy",
            "explain",
            str(PLANE / "xr.yaml"),
            "--observed",
            str(PLANE / "observed.yaml"),
            "--required",
            str(PLANE / "required.yaml"),
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "# inside ComputePlane 'dana-ml-plane', namespace 'sandbox-dana-ml': no tenant baseline"
    )
    allowed = [line.split(": allowed")[0] for line in lines if ": allowed" in line]
    assert allowed == [
        "sandbox-dana-ml/dana-ml -> 151.101.0.223:443/TCP",
        "sandbox-dana-ml/dana-ml -> 2a04:4e42::223:443/TCP",
        "sandbox-dana-ml/dana-ml -> 9.9.9.9:53/UDP",
        "cozy-sandbox-gateway/sandbox-gateway -> sandbox-dana-ml/dana-ml:49983/TCP",
    ]
    assert all(": denied: " in line for line in lines[1:] if ": allowed" not in line)
    assert len(lines) == 22


@pytest.mark.parametrize(
    ("observed", "required"),
    [
        pytest.param("--observed-resources", "--required-resources", id="crossplane-names"),
        pytest.param("-o", "-e", id="crossplane-short-forms"),
        pytest.param("--observed", "--extra-resources", id="extra-resources"),
    ],
)
def test_explain_takes_crossplane_render_option_names(observed: str, required: str) -> None:
    def explain_plane(observed: str, required: str) -> str:
        args = ["policy", "explain", str(PLANE / "xr.yaml")]
        args += [observed, str(PLANE / "observed.yaml"), required, str(PLANE / "required.yaml")]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        return result.stdout

    assert explain_plane(observed, required) == explain_plane("--observed", "--required")


def test_a_sandbox_not_yet_placed_in_its_plane_has_nothing_to_judge() -> None:
    shared = ROOT / "examples" / "shared-plane"
    result = CliRunner().invoke(
        cli,
        ["policy", "explain", str(shared / "xr.yaml"), "--required", str(shared / "required.yaml")],
    )
    assert result.exit_code == 2
    assert result.stderr == (
        "error: nothing is placed in ComputePlane 'computeplane' yet; give --observed and "
        "--required\n"
    )


def test_every_process_names_the_same_rule() -> None:
    # A protobuf map's order follows the process's hash seed (these three seeds give three
    # orders of the same five resources); the rule named when two policies allow must not.
    def run(seed: int) -> str:
        return subprocess.run(
            [
                sys.executable,
                "-c",
                "from function.main import cli; cli()",
                "policy",
                "explain",
                FULL,
            ],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    assert run(0) == run(1) == run(2) == explain()[1]


def test_the_default_audit_calls_the_platforms_agent_port(tmp_path: Path) -> None:
    composition = yaml.safe_load(COMPOSITION.read_text())
    composition["spec"]["pipeline"][0]["input"]["gateway"]["agentPort"] = 8443
    path = tmp_path / "composition.yaml"
    path.write_text(yaml.safe_dump(composition))
    code, out, _ = explain("--composition", str(path))
    assert code == 0
    callers = [line for line in out.splitlines() if "-> tenant-acme/bob-frontend:" in line]
    assert [line.split(": ")[0] for line in callers] == [
        "cozy-sandbox-gateway/sandbox-gateway -> tenant-acme/bob-frontend:8443/TCP",
        "cozy-sandbox-gateway/gateway-debug -> tenant-acme/bob-frontend:8443/TCP",
        "tenant-acme/neighbour -> tenant-acme/bob-frontend:8443/TCP",
        "tenant-evil/mallory-shell -> tenant-acme/bob-frontend:8443/TCP",
        "198.51.100.7 -> tenant-acme/bob-frontend:8443/TCP",
    ]
    # The gateway reaches the agent on the port the platform gave it, and nobody else does.
    assert [": allowed: " in line for line in callers] == [True, False, False, False, False]
