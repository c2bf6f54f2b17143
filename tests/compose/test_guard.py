from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from function.compose.guard import guard_policy
from function.compose.names import EGRESS_LABEL, WORKSPACE_LABEL, new_identity
from function.compose.network_policy import egress_denies
from function.main import cli
from function.model import parse
from function.model.platform import Preset
from function.render import render
from tests.schemas import validate
from tests.support import COMPOSITION, NOW, PLATFORM, ROOT, platform, platform_input, workspace

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


@pytest.mark.parametrize("preset", ["standard", "kata", "gvisor"])
@pytest.mark.parametrize("mode", ["Internet", "Allowlist", "None"])
def test_every_sandbox_pod_carries_its_egress_mode_for_the_guard(preset: str, mode: str) -> None:
    allow = [{"cidr": "151.101.0.0/16"}] if mode == "Allowlist" else []
    spec = {"preset": preset, "network": {"egress": mode, "allow": allow}}
    out = render(workspace(spec), PLATFORM, {}, NOW).resources
    template = (
        out["vm"]["spec"]["template"] if "vm" in out else out["sandbox"]["spec"]["podTemplate"]
    )
    labels = template["metadata"]["labels"]
    assert labels == {WORKSPACE_LABEL: new_identity("alice-api"), EGRESS_LABEL: mode}
    # The policies and the Service still select the identity alone.
    identity = {WORKSPACE_LABEL: new_identity("alice-api")}
    assert out["cilium-policy"]["spec"]["endpointSelector"] == {"matchLabels": identity}
    assert out["service"]["spec"]["selector"] == identity
    (none,) = guard_policy(PLATFORM)["specs"]
    selector = none["endpointSelector"]
    selected = selector["matchLabels"].items() <= labels.items() and all(
        e["key"] in labels for e in selector["matchExpressions"]
    )
    assert selected is (mode == "None")
    assert none["egressDeny"] == [{"toEntities": ["all"]}]
    assert none["enableDefaultDeny"] == {"egress": False, "ingress": False}
