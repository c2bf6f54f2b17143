from pathlib import Path

import yaml
from click.testing import CliRunner

from function.compose.guard import guard_policy
from function.compose.network_policy import egress_denies
from function.main import cli
from function.model import parse
from function.model.platform import Preset
from tests.schemas import validate
from tests.support import COMPOSITION, PLATFORM, ROOT, platform, platform_input

DEPLOYED = ROOT / "deploy" / "cilium-guard.yaml"


def test_the_deployed_guard_is_what_the_shipped_platform_generates() -> None:
    result = CliRunner().invoke(cli, ["policy", "guard"])
    assert result.exit_code == 0, result.output
    assert result.stdout == DEPLOYED.read_text()
    assert yaml.safe_load(DEPLOYED.read_text()) == guard_policy(PLATFORM)


def test_the_guard_is_a_valid_clusterwide_policy_that_only_subtracts() -> None:
    guard = guard_policy(PLATFORM)
    assert validate(guard) == []
    assert guard["spec"]["enableDefaultDeny"] == {"egress": False, "ingress": False}
    assert "egress" not in guard["spec"]
    assert "ingress" not in guard["spec"]
    assert guard["spec"]["endpointSelector"] == {
        "matchExpressions": [{"key": "sandbox.cozystack.io/workspace", "operator": "Exists"}]
    }


def test_the_guard_denies_what_every_sandbox_policy_denies() -> None:
    site = ("185.12.64.0/22",)
    p = platform(network={**platform_input()["network"], "siteDenyCidrs": list(site)})
    denies = guard_policy(p)["spec"]["egressDeny"]
    assert denies == egress_denies(p.network.site_deny_cidrs, cluster_dns=False)
    assert {"cidr": "185.12.64.0/22"} in denies[2]["toCIDRSet"]


def test_a_cluster_dns_preset_keeps_kube_dns_port_53_open_in_the_guard(tmp_path: Path) -> None:
    presets = {
        **platform_input()["presets"],
        "internal": {**platform_input()["presets"]["standard"], "clusterDns": True},
    }
    parse(Preset, presets["internal"], "input.presets.internal")
    p = platform(presets=presets)
    assert guard_policy(p)["spec"]["egressDeny"] == egress_denies((), cluster_dns=True)
    composition = yaml.safe_load(COMPOSITION.read_text())
    composition["spec"]["pipeline"][0]["input"]["presets"] = presets
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(composition))
    result = CliRunner().invoke(cli, ["policy", "guard", "--composition", str(path)])
    assert "kube-dns" in result.stdout
