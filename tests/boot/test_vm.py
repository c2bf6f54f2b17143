"""The rendered VM, booted in QEMU, driven by the unmodified SDK through the gateway.

One VM for the module, checked in order: files and commands, SSH, the registries, cloud-init's
own verdict, then a reboot inside the guest and a cold restart on the same disk. The platform
stands in for KubeVirt: a Running sandbox's VM boots (or boots again, on its own disk), and is
reported Ready once its agent answers, as KubeVirt's readiness probe reports it; a Suspended
one is powered off.

E2B's create has no SSH keys, so the platform renders each sandbox with one key of the test's
in `spec.ssh.authorizedKeys` (`VMPlatform`).
"""

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from e2b import Sandbox

from tests.boot.vm import (
    BOOT_SECONDS,
    SHUTDOWN_SECONDS,
    Machine,
    VMPlatform,
    agent_disk,
    guest_image,
    new_key,
)
from tests.gateway import kube_fake
from tests.gateway.stand_in import Platform, serving

pytestmark = pytest.mark.boot

# The SDK waits for a whole boot in create and connect, and for a power-off in pause.
SLOW = BOOT_SECONDS + SHUTDOWN_SECONDS + 60


@dataclass
class Tier:
    sandbox: Sandbox
    platform: VMPlatform
    key: Path
    folder: Path
    gateway: str

    @property
    def machine(self) -> Machine:
        (machine,) = self.platform.machines.values()
        return machine

    def run(self, command: str, user: str = "user", timeout: float = 120) -> str:
        done = self.sandbox.commands.run(
            command, user=user, timeout=timeout, request_timeout=timeout + 30
        )
        assert done.exit_code == 0, (done.stdout, done.stderr)
        return done.stdout

    def boot_id(self) -> str:
        return self.run("cat /proc/sys/kernel/random/boot_id").strip()

    def refused_without_the_token(self) -> None:
        anonymous = httpx.get(
            f"{self.gateway}/files",
            params={"path": "."},
            headers={"E2b-Sandbox-Id": self.sandbox.sandbox_id},
            timeout=30,
        )
        assert anonymous.status_code == 401, anonymous.text


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tier]:
    guest = guest_image()
    folder = tmp_path_factory.mktemp("vm")
    agent = agent_disk(folder / "agent")
    key = new_key(folder / "spec-key", "spec-key")
    made: list[VMPlatform] = []

    def platform_of(cluster: kube_fake.Cluster, where: Path) -> Platform:
        made.append(VMPlatform(cluster, where, guest=guest, agent=agent, key=key))
        return made[0]

    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        serving(folder, monkeypatch, platform_of=platform_of),
    ):
        sandbox = Sandbox.create(envs={"GREETING": "hello"}, timeout=3600, request_timeout=SLOW)
        yield Tier(sandbox, made[0], key, folder, os.environ["E2B_SANDBOX_URL"])


def test_the_vm_is_ready_when_its_agent_answers_and_ssh_works_by_then(tier: Tier) -> None:
    (first,) = tier.platform.answers
    assert first.ssh.returncode == 0, first.ssh.stderr
    assert first.accelerator in {"kvm", "tcg"}
    assert first.seconds < BOOT_SECONDS


def test_one_workspace_root_for_files_and_commands_as_the_user(tier: Tier) -> None:
    tier.sandbox.files.write("notes.txt", "written through the SDK")
    assert tier.sandbox.files.read("/workspace/notes.txt") == "written through the SDK"
    out = tier.run("pwd; whoami; id -u; cat notes.txt; echo; stat -c %U /workspace/notes.txt")
    where, who, uid, text, owner = out.splitlines()
    assert (where, who, text, owner) == ("/workspace", "user", "written through the SDK", "user")
    assert int(uid) != 0
    assert tier.run("echo $GREETING") == "hello\n"
    # E2B's home names the same root, for files and commands alike.
    tier.sandbox.files.write("/home/user/e2b.txt", "by E2B's path")
    assert tier.sandbox.files.read("/workspace/e2b.txt") == "by E2B's path"
    assert tier.run("cat /home/user/notes.txt; echo; cd /home/user && cat e2b.txt") == (
        "written through the SDK\nby E2B's path"
    )
    assert tier.run("stat -c '%U %F' /home/user", user="root") == "root symbolic link\n"


def test_metrics_are_the_guest_s(tier: Tier) -> None:
    """The agent reads the guest kernel: QEMU's two CPUs and its 2048M, less what the guest
    kernel keeps for itself, whatever the host has."""
    (sample,) = tier.sandbox.get_metrics()
    assert sample.cpu_count == 2
    assert 1536 * 2**20 < sample.mem_total <= 2048 * 2**20, sample
    assert 0 < sample.mem_used < sample.mem_total
    assert 0 < sample.disk_used <= sample.disk_total
    assert 0.0 <= sample.cpu_used_pct <= 100.0


