"""The reference sandbox image (`images/sandbox/Dockerfile`) and how a pod starts its agent.

Its PATH starts with the user's `~/.local/bin`, on the workspace disk, so that what a user
installs comes first for the user's own commands. The agent must not depend on that order: the
function starts the image's launcher by its absolute path, the launcher names its interpreter
by absolute path, and neither lies where the user can write.
"""

import json
import re
import shlex

import pytest

from function.compose import pod
from function.compose.agent import BUNDLE, IMAGE_LAUNCHER, LAUNCHER, pod_command
from function.model.platform import DEFAULT_PYTHON, USER_WRITABLE, SandboxPlatform, under
from tests.support import AGENT_PLATFORM, PLATFORM, ROOT

DOCKERFILE = ROOT / "images" / "sandbox" / "Dockerfile"
_HEREDOC = re.compile(
    r"^COPY (?P<flags>(--\S+ )*)<<(?P<end>\w+) (?P<dest>\S+)\n(?P<body>.*?)^(?P=end)$", re.M | re.S
)


def instructions() -> list[tuple[str, str]]:
    """(instruction, arguments) of the Dockerfile, continuation lines joined, heredocs apart."""
    text = _HEREDOC.sub("", DOCKERFILE.read_text())
    joined = re.sub(r"\\\n", " ", text)
    found = []
    for line in joined.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def env() -> dict[str, str]:
    values: dict[str, str] = {}
    for word, rest in instructions():
        if word == "ENV":
            values.update(pair.split("=", 1) for pair in shlex.split(rest))
    return values


def heredocs() -> dict[str, str]:
    """The files the Dockerfile writes from heredocs: destination -> content."""
    return {m["dest"]: m["body"] for m in _HEREDOC.finditer(DOCKERFILE.read_text())}


def found_on(path: list[str], name: str, files: set[str]) -> str | None:
    """What a runtime executes for `command[0]` = `name`: a name with a slash is itself."""
    if "/" in name:
        return name
    return next((f"{d}/{name}" for d in path if f"{d}/{name}" in files), None)


def user_writable_on_path() -> list[str]:
    home = env()["HOME"]
    return [d for d in env()["PATH"].split(":") if under(d, (home, *USER_WRITABLE))]


def shebang() -> list[str]:
    first = heredocs()[IMAGE_LAUNCHER].splitlines()[0]
    assert first.startswith("#!")
    return first[2:].split()


def test_the_image_puts_the_users_bin_on_path_and_its_home_is_the_workspace() -> None:
    # What this guards against: a directory the user writes, ahead of the system's.
    assert env()["HOME"] == pod.WORKSPACE
    assert user_writable_on_path() == ["/workspace/.local/bin"]
    assert env()["PATH"].split(":")[0] == "/workspace/.local/bin"


def test_the_launcher_is_installed_where_the_function_starts_it() -> None:
    assert IMAGE_LAUNCHER in heredocs()
    assert f"COPY --chmod=0755 <<EOF {IMAGE_LAUNCHER}" in DOCKERFILE.read_text()
    assert ("RUN", f"{IMAGE_LAUNCHER} --version") in instructions()
    (cmd,) = [json.loads(rest) for word, rest in instructions() if word == "CMD"]
    assert cmd == pod_command(PLATFORM)


def test_the_launcher_runs_the_agents_venv_isolated() -> None:
    interpreter, *flags = shebang()
    venvs = [
        rest.split()[3]
        for word, rest in instructions()
        if word == "RUN" and rest.startswith("python3 -m venv /opt/workspace-sandbox-agent-venv")
    ]
    assert venvs == ["/opt/workspace-sandbox-agent-venv"]
    assert interpreter == f"{venvs[0]}/bin/python"
    assert flags == ["-I"]


@pytest.mark.parametrize(
    "platform", [PLATFORM, AGENT_PLATFORM], ids=["the-images-agent", "agent-delivered"]
)
def test_no_path_the_agent_uses_depends_on_path(platform: SandboxPlatform) -> None:
    command = pod_command(platform)
    used = [command[0], *([command[2]] if command[1:2] == ["-I"] else []), shebang()[0]]
    writable = user_writable_on_path()
    # Whatever the user drops into a directory of PATH ahead of the system's, the runtime and
    # the kernel run the same files: each is absolute and outside every such directory.
    planted = {f"{d}/{name}" for d in writable for name in ("python3", LAUNCHER, "python")}
    for path in used:
        assert found_on(env()["PATH"].split(":"), path, planted) == path
        assert under(path, (*writable, env()["HOME"], *USER_WRITABLE)) is None, path


def test_the_default_interpreter_is_the_images_python3() -> None:
    (base,) = [rest for word, rest in instructions() if word == "FROM"]
    assert base.startswith("docker.io/library/ubuntu:")
    installs = [rest for word, rest in instructions() if "apt-get install" in rest]
    assert any("python3" in shlex.split(r) for r in installs)
    # Ubuntu's python3 package is /usr/bin/python3, which a delivered agent runs on.
    assert DEFAULT_PYTHON == "/usr/bin/python3"
    assert pod_command(AGENT_PLATFORM)[:3] == [DEFAULT_PYTHON, "-I", f"{BUNDLE}/{LAUNCHER}"]


def test_the_login_profile_gives_the_users_commands_the_images_env() -> None:
    # The agent's commands don't inherit the container's ENV; their login shell reads this.
    profile = heredocs()["/etc/profile.d/workspace-sandbox.sh"]
    exported = dict(line.removeprefix("export ").split("=", 1) for line in profile.splitlines())
    assert exported == env()
