"""Both shapes of the rendered pod start under runc and runsc, and their agent answers.

The agent-sandbox Sandbox's pod template with the agent delivered (its init container copies the
bundle into an emptyDir first, which the sandbox container mounts read-only), and the plane
StatefulSet's pod template running the image's own launcher. The SDK's cycle is
`test_pod_sdk.py`'s; here each pod is started straight from its rendered spec, as its
controller would create it.
"""

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from function.model.platform import SandboxPlatform
from tests.boot import pod_host
from tests.boot.pod_render import pods
from tests.placements import settled
from tests.support import AGENT_PLATFORM, PLATFORM

pytestmark = pytest.mark.pod

SHAPES = [
    pytest.param("gvisor", AGENT_PLATFORM, id="sandbox-agent-delivered"),
    pytest.param("shared-plane", PLATFORM, id="statefulset-image-agent"),
]


@pytest.fixture(scope="module")
def images() -> Iterator[pod_host.Images]:
    yield pod_host.images()


@pytest.mark.parametrize("runtime", pod_host.RUNTIMES)
@pytest.mark.parametrize(("preset", "platform"), SHAPES)
def test_the_rendered_pod_starts_and_its_agent_answers_closed(
    images: pod_host.Images, runtime: str, preset: str, platform: SandboxPlatform, tmp_path: Path
) -> None:
    ((hostname, spec),) = pods(settled(preset, platform))
    workspace = Path(tempfile.mkdtemp(dir=tmp_path))
    with pod_host.running(
        runtime, images, hostname, spec, folder=tmp_path / "pod", workspace=workspace
    ) as pod:
        pod.started_to_healthy()
        health = pod.wait_healthy()
        assert health.status_code == 204
        assert health.headers["x-agent-initialized"] == "false"
        assert pod.health_url().startswith(f"http://{pod.netns.address}:")
        # The workspace claim is the pod's user's to write, through the fsGroup kubelet applies.
        assert workspace.stat().st_gid == 1000
    assert pod_host.mounts_under(tmp_path) == []
    cgroups = (h / pod.cgroup_parent.lstrip("/") for h in Path("/sys/fs/cgroup").iterdir())
    assert [c for c in cgroups if c.exists()] == []
