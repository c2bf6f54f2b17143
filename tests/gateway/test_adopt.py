"""`workspace-sandbox-gateway adopt`: sandboxes made before marks existed, listed, then marked."""

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from workspace_gateway.kubernetes.objects import ID_LABEL, MARK, PLURAL, mark, ours

from tests.gateway import kube_fake

pytestmark = pytest.mark.e2e  # starts agents or gateways

GATEWAY = Path(sys.executable).with_name("workspace-sandbox-gateway")
SEED = b"s" * 40
OLD, NEW, OTHER = "o" * 20, "n" * 20, "x" * 20


def sandbox(namespace: str, name: str, *, label: str | None = None, **notes: str) -> dict[str, Any]:
    return {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {ID_LABEL: label or name},
            "annotations": notes,
        },
        "spec": {"power": "Suspended"},
    }


def test_adopt_lists_then_marks_only_the_unmarked_sandboxes(tmp_path: Path) -> None:
    seed_file = tmp_path / "seed"
    seed_file.write_bytes(SEED)
    with kube_fake.serve() as (cluster, url):
        kubeconfig = kube_fake.kubeconfig(url, tmp_path)
        cluster.put((PLURAL, "team-a", OLD), sandbox("team-a", OLD))
        marked = sandbox("team-a", NEW, **{MARK: mark(SEED, "team-a", NEW)})
        cluster.put((PLURAL, "team-a", NEW), marked)
        cluster.put((PLURAL, "team-b", OTHER), sandbox("team-b", OTHER, label="someone-else"))
        cluster.put((PLURAL, "team-b", OLD), sandbox("team-b", OLD))
        command = [GATEWAY, "adopt", "--kubeconfig", str(kubeconfig)]
        command += ["--token-seed-file", str(seed_file)]

        listed = subprocess.run(command, capture_output=True, text=True, check=False)
        assert listed.returncode == 0, listed.stderr
        assert sorted(line.split()[:2] for line in listed.stdout.splitlines()) == [
            ["unmarked", f"team-a/{OLD}"],
            ["unmarked", f"team-b/{OLD}"],
        ]
        assert not ours(cluster.objects[PLURAL, "team-a", OLD], SEED)  # only listed

        one = subprocess.run(
            [*command, "--namespace", "team-a", "--yes"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert one.returncode == 0, one.stderr
        assert one.stdout.split()[:2] == ["marked", f"team-a/{OLD}"]
        assert ours(cluster.objects[PLURAL, "team-a", OLD], SEED)
        assert not ours(cluster.objects[PLURAL, "team-b", OLD], SEED)
        assert cluster.objects[PLURAL, "team-a", NEW]["metadata"]["annotations"] == {
            MARK: mark(SEED, "team-a", NEW)
        }
        assert MARK not in cluster.objects[PLURAL, "team-b", OTHER]["metadata"]["annotations"]

        short = tmp_path / "short"
        short.write_bytes(b"too short")
        refused = subprocess.run(
            [*command[:-1], str(short)], capture_output=True, text=True, check=False
        )
        assert refused.returncode == 1
        assert "fewer than 32 bytes" in refused.stderr
