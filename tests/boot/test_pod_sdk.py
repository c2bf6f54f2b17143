"""The rendered pod under runc and runsc, driven by the unmodified SDK through the gateway.

Each sandbox the SDK creates is rendered by the function (the `gvisor` preset: an agent-sandbox
Sandbox's pod template), translated into OCI bundles with its hardening intact
(`pod_bundle.py`), and run on this host in a network namespace of its own (`pod_host.py`), the
gateway forwarding to the pod's own address. What a tenant's agent does there (files,
commands, git, pip, npm, the code interpreter) works as the pod's user, and what the spec forbids (writing the root
file system, capabilities, gaining privileges, unfiltered syscalls) stays forbidden inside.

Needs root, runc, iptables, containers-common's seccomp profile and the images
`scripts/test-images sandbox` and `scripts/test-images runsc` build: without them the tests
skip, and with `CI` set they fail. pip and npm reach their registries through the host (NAT,
`pod_host.egress`), as a node's pods do.
"""

import base64
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from e2b import Sandbox, TimeoutException
from e2b_code_interpreter import Sandbox as Interpreter
from workspace_gateway.kubernetes.templates import Template

from tests.boot import pod_host
from tests.boot.pod_platform import PodPlatform
from tests.gateway import kube_fake
from tests.gateway.stand_in import serving

pytestmark = pytest.mark.pod

POD = Template(
    image="ubuntu-24.04",
    preset="gvisor",
    resources={"cpu": "1", "memory": "2Gi", "disk": "10Gi"},
    ports=(8000,),
)
INTERPRETER = replace(POD, ports=(), interpreter=True)
COMMAND_SECONDS = 120


@pytest.fixture(scope="module")
def images() -> Iterator[pod_host.Images]:
    found = pod_host.images()
    with pod_host.egress():
        yield found


@pytest.fixture(params=pod_host.RUNTIMES)
def platform(
    request: pytest.FixtureRequest,
    images: pod_host.Images,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[PodPlatform]:
    made: list[PodPlatform] = []

    def platform_of(cluster: kube_fake.Cluster, folder: Path) -> PodPlatform:
        made.append(PodPlatform(cluster, folder, runtime=request.param, images=images))
        return made[0]

    templates = {"base": POD, "code-interpreter-v1": INTERPRETER}
    with serving(tmp_path, monkeypatch, templates=templates, platform_of=platform_of):
        yield made[0]


def shell(sandbox: Sandbox, script: str) -> str:
    """`script`'s output, stderr too, and its exit status, whatever the status."""
    done = sandbox.commands.run(f"{{ {script}; }} 2>&1; echo rc=$?", timeout=COMMAND_SECONDS)
    return done.stdout


def status_field(sandbox: Sandbox, name: str) -> str:
    text = sandbox.commands.run(f"grep '^{name}:' /proc/self/status").stdout
    return text.split(":", 1)[1].strip()


def test_the_sdk_works_in_the_rendered_pod_and_its_hardening_holds(platform: PodPlatform) -> None:
    sandbox = Sandbox.create(envs={"GREETING": "hello"})
    assert sandbox.commands.run("echo $GREETING").stdout == "hello\n"
    assert sandbox.commands.run("id").stdout == "uid=1000(user) gid=1000(user) groups=1000(user)\n"
    sandbox.files.write("notes/kept.txt", "kept")
    assert sandbox.files.read("notes/kept.txt") == "kept"
    assert [e.name for e in sandbox.files.list("notes")] == ["kept.txt"]
    assert sandbox.commands.run("ls -l notes/kept.txt").stdout.split()[2:4] == ["user", "user"]
    assert sandbox.commands.run("stat -c '%U %s' notes/kept.txt").stdout == "user 4\n"
    # E2B's home names the workspace too, for files and commands alike.
    sandbox.files.write("/home/user/e2b.txt", "by E2B's path")
    assert sandbox.files.read("/workspace/e2b.txt") == "by E2B's path"
    assert sandbox.files.read("/home/user/notes/kept.txt") == "kept"
    assert sandbox.commands.run("cd /home/user && cat e2b.txt notes/kept.txt").stdout == (
        "by E2B's pathkept"
    )

    git = (
        "git init -q repo && cd repo && git config user.email a@example.com"
        " && git config user.name A && echo x > x && git add x && git commit -qm one"
        " && git log --format=%s"
    )
    assert shell(sandbox, git).endswith("one\nrc=0\n")
    pip = "pip install --user --no-cache-dir --quiet six==1.17.0 && python3 -c 'import six'"
    assert shell(sandbox, pip).endswith("rc=0\n"), shell(sandbox, pip)
    npm = (
        "mkdir js && cd js && npm install --no-audit --no-fund --silent is-number@7.0.0"
        " && node -e 'console.log(require(\"is-number\")(1))'"
    )
    assert shell(sandbox, npm).endswith("true\nrc=0\n"), shell(sandbox, "env")

    # A preview: a server the user starts on the template's port, reached through the gateway
    # at the pod's own address, with no credential; a port the template doesn't name is not.
    sandbox.files.write("site/index.html", "previewed")
    sandbox.commands.run("cd site && exec python3 -m http.server 8000", background=True)
    gateway = os.environ["E2B_SANDBOX_URL"]
    route = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "8000"}
    deadline = time.monotonic() + COMMAND_SECONDS
    while (page := httpx.get(gateway + "/index.html", headers=route)).status_code == 502:
        assert time.monotonic() < deadline, page.text
        time.sleep(0.5)
    assert (page.status_code, page.text) == (200, "previewed")
    other = httpx.get(gateway + "/", headers={**route, "E2b-Sandbox-Port": "8001"})
    assert other.json()["message"] == "The sandbox is running but port is not open: 8001"

    # A sample of what the sandbox sees, through the gateway from the agent in the pod.
    (sample,) = sandbox.get_metrics()
    assert sample.cpu_count >= 1
    assert 0.0 <= sample.cpu_used_pct <= 100.0
    assert 0 < sample.mem_used < sample.mem_total
    assert 0 < sample.disk_used <= sample.disk_total

    # The spec's hardening, as the process inside sees it.
    assert shell(sandbox, "touch /usr/planted").endswith("rc=1\n")
    root_options = "awk '$5 == \"/\" { print $6 }' /proc/self/mountinfo"
    assert sandbox.commands.run(root_options).stdout.strip().split(",")[0] == "ro"
    assert status_field(sandbox, "CapEff") == "0000000000000000"
    assert status_field(sandbox, "CapBnd") == "0000000000000000"
    assert status_field(sandbox, "NoNewPrivs") == "1"
    assert status_field(sandbox, "Seccomp") == "2"

    # Paused, the pod goes and its workspace stays; resumed, a new pod mounts it.
    assert sandbox.pause() is True
    assert platform.pods == {}
    resumed = Sandbox.connect(sandbox.sandbox_id)
    assert resumed.files.read("notes/kept.txt") == "kept"
    assert resumed.commands.run("cd repo && git log --format=%s").stdout == "one\n"
    assert resumed.kill() is True


