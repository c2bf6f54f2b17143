"""`workspace-sandbox policy explain` judges a sandbox in a namespace of its own there."""

from click.testing import CliRunner

from function.compose.names import new_identity
from function.main import cli
from tests.sandbox_namespace.world import HOME
from tests.support import ROOT

ISOLATED = ROOT / "examples" / "isolated"
ALICE = f"{HOME}/alice-api"
POLICY = f"CiliumNetworkPolicy {HOME}/{new_identity('alice-api')}"


def explain(*args: str, observed: bool = True) -> tuple[int, str, str]:
    placed = ["--observed", str(ISOLATED / "observed.yaml")] if observed else []
    result = CliRunner().invoke(
        cli, ["policy", "explain", str(ISOLATED / "xr.yaml"), *placed, *args]
    )
    return result.exit_code, result.stdout, result.stderr


def test_the_audit_is_in_its_own_namespace_without_a_baseline() -> None:
    code, out, _ = explain()
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"# in its own namespace {HOME!r}: no tenant baseline"
    allowed = [line.split(": allowed")[0] for line in lines if ": allowed" in line]
    # The allow-list lets out pypi.org and the resolver only; the tenant's baseline, which
    # would let out the whole internet, is not there.
    assert allowed == [
        f"{ALICE} -> 151.101.0.223:443/TCP",
        f"{ALICE} -> 2a04:4e42::223:443/TCP",
        f"{ALICE} -> 9.9.9.9:53/UDP",
        f"cozy-sandbox-gateway/sandbox-gateway -> {ALICE}:49983/TCP",
    ]
    assert all(": denied: " in line for line in lines[1:] if ": allowed" not in line)
    assert len(lines) == 22
    assert "allow-external-communication" not in out
    # The tenant's other sandbox stays in the tenant's namespace, and is refused.
    assert f"tenant-acme/neighbour -> {ALICE}:49983/TCP: denied: " in out


def test_a_listed_name_and_cidr_are_reached_and_nothing_else() -> None:
    assert (
        f"{ALICE} -> pypi.org:443/TCP: allowed: {POLICY}"
        in explain("--to", "pypi.org", "--port", "443")[1]
    )
    assert ": allowed: " in explain("--to", "198.41.0.4", "--port", "443")[1]
    assert ": denied: " in explain("--to", "198.41.0.4", "--port", "22")[1]
    code, out, _ = explain("--to", "1.1.1.1", "--port", "443")
    assert code == 0
    assert out.splitlines()[1] == (
        f"{ALICE} -> 1.1.1.1:443/TCP: denied: default deny at egress of {ALICE} (selected by "
        f"{POLICY}) and no rule allows 1.1.1.1"
    )


def test_the_host_guard_still_judges_it() -> None:
    # The tenant's other sandbox is held back by the guard, which selects both sandboxes.
    _, out, _ = explain("--from", "tenant-acme/neighbour", "--port", "49983")
    assert out.splitlines()[1].startswith(
        f"tenant-acme/neighbour -> {ALICE}:49983/TCP: denied: CiliumClusterwideNetworkPolicy "
        "workspace-sandbox-guard egressDeny[1] matches"
    )


def test_its_own_policy_denies_private_ranges() -> None:
    code, out, _ = explain("--to", "10.0.0.5", "--port", "443")
    assert code == 0
    assert out.splitlines()[1] == (
        f"{ALICE} -> 10.0.0.5:443/TCP: denied: {POLICY} egressDeny[2] matches 10.0.0.5 "
        "(toCIDRSet 10.0.0.0/8)"
    )


def test_a_sandbox_not_yet_placed_in_its_namespace_has_nothing_to_judge() -> None:
    code, out, err = explain(observed=False)
    assert code == 2
    assert out == ""
    assert err == f"error: nothing is placed in namespace {HOME!r} yet; give --observed\n"
