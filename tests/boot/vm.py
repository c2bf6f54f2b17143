"""The rendered VM booted in QEMU: the function's own cloud-init and agent disk, on the test guest.

Each `Machine` is one sandbox's VM, as KubeVirt would run it from the rendered VirtualMachine:

- its root disk, the workspace disk, is a qcow2 overlay on the cached test guest
  (`scripts/test-images guest`), so a cold restart boots the same disk again;
- its NoCloud seed is an ISO labelled `cidata` holding the VM's `cloudInitNoCloud` volume
  verbatim (`userData`, and `networkData` where the VM has one), with the meta-data KubeVirt
  writes (an instance id stable across restarts, the VM's name as hostname);
- the agent's disk, built by `agent/scripts/build-bundle` and `build-disk`, is attached
  read-only with the serial the VM names.

QEMU's user network stands for KubeVirt's masquerade binding (DHCP, NAT behind the host), with
the agent's port and SSH forwarded from one loopback address only. The kernel boots from the
guest image's own /boot (`-kernel`, `-initrd`), as a catalog image boots from its own. KVM when
QEMU can use it, else TCG: `accelerator` says which ran. A `/dev/kvm` that opens is not enough
(on a machine that is itself a VM it may run no guest code at all), so a short probe decides:
KVM is used when its guest kernel prints its first line within seconds.

Every wait is bounded, and a failed one shows the serial console's tail.
"""

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
from workspace_gateway.kubernetes.objects import PLURAL

from function.model import parse
from function.model.platform import SandboxPlatform
from function.model.spec import WorkspaceSandbox
from function.render import render
from tests.gateway import kube_fake
from tests.gateway.stand_in import Platform
from tests.ports import free_port
from tests.support import AGENT_PLATFORM

ROOT = Path(__file__).resolve().parents[2]
TEST_IMAGES = ROOT / "scripts" / "test-images"
AGENT_SCRIPTS = ROOT / "agent" / "scripts"
GUEST_AGENT_PORT = 49983
Where = tuple[str, str]
TOOLS = ("qemu-system-x86_64", "qemu-img", "genisoimage", "ssh", "ssh-keygen")
MEMORY = "2048M"
"""Less than a preset's 4Gi: what the guest needs, on a CI machine that runs other tiers too."""
BOOT_SECONDS = 240.0
"""QEMU start to the agent's first answer. Measured under TCG on 2 cores: 36 to 69 s."""
SHUTDOWN_SECONDS = 90.0


def unavailable(reason: str) -> None:
    """A missing tool or image: fails in CI, where the tier must run, and skips elsewhere."""
    message = f"{reason}; build the images with scripts/test-images guest (docs/development.md)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@dataclass(frozen=True)
class Guest:
    """The cached test guest: the disk every VM's overlay is on, and the kernel that boots it."""

    disk: Path
    kernel: Path
    initrd: Path
    cmdline: str


def guest_image() -> Guest:
    for tool in TOOLS:
        if shutil.which(tool) is None:
            unavailable(f"the boot tier needs {tool}")
    found = subprocess.run(
        [str(TEST_IMAGES), "built", "guest"], capture_output=True, text=True, check=False
    )
    folder = Path(found.stdout.strip())
    if found.returncode != 0:
        unavailable(f"no test guest at {folder}")
    return Guest(
        disk=folder / "disk.qcow2",
        kernel=folder / "vmlinuz",
        initrd=folder / "initrd.img",
        cmdline=(folder / "cmdline").read_text().strip(),
    )