def test_the_code_interpreter_runs_in_the_rendered_pod(platform: PodPlatform) -> None:
    """`e2b_code_interpreter` on its default template: the image's agent runs real kernels as
    the pod's user, in the workspace, under the runtime's own restrictions."""
    sandbox = Interpreter.create()
    try:
        assert len(platform.pods) == 1  # the interpreter is the agent's child, in its pod
        sandbox.run_code("kept = 21")
        assert sandbox.run_code("kept * 2").text == "42"
        who = sandbox.run_code("import os\nos.getuid(), os.getcwd(), os.environ['HOME']")
        assert who.text == "(1000, '/workspace', '/workspace')"
        chart = sandbox.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
        assert chart.error is None, chart.error
        (png,) = [r.png for r in chart.results if r.png]
        assert base64.b64decode(png).startswith(b"\x89PNG")
        failed = sandbox.run_code("1 / 0")
        assert failed.error is not None
        assert failed.error.name == "ZeroDivisionError"
        assert sandbox.run_code("const n = 40; n + 2", language="javascript").text == "42"
        with pytest.raises(TimeoutException):
            sandbox.run_code("import time\ntime.sleep(120)", timeout=5)
        assert sandbox.run_code("kept").text == "21"
        # What the kernels write for themselves stays out of the user's workspace.
        assert sorted(e.name for e in sandbox.files.list(".")) == []
    finally:
        sandbox.kill()


def test_a_killed_agent_comes_back_closed_until_the_gateway_initializes_it(
    platform: PodPlatform,
) -> None:
    sandbox = Sandbox.create(envs={"GREETING": "hello"})
    sandbox_id = sandbox.sandbox_id
    sandbox.files.write("kept.txt", "kept")
    where = ("team-a", sandbox_id)
    pod = platform.pods[where]
    agent = f"http://{platform.hosts_of[where]}:{platform.port}"
    pod.kill_main()  # as an OOM kill or a crash ends it
    deadline = time.monotonic() + 30
    while platform.restarts == 0 or pod.status() != "running":
        assert time.monotonic() < deadline, "the container did not come back"
        time.sleep(0.05)
    health = pod.wait_healthy()
    assert health.headers["x-agent-initialized"] == "false"
    # Straight to the pod, without the token: refused.
    refused = httpx.get(f"{agent}/files", params={"path": "kept.txt"})
    assert refused.status_code == 401

    resumed = Sandbox.connect(sandbox_id)
    assert resumed.files.read("kept.txt") == "kept"
    assert resumed.commands.run("echo $GREETING").stdout == "hello\n"
    assert resumed.kill() is True
