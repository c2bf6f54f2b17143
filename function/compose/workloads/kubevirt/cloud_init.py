"""NoCloud user data for the guest: the unprivileged user, SSH keys, /workspace and DNS.

/workspace is reached as /home/user too, E2B's home.

KubeVirt inlines user data into the VM object, where the guest and anyone who can read the VM
see it, and caps it at 2048 bytes. So it carries no secret, only public keys and public
resolvers. It is written as JSON, which cloud-init reads as YAML, so that tenant text is always
quoted by a serializer and never by string formatting.

Everything runs from `bootcmd`, which cloud-init repeats on every boot, not once per instance:
KubeVirt keeps the instance id stable across restarts, so per-instance modules would never pick
up a changed key list. Keys reach the script as positional arguments, never as shell text.

The script runs as root, and hostile code may run as the user between two boots and replace
anything in the user's home with a link to a file of root's. So root writes nothing there: every
file it writes has only root-owned directories above it, and is renamed into place from a
temporary file beside it. `/workspace` is the user's, but its entry is in `/`, which the user
can't replace, so setting its owner and mode follows no link of the user's. The keys live in a
root-owned `AuthorizedKeysFile`, `/etc/ssh/authorized_keys/<user>`, named by an sshd drop-in
that sorts before the image's own (`50-cloud-init.conf`, `60-cloudimg-settings.conf`): sshd
reads `sshd_config.d/*.conf` first, in lexical order, and keeps a keyword's first value. It is
the only key file sshd reads, so a key removed from the spec stops working at the next boot,
whatever is left in `~/.ssh`.

The account is `user` (E2B's default user) on a new VM, with the workspace as its home, and
`sandbox` on a VM an earlier release made, whose disk already holds that account
(`account.py`); the script never makes a second one.

With `input.agent`, the script ends by mounting the agent's disk read-only, nosuid and nodev
under /run (root's, and new every boot), and running the `boot.sh` on it, which writes the
agent's systemd unit and starts it without waiting (`agent/bundle/boot.sh`). Not noexec: the
agent's compiled extensions are mapped executable. That is last, so a missing disk fails
nothing else.
"""

import json

from function.compose.agent import DISK_SERIAL
from function.compose.workload import USER
from function.errors import FieldError
from function.model.address import ip_text
from function.model.platform import Preset, SandboxPlatform
from function.model.spec import WorkspaceSandbox

WORKSPACE = "/workspace"
MAX_BYTES = 2048

# Root's: the keys sshd reads for each user, and the drop-in that tells it so.
KEYS = "/etc/ssh/authorized_keys"
SSHD_CONFIG_D = "/etc/ssh/sshd_config.d"
SSHD_DROP_IN = f"{SSHD_CONFIG_D}/00-sandbox.conf"


def _setup(account: str) -> str:
    return ";".join(
        (
            "set -eu",
            # w PATH: stdin to PATH, root's, 0644, renamed into place from PATH~ beside it (the
            # directory is root's; `*.conf` and `*.sh` globs skip the `~` name).
            'w(){ cat>"$1~";chmod 644 "$1~";mv -f "$1~" "$1";}',
            # Short names for the byte budget, as the short options: -m creates the home (the
            # workspace, from /etc/skel) if it is missing, -U a group of the same name.
            f"U={account}",
            f"W={WORKSPACE}",
            "id $U>/dev/null 2>&1||useradd -mU -d $W -s /bin/bash $U",
            "install -d -m 750 -o $U -g $U $W",
            # E2B's home, which its examples and model-written code name: the workspace too, a
            # link in root's /home (-T: never one inside a /home/user the image has).
            "ln -sfT $W /home/user||:",
            # 0755 and 0644 whatever the umask: sshd reads the keys as the user.
            f"a={KEYS}",
            f"s={SSHD_CONFIG_D}",
            "install -d -m 755 $a $s",
            f'echo "AuthorizedKeysFile $a/%u"|w $s/{SSHD_DROP_IN.rpartition("/")[2]}',
            'printf "%s\\n" "$@"|w $a/$U',
            "echo cd $W|w /etc/profile.d/zz-workspace.sh",
            "d=/etc/systemd/resolved.conf.d",
            '[ -z "$DNS" ]||{ install -d -m 755 $d',
            "printf '[Resolve]\\nDNS=%s\\nDomains=~.\\n' \"$DNS\"|w $d/90-sandbox.conf",
            # A pattern, not a name: it matches nothing on a guest without resolved (Debian's
            # own images), where a name is an error, and a resolved that fails still says so.
            "systemctl try-restart 'systemd-resolved*'||:;}",
        )
    )


# Where the agent's disk is mounted: /run is root's, and empty at every boot.
AGENT_MOUNT = "/run/wsagent"


def _agent(port: int) -> str:
    return ";".join(
        (
            f"m={AGENT_MOUNT}",
            "mkdir -p $m",
            # udev may still be linking devices when cloud-init runs.
            "udevadm settle",
            f"mount -o ro,nosuid,nodev /dev/disk/by-id/virtio-{DISK_SERIAL} $m",
            f"sh $m/boot.sh {port} $U $W",
        )
    )


def user_data(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform, account: str = USER
) -> str:
    # With cluster DNS the guest keeps what DHCP hands it: the pod's cluster resolver.
    resolvers = "" if preset.cluster_dns else " ".join(map(ip_text, platform.network.resolvers))
    script = f"DNS='{resolvers}';{_setup(account)}"
    if platform.agent is not None:
        script += ";" + _agent(platform.gateway.agent_port)
    config = {
        # No distro default user: the only account is ours, with no password and no sudo. A
        # list naming no one: cloud-init before 23.2 refuses an empty list (minItems) and
        # calls a string or a mapping deprecated, but skips an empty name.
        "users": [""],
        "disable_root": True,
        "ssh_pwauth": False,
        "bootcmd": [["sh", "-c", script, account, *ws.spec.ssh.authorized_keys]],
    }
    text = "#cloud-config\n" + json.dumps(config, separators=(",", ":")) + "\n"
    size = len(text.encode())
    if size > MAX_BYTES:
        raise FieldError(
            "spec.ssh.authorizedKeys",
            f"the keys make the guest's cloud-init {size} bytes; KubeVirt allows {MAX_BYTES}, "
            "so use fewer or shorter keys (ed25519 keys are about 100 bytes)",
        )
    return text
