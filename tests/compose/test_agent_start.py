"""A pod's agent starts by absolute paths the sandbox's user can't write, never through PATH.

A runtime looks a relative `command[0]` up on the image's PATH, and the reference image's PATH
starts in the workspace, which the sandbox's code writes: a `python3` or
`workspace-sandbox-agent` left there would run as the agent, with its token, from the next
container start on, and keep running through suspend and resume.
"""

from pathlib import PurePosixPath
from typing import Any

import pytest

from function.compose.agent import BUNDLE, IMAGE_LAUNCHER, LAUNCHER
from function.model import Manifest
from function.model.platform import USER_WRITABLE, SandboxPlatform, under
from function.render import Rendered
from tests.placements import settled
from tests.plane import provider
from tests.support import AGENT_PLATFORM, PLATFORM, agent_platform_input

POD_PRESETS = sorted(n for n, p in PLATFORM.presets.items() if p.runtime != "kubevirt")
OTHER_PYTHON = "/opt/python-3.12/bin/python3.12"
ELSEWHERE = AGENT_PLATFORM.model_copy(
    update={"agent": AGENT_PLATFORM.agent.model_copy(update={"python": OTHER_PYTHON})}
    if AGENT_PLATFORM.agent
    else {}
)
PLATFORMS = [
    pytest.param(PLATFORM, id="the-images-agent"),
    pytest.param(AGENT_PLATFORM, id="agent-delivered"),
    pytest.param(ELSEWHERE, id="agent-delivered-python-elsewhere"),
]


def pods(out: Rendered) -> list[Manifest]:
    """Every pod spec rendered, in the namespace or carried by an Object."""
    found = []
    for manifest in out.resources.values():
        carried = (
            manifest["spec"]["forProvider"]["manifest"]
            if manifest["kind"] == "Object"
            else manifest
        )
        if carried["kind"] in ("Sandbox", "StatefulSet"):
            found.append(provider.pod_spec(carried))
    return found


def sandbox_container(pod: Manifest) -> Manifest:
    (container,) = (c for c in pod["containers"] if c["name"] == "sandbox")
    return container


def agent_paths(command: list[str]) -> list[str]:
    """What the runtime executes, and the script an interpreter runs: the agent's own files."""
    return command[:1] + command[2:3] if command[1:2] == ["-I"] else command[:1]


def writable(container: Manifest) -> tuple[str, ...]:
    """Every place the sandbox's user can write in this pod: its writable mounts, HOME, TMPDIR."""
    mounts = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    env = [e["value"] for e in container["env"] if e["name"] in ("HOME", "TMPDIR")]
    return (*USER_WRITABLE, *mounts, *env, container["workingDir"])


def is_plain_absolute(path: str) -> bool:
    return path.startswith("/") and ".." not in path.split("/") and str(PurePosixPath(path)) == path


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("preset", POD_PRESETS)
def test_the_agent_starts_by_absolute_paths_the_user_cannot_write(
    preset: str, platform: SandboxPlatform
) -> None:
    (pod,) = pods(settled(preset, platform))
    container = sandbox_container(pod)
    places = writable(container)
    assert "/workspace" in places  # the workspace mount itself, whatever else is listed
    for path in agent_paths(container["command"]):
        assert is_plain_absolute(path), path
        assert under(path, places) is None, path
        # Where a path lies in a mount of the pod, that mount is read-only.
        holding = [m for m in container["volumeMounts"] if under(path, (m["mountPath"],))]
        assert all(m.get("readOnly") for m in holding), holding


@pytest.mark.parametrize(
    ("platform", "want"),
    [
        pytest.param(PLATFORM, [IMAGE_LAUNCHER], id="the-images-agent"),
        pytest.param(
            AGENT_PLATFORM, ["/usr/bin/python3", "-I", f"{BUNDLE}/{LAUNCHER}"], id="agent-delivered"
        ),
        pytest.param(
            ELSEWHERE, [OTHER_PYTHON, "-I", f"{BUNDLE}/{LAUNCHER}"], id="python-elsewhere"
        ),
    ],
)
@pytest.mark.parametrize("preset", POD_PRESETS)
def test_the_agents_command_is_the_launcher_or_the_isolated_interpreter(
    preset: str, platform: SandboxPlatform, want: list[str]
) -> None:
    (pod,) = pods(settled(preset, platform))
    command = sandbox_container(pod)["command"]
    assert command[: len(want)] == want
    assert command[len(want) :] == ["--address", "0.0.0.0:49983", "--root", "/workspace"]


def test_the_launcher_of_an_image_is_a_documented_absolute_path() -> None:
    assert IMAGE_LAUNCHER == "/usr/local/bin/workspace-sandbox-agent"
    assert under(IMAGE_LAUNCHER, USER_WRITABLE) is None


def test_the_shipped_agent_example_runs_the_debian_and_ubuntu_python() -> None:
    # Unset, input.agent.python is the interpreter Debian's and Ubuntu's python3 package installs.
    agent: dict[str, Any] = agent_platform_input()["agent"]
    assert "python" not in agent
    assert AGENT_PLATFORM.agent is not None
    assert AGENT_PLATFORM.agent.python == "/usr/bin/python3"
