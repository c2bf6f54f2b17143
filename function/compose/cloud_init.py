"""NoCloud user data for the guest: the unprivileged user, SSH keys, /workspace and DNS.

KubeVirt inlines user data into the VM object, where the guest and anyone who can read the VM
see it, and caps it at 2048 bytes. So it carries no secret, only public keys and public
resolvers. It is written as JSON, which cloud-init reads as YAML, so that tenant text is always
quoted by a serializer and never by string formatting.

Everything runs from `bootcmd`, which cloud-init repeats on every boot, not once per instance:
KubeVirt keeps the instance id stable across restarts, so per-instance modules would never pick
up a changed key list. Keys reach the script as positional arguments, never as shell text.
"""

import json

from function.errors import FieldError
from function.model.address import ip_text
from function.model.platform import Preset, SandboxPlatform
from function.model.spec import WorkspaceSandbox

USER = "sandbox"
WORKSPACE = "/workspace"
MAX_BYTES = 2048

_SETUP = (
    "set -eu;"
    f"id -u {USER} >/dev/null 2>&1 || useradd --create-home --user-group --shell /bin/bash {USER};"
    f"install -d -m 0750 -o {USER} -g {USER} {WORKSPACE};"
    f"install -d -m 0700 -o {USER} -g {USER} /home/{USER}/.ssh;"
    f"k=/home/{USER}/.ssh/authorized_keys;"
    'printf "%s\\n" "$@" >"$k";'
    f'chown {USER}:{USER} "$k";chmod 0600 "$k";'
    f"printf 'cd {WORKSPACE}\\n' >/etc/profile.d/zz-workspace.sh;"
    'd=/etc/systemd/resolved.conf.d;[ -z "$DNS" ] || { mkdir -p $d;'
    "printf '[Resolve]\\nDNS=%s\\nDomains=~.\\n' \"$DNS\" >$d/90-sandbox.conf;"
    "systemctl try-restart systemd-resolved || true; }"
)


def user_data(ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform) -> str:
    # With cluster DNS the guest keeps what DHCP hands it: the pod's cluster resolver.
    resolvers = "" if preset.cluster_dns else " ".join(map(ip_text, platform.network.resolvers))
    script = f"DNS='{resolvers}';{_SETUP}"
    config = {
        # No distro default user: the only account is ours, with no password and no sudo.
        "users": [],
        "disable_root": True,
        "ssh_pwauth": False,
        "bootcmd": [["sh", "-c", script, USER, *ws.spec.ssh.authorized_keys]],
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