def agent_disk(folder: Path) -> Path:
    """The agent's disk, as the agent image carries it (`/disk/agent.img`)."""
    bundle, disk = folder / "bundle", folder / "agent.img"
    for step in (["build-bundle", str(bundle)], ["build-disk", str(bundle), str(disk)]):
        done = subprocess.run(
            [str(AGENT_SCRIPTS / step[0]), *step[1:]], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"{step[0]}: {done.stderr}"
    return disk


def rendered_vm(
    namespace: str, name: str, spec: dict[str, Any], platform: SandboxPlatform
) -> dict[str, Any]:
    """The VirtualMachine the function renders for this sandbox: what KubeVirt would run."""
    ws = parse(
        WorkspaceSandbox, {"metadata": {"name": name, "namespace": namespace}, "spec": spec}, ""
    )
    rendered = render(ws, platform, {}, datetime.now(UTC))
    (vm,) = [m for m in rendered.resources.values() if m["kind"] == "VirtualMachine"]
    return vm


def cloud_init_of(vm: dict[str, Any]) -> dict[str, str]:
    volumes = vm["spec"]["template"]["spec"]["volumes"]
    (data,) = [v["cloudInitNoCloud"] for v in volumes if "cloudInitNoCloud" in v]
    return dict(data)


def agent_serial_of(vm: dict[str, Any]) -> str:
    disks = vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"]
    (serial,) = [d["serial"] for d in disks if d["name"] == "agent"]
    return str(serial)


PROBE_SECONDS = 10.0


@cache
def accelerator(kernel: Path) -> str:
    """`kvm` if QEMU boots `kernel` under KVM far enough to print, else `tcg`."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    with tempfile.TemporaryDirectory() as folder:
        console = Path(folder) / "console"
        probe = subprocess.Popen(
            [
                *("qemu-system-x86_64", "-accel", "kvm", "-cpu", "host", "-m", "256M"),
                *("-nodefaults", "-display", "none", "-no-reboot", "-kernel", str(kernel)),
                *("-append", "console=ttyS0 panic=-1", "-serial", f"file:{console}"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + PROBE_SECONDS
            while time.monotonic() < deadline and probe.poll() is None:
                if console.exists() and b"Linux version" in console.read_bytes():
                    return "kvm"
                time.sleep(0.1)
            return "tcg"
        finally:
            probe.kill()
            probe.wait(timeout=30)


class Machine:
    """One sandbox's VM: its disk, its seed, and the QEMU process running it, if any."""

    def __init__(
        self,
        folder: Path,
        guest: Guest,
        vm: dict[str, Any],
        namespace: str,
        agent: Path,
    ) -> None:
        self.folder = folder
        self.guest = guest
        self.agent = agent
        self.agent_serial = agent_serial_of(vm)
        self.overlay = folder / "workspace.qcow2"
        self.seed = folder / "seed.iso"
        self.console = folder / "console.log"
        self.qmp_path = folder / "qmp.sock"
        self.process: subprocess.Popen[bytes] | None = None
        self.accelerator = ""
        self.host = ""
        self.agent_port = 0
        self.ssh_port = 0
        folder.mkdir(parents=True, exist_ok=True)
        self._seed(vm, namespace)
        subprocess.run(
            [
                *("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2"),
                *("-b", str(guest.disk), str(self.overlay)),
            ],
            check=True,
        )

    def _seed(self, vm: dict[str, Any], namespace: str) -> None:
        data = cloud_init_of(vm)
        self.user_data = data["userData"]
        files = self.folder / "seed"
        files.mkdir()
        (files / "user-data").write_text(data["userData"])
        if "networkData" in data:
            (files / "network-data").write_text(data["networkData"])
        # KubeVirt's meta-data: the same instance id at every boot of the VM.
        name = vm["metadata"]["name"]
        meta = {"instance-id": f"{name}.{namespace}", "local-hostname": name}
        (files / "meta-data").write_text(json.dumps(meta))
        subprocess.run(
            [
                *("genisoimage", "-quiet", "-output", str(self.seed), "-volid", "cidata"),
                *("-joliet", "-rock", str(files)),
            ],
            check=True,
        )

    def start(self, host: str, agent_port: int, ssh_port: int | None = None) -> None:
        """Start QEMU on the same disk; returns at once (`wait_for_agent` waits)."""
        assert self.process is None or self.process.poll() is not None, "already running"
        self.host, self.agent_port = host, agent_port
        self.ssh_port = ssh_port or free_port(host)
        forwards = (
            f"hostfwd=tcp:{host}:{agent_port}-:{GUEST_AGENT_PORT},"
            f"hostfwd=tcp:{host}:{self.ssh_port}-:22"
        )
        self.qmp_path.unlink(missing_ok=True)
        self.accelerator = accelerator(self.guest.kernel)
        with self.console.open("a") as log:
            log.write(f"\n==== QEMU start {datetime.now(UTC).isoformat()} ====\n")
        command = [
            "qemu-system-x86_64",
            *("-machine", "q35", "-accel", self.accelerator, "-cpu", "max"),
            *("-smp", "2", "-m", MEMORY, "-nodefaults", "-no-user-config", "-display", "none"),
            *("-kernel", str(self.guest.kernel), "-initrd", str(self.guest.initrd)),
            *("-append", self.guest.cmdline),
            # The VM's disks in its order, as KubeVirt attaches them: the workspace (the root,
            # /dev/vda), the seed, the agent's.
            *("-drive", f"file={self.overlay},if=none,id=workspace,format=qcow2,cache=unsafe"),
            *("-device", "virtio-blk-pci,drive=workspace"),
            *("-drive", f"file={self.seed},if=none,id=cloudinit,format=raw,readonly=on"),
            *("-device", "virtio-blk-pci,drive=cloudinit"),
            *("-drive", f"file={self.agent},if=none,id=agent,format=raw,readonly=on"),
            *("-device", f"virtio-blk-pci,drive=agent,serial={self.agent_serial}"),
            *("-netdev", f"user,id=net0,{forwards}", "-device", "virtio-net-pci,netdev=net0"),
            *("-chardev", f"file,id=console,path={self.console},append=on"),
            *("-serial", "chardev:console"),
            *("-qmp", f"unix:{self.qmp_path},server=on,wait=off"),
        ]
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 30
        while not self.qmp_path.exists():
            self._alive()
            assert time.monotonic() < deadline, self.tail("QEMU made no QMP socket")
            time.sleep(0.05)

    def _alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            stderr = self.process.stderr.read().decode() if self.process.stderr else ""
            raise AssertionError(self.tail(f"QEMU exited {self.process.returncode}: {stderr}"))

    def qmp(self, command: str, **arguments: Any) -> dict[str, Any]:
        """One QMP command on a connection of its own; its `return`."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(30)
            s.connect(str(self.qmp_path))
            stream = s.makefile("rw")
            json.loads(stream.readline())  # the greeting
            answer: dict[str, Any] = {}
            asked: dict[str, Any] = {"execute": command}
            if arguments:
                asked["arguments"] = arguments
            for message in ({"execute": "qmp_capabilities"}, asked):
                stream.write(json.dumps(message) + "\n")
                stream.flush()
                while not ({"return", "error"} & (answer := json.loads(stream.readline())).keys()):
                    pass  # an event
                assert "error" not in answer, answer
            result: dict[str, Any] = answer["return"]
            return result

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.agent_port}"

    def health(self) -> httpx.Response | None:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(self.url + "/health", timeout=2)
        return None

    def wait_for_agent(self, seconds: float = BOOT_SECONDS) -> float:
        """Wait for the agent's first answer; the seconds it took."""
        start = time.monotonic()
        while (answer := self.health()) is None or answer.status_code != 204:
            self._alive()
            assert time.monotonic() - start < seconds, self.tail(
                f"the agent did not answer within {seconds:.0f} s ({self.accelerator})"
            )
            time.sleep(0.25)
        return time.monotonic() - start

    def wait_for_agent_gone(self, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while self.health() is not None:
            assert time.monotonic() < deadline, self.tail("the agent still answers")
            time.sleep(0.1)

    def ssh(
        self, key: Path, command: str, user: str = "user", seconds: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """`command` over SSH with `key` alone; refused logins exit 255."""
        return subprocess.run(
            [
                *("ssh", "-F", "/dev/null", "-i", str(key), "-p", str(self.ssh_port)),
                *("-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "BatchMode=yes"),
                *("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"),
                *("-o", "ConnectTimeout=20", "-o", "LogLevel=ERROR"),
                *(f"{user}@{self.host}", command),
            ],
            capture_output=True,
            text=True,
            timeout=seconds,
            check=False,
        )

    def reset(self) -> None:
        """The reset button: what QMP's `system_reset` does, the same process going on."""
        self.qmp("system_reset")

    def stop(self) -> None:
        """Power off, as KubeVirt stops a VM: ACPI's power button, then QEMU's end if the guest
        does not go within its grace period."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(OSError, AssertionError):
            self.qmp("system_powerdown")
        try:
            process.wait(timeout=SHUTDOWN_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        if process.stderr:
            process.stderr.close()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        if self.process is not None and self.process.stderr:
            self.process.stderr.close()

    def tail(self, message: str, lines: int = 60) -> str:
        text = self.console.read_text(errors="replace") if self.console.exists() else ""
        return f"{message}\n--- serial console, last {lines} lines ---\n" + "\n".join(
            text.splitlines()[-lines:]
        )


def new_key(path: Path, comment: str) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True
    )
    return path


@dataclass
class FirstAnswer:
    """What the platform saw when an agent first answered: boot time and a first SSH login."""

    seconds: float
    """QEMU's start to the agent's first answer."""
    accelerator: str
    ssh: subprocess.CompletedProcess[str]
    ssh_seconds: float
    """The first answer to the end of that login."""


class VMPlatform(Platform):
    """The stand-in platform, with a VM in QEMU for each sandbox in place of a local agent.

    E2B's create has no SSH keys, so each sandbox is rendered with `key` in
    `spec.ssh.authorizedKeys`, as a tenant who sets it on the WorkspaceSandbox would.
    """

    def __init__(
        self, cluster: kube_fake.Cluster, folder: Path, *, guest: Guest, agent: Path, key: Path
    ) -> None:
        super().__init__(cluster, folder)
        self.guest, self.agent, self.key = guest, agent, key
        self.machines: dict[Where, Machine] = {}
        self.answers: list[FirstAnswer] = []

    def machine(self, where: Where) -> Machine:
        if where not in self.machines:
            spec = dict(self.cluster.objects[PLURAL, *where]["spec"])
            spec["ssh"] = {"authorizedKeys": [self.key.with_suffix(".pub").read_text().strip()]}
            vm = rendered_vm(*where, spec, AGENT_PLATFORM)
            folder = self.folder / f"{where[0]}-{where[1]}"
            self.machines[where] = Machine(folder, self.guest, vm, where[0], self.agent)
        return self.machines[where]

    async def start(self, where: Where) -> None:
        machine = self.machine(where)
        await asyncio.to_thread(machine.start, self.hosts_of[where], self.port)
        seconds = await asyncio.to_thread(machine.wait_for_agent)
        # Ready now: SSH must already work, with no wait between.
        answered = time.monotonic()
        ssh = await asyncio.to_thread(machine.ssh, self.key, "true")
        login = time.monotonic() - answered
        self.answers.append(FirstAnswer(seconds, machine.accelerator, ssh, login))

    async def stop(self, where: Where) -> None:
        if where in self.machines:
            await asyncio.to_thread(self.machines[where].stop)

    async def close(self) -> None:
        for machine in self.machines.values():
            machine.kill()