def test_ssh_takes_the_specs_key_alone_into_the_workspace(tier: Tier) -> None:
    machine = tier.machine
    login = machine.ssh(tier.key, "pwd; whoami")
    assert (login.returncode, login.stdout) == (0, "/workspace\nuser\n"), login.stderr
    root = machine.ssh(tier.key, "true", user="root")
    assert root.returncode == 255
    assert "Permission denied" in root.stderr
    # A key the user plants where sshd would look by default is not one sshd reads.
    planted = new_key(tier.folder / "planted-key", "planted")
    tier.run("mkdir -p -m 700 .ssh")
    tier.sandbox.files.write(".ssh/authorized_keys", planted.with_suffix(".pub").read_text())
    tier.run("chmod 600 .ssh/authorized_keys")
    refused = machine.ssh(planted, "true")
    assert refused.returncode == 255
    assert "Permission denied" in refused.stderr


def test_the_user_installs_from_pypi_and_npm(tier: Tier) -> None:
    # Debian 12 and Ubuntu 24.04 both mark their Python externally managed (PEP 668): a user
    # install into ~/.local says so. A package the image does not have, so pip fetches it.
    where = tier.run(
        "python3 -m pip install -q --user --break-system-packages tomli-w"
        " && python3 -c 'import tomli_w; print(tomli_w.__file__)'",
        timeout=240,
    )
    assert where.startswith("/workspace/.local/lib/python3"), where
    out = tier.run(
        "mkdir -p npm-check && cd npm-check && npm install --no-audit --no-fund is-number"
        " >/dev/null && node -e 'console.log(require(\"is-number\")(5))'",
        timeout=300,
    )
    assert out == "true\n"


def test_cloud_init_accepts_the_user_data_and_logs_no_error(tier: Tier) -> None:
    # The seed held the rendered VM's user data, byte for byte.
    seen = tier.run("cat /var/lib/cloud/instance/user-data.txt", user="root")
    assert seen == tier.machine.user_data
    schema = tier.sandbox.commands.run("cloud-init schema --system", user="root", timeout=120)
    assert schema.exit_code == 0, (schema.stdout, schema.stderr)
    assert "Valid" in schema.stdout
    log = tier.run("cat /var/log/cloud-init.log /var/log/cloud-init-output.log", user="root")
    # What cloud-init 22.4 logs at every boot for `users: []`, and what systemctl says of a
    # unit it does not have.
    assert "Invalid cloud-config" not in log
    assert "systemd-resolved.service not found" not in log
    assert "Traceback" not in log


def test_a_reboot_inside_the_guest_follows_no_link_the_user_planted(tier: Tier) -> None:
    shadow = "sha256sum /etc/shadow; stat -c '%U %a %h' /etc/shadow"
    before = tier.run(shadow, user="root")
    # Hostile code as the user: every file of its home that root might write becomes a link to
    # a file of root's.
    tier.run(
        "for f in .profile .bashrc .bash_logout .ssh/authorized_keys; do"
        " rm -f $f; ln -s /etc/shadow $f; done"
    )
    tier.refused_without_the_token()
    boot = tier.boot_id()
    # A reboot as the guest's root does it (systemd's own reboot, the VM's QEMU going on), in
    # the background: the reboot it starts may cut its stream off.
    with contextlib.suppress(Exception):
        tier.sandbox.commands.run("systemctl reboot", user="root", background=True)
    machine = tier.machine
    machine.wait_for_agent_gone()
    machine.wait_for_agent()
    login = machine.ssh(tier.key, "whoami")
    assert (login.returncode, login.stdout) == (0, "user\n"), machine.tail(login.stderr)
    # The gateway gives the agent its token and env vars back before the SDK's next call.
    assert tier.boot_id() != boot
    assert tier.run("echo $GREETING") == "hello\n"
    assert tier.run(shadow, user="root") == before
    tier.refused_without_the_token()


def test_a_cold_restart_on_the_same_disk_brings_the_agent_back(tier: Tier) -> None:
    tier.refused_without_the_token()
    boot = tier.boot_id()
    machine = tier.machine
    assert tier.sandbox.pause(request_timeout=SLOW) is True
    assert machine.process is not None
    assert machine.process.poll() is not None, "the VM still runs"
    resumed = Sandbox.connect(tier.sandbox.sandbox_id, request_timeout=SLOW)
    tier.sandbox = resumed
    assert tier.platform.answers[-1].ssh.returncode == 0, tier.platform.answers[-1].ssh.stderr
    assert resumed.files.read("notes.txt") == "written through the SDK"
    assert tier.boot_id() != boot
    assert tier.run("echo $GREETING") == "hello\n"
    tier.refused_without_the_token()
