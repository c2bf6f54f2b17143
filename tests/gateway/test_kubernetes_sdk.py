"""The unmodified SDK's cycle through the gateway's Kubernetes backend.

The gateway serves on a loopback port from a thread of its own, over the fake API server, with
the stand-in platform starting a real agent for each running sandbox.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2b import Sandbox
from workspace_gateway.kubernetes.objects import PLURAL

from tests.gateway import kube_fake
from tests.gateway.stand_in import KEY_B, serving

pytestmark = pytest.mark.e2e  # starts agents or gateways


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[kube_fake.Cluster]:
    with serving(tmp_path, monkeypatch) as cluster:
        yield cluster


def test_the_sdk_cycle_on_workspace_sandboxes(gateway: kube_fake.Cluster) -> None:
    sandbox = Sandbox.create(envs={"GREETING": "hello"}, metadata={"who": "sdk"})
    sandbox_id = sandbox.sandbox_id
    assert (PLURAL, "team-a", sandbox_id) in gateway.objects
    # The env vars are on the XR, for a resume, but sealed: not in clear text.
    assert "hello" not in str(gateway.objects[PLURAL, "team-a", sandbox_id])
    assert sandbox.commands.run("echo $GREETING").stdout == "hello\n"
    sandbox.files.write("kept.txt", "kept")
    assert [s.sandbox_id for s in Sandbox.list().next_items()] == [sandbox_id]
    assert Sandbox.list(api_key=KEY_B).next_items() == []

    assert sandbox.pause() is True
    assert sandbox.pause() is False
    assert gateway.objects[PLURAL, "team-a", sandbox_id]["spec"]["power"] == "Suspended"
    resumed = Sandbox.connect(sandbox_id)
    assert resumed.files.read("kept.txt") == "kept"
    assert resumed.commands.run("echo $GREETING").stdout == "hello\n"

    assert resumed.kill() is True
    assert (PLURAL, "team-a", sandbox_id) not in gateway.objects
