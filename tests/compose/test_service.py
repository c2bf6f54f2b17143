"""The Service and the ports every sandbox reserves: the agent always, SSH only on a VM."""

import pytest

from function.compose.service import reserved_ports, service
from function.compose.workloads import kind_of
from tests.strategies import KEYS
from tests.support import PLATFORM, workspace

AGENT = PLATFORM.gateway.agent_port


@pytest.mark.parametrize(
    ("preset", "keys", "want"),
    [
        pytest.param("standard", [KEYS[0]], {"agent": AGENT, "ssh": 22}, id="vm-with-keys"),
        pytest.param("standard", [], {"agent": AGENT}, id="vm-without-keys"),
        pytest.param("kata", [KEYS[0]], {"agent": AGENT}, id="kata-pod-never"),
        pytest.param("gvisor", [KEYS[0]], {"agent": AGENT}, id="gvisor-pod-never"),
        pytest.param("shared-plane", [KEYS[0]], {"agent": AGENT}, id="shared-plane-never"),
        pytest.param("dedicated-plane", [KEYS[0]], {"agent": AGENT}, id="dedicated-plane-never"),
    ],
)
def test_port_22_opens_only_on_a_vm_given_keys(
    preset: str, keys: list[str], want: dict[str, int]
) -> None:
    # render refuses keys on a pod preset first; this is the second line, should that change.
    ws = workspace({"ssh": {"authorizedKeys": keys}})
    ssh = kind_of(PLATFORM.presets[preset]).serves_ssh
    assert reserved_ports(ws, PLATFORM, ssh=ssh) == want


def test_a_pod_may_publish_port_22_itself() -> None:
    ws = workspace({"preset": "kata", "ports": [{"name": "ssh", "port": 22}]})
    ssh = kind_of(PLATFORM.presets["kata"]).serves_ssh
    ports = service(ws, PLATFORM, ssh=ssh)["service"]["spec"]["ports"]
    assert [(p["name"], p["port"]) for p in ports] == [("agent", AGENT), ("ssh", 22)]
