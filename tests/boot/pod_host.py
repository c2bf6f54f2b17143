"""This host as a node for one pod at a time: images, a network namespace, runc or runsc.

What kubelet and containerd do for a pod, done here by hand and bounded: each pod gets a
network namespace of its own, joined to the host by a veth pair on a private /30 (the pod's
own IP, as on a node), its volumes as host folders (the workspace claim kept across restarts),
its root file system as an overlay on the image's layers (containerd's snapshotter), then its
init containers run to completion and its container starts. The images are folders that
`scripts/test-images` builds; runc is Debian's, runsc the one built from gVisor's Go module.

Needs root, as CI runs the tier. Pods reach the internet through the host (NAT), as a node's
pods do: `egress` sets it up for the session and takes it down again.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from function.model import Manifest
from tests.boot import pod_bundle
from tests.boot.pod_bundle import Host, Pod, UnsupportedError
from tests.support import AGENT_IMAGE, PLATFORM, ROOT

TEST_IMAGES = ROOT / "scripts" / "test-images"
RUNC = "runc"
RUNTIMES = ("runc", "runsc")
SECCOMP = Path("/usr/share/containers/seccomp.json")
"""containers-common's default profile (Debian's golang-github-containers-common)."""
SUBNET = "10.213"
"""Pod n is SUBNET.n.0/30: the host's end .1, the pod's .2 (not a range the host uses)."""
BUSYBOX_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The agent image's only ENV, its busybox base's (which its init container's `cp` is found on)."""
CGROUP_ROOT = "/workspace-sandbox-pods"
MAX_CONTAINER_STARTS = 16
"""Sandboxes one pod's runsc root sees at most in a test: its init containers, restarts."""
HEALTH_SECONDS = 30
STOP_SECONDS = 10


def missing(what: str) -> None:
    """A tool or image the tier needs is not here: a failure in CI, a skip elsewhere."""
    message = f"the pod tier needs {what}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def built(name: str) -> Path:
    """A folder `scripts/test-images` built for the checkout's inputs."""
    found = subprocess.run(
        [TEST_IMAGES, "built", name], capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        missing(f"`scripts/test-images {name}` (as root)")
    return Path(found.stdout.strip())


@dataclass(frozen=True)
class Images:
    """The images the rendered pods name, as folders: the sandbox image and the agent's."""

    sandbox: Path
    runsc: Path

    def layers(self, image: str) -> list[Path]:
        """An image's layers, uppermost first. The catalog's pod image is plain Ubuntu, which
        a platform replaces with its build of the reference image (the Composition says so):
        that build is what runs here. The agent image is its bundle over the same root (the
        real one is busybox beneath it)."""
        oci = PLATFORM.images["ubuntu-24.04"].oci
        if image == oci:
            return [self.sandbox / "root"]
        if image == AGENT_IMAGE:
            return [self.sandbox / "agent", self.sandbox / "root"]
        raise UnsupportedError(f"image {image!r}: not one the pod tier has")

    def env(self, image: str) -> list[str]:
        if image == AGENT_IMAGE:
            return [BUSYBOX_PATH]
        return (self.sandbox / "env").read_text().splitlines()


def images() -> Images:
    if os.geteuid() != 0:
        missing("root (runc, runsc, network namespaces)")
    for tool in ("runc", "ip", "iptables"):
        if shutil.which(tool) is None:
            missing(f"{tool} (apt-get install runc iproute2 iptables)")
    if not SECCOMP.exists():
        missing(f"{SECCOMP} (apt-get install golang-github-containers-common)")
    return Images(sandbox=built("sandbox"), runsc=built("runsc") / "runsc")


def run(*args: str | Path, timeout: float = 30) -> str:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))}: {done.stderr.strip() or done.stdout}")
    return done.stdout


@contextlib.contextmanager
def egress() -> Iterator[None]:
    """The pods' way out, as a node gives its pods: forwarding and NAT to the host's uplink,
    for this session only (a rule of its own, removed at the end, forwarding as it was)."""
    rule = ["POSTROUTING", "-s", f"{SUBNET}.0.0/16", "-j", "MASQUERADE"]
    forward = Path("/proc/sys/net/ipv4/ip_forward")
    was = forward.read_text()
    run("iptables", "-t", "nat", "-A", *rule)
    forward.write_text("1\n")
    try:
        yield
    finally:
        forward.write_text(was)
        run("iptables", "-t", "nat", "-D", *rule)


@dataclass
class Netns:
    """A pod's network namespace, and its address."""

    name: str
    index: int

    @property
    def path(self) -> Path:
        return Path("/run/netns") / self.name

    @property
    def address(self) -> str:
        return f"{SUBNET}.{self.index}.2"

    @property
    def gateway(self) -> str:
        return f"{SUBNET}.{self.index}.1"

    @property
    def outside(self) -> str:
        return f"{self.name}h"

    def configure(self) -> None:
        """The pod's end of the pair: its address, up, and the host as its way out.

        Again before each runsc container: runsc's sandbox network moves the interface's
        addresses and routes into its own network stack, taking them off the namespace's
        interface, and they do not come back when the sandbox exits. On a node, a pod's
        containers all run in the one sandbox of its pause container, so this never arises.
        """
        inside = ("ip", "-n", self.name)
        run(*inside, "addr", "replace", f"{self.address}/30", "dev", "eth0")
        run(*inside, "link", "set", "eth0", "up")
        run(*inside, "link", "set", "lo", "up")
        run(*inside, "route", "replace", "default", "via", self.gateway)

    @classmethod
    @contextlib.contextmanager
    def made(cls) -> Iterator[Netns]:
        """The first free one of 250: `ip netns add` refuses a name that exists."""
        for index in range(1, 251):
            name = f"wsp{index}"
            added = subprocess.run(["ip", "netns", "add", name], check=False, capture_output=True)
            if added.returncode == 0:
                break
        else:
            raise RuntimeError("no free network namespace name (wsp1 to wsp250)")
        netns = cls(name, index)
        try:
            pair = ("type", "veth", "peer", "name", "eth0", "netns", name)
            run("ip", "link", "add", netns.outside, *pair)
            run("ip", "addr", "add", f"{netns.gateway}/30", "dev", netns.outside)
            run("ip", "link", "set", netns.outside, "up")
            netns.configure()
            yield netns
        finally:
            subprocess.run(["ip", "link", "del", netns.outside], check=False, capture_output=True)
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def kubelet_fs_group(folder: Path, gid: int | None) -> None:
    """What kubelet does to a volume for fsGroup: group-owned by it, group-writable, setgid."""
    if gid is None:
        return
    for path in [folder, *folder.rglob("*")]:
        os.lchown(path, -1, gid)
        if not path.is_symlink():
            mode = path.stat().st_mode
            path.chmod(mode | (0o2070 if path.is_dir() else 0o060))


_ids = itertools.count()


@dataclass
class RunningPod:
    """One pod on this host: its folder, namespace, bundles and runtime."""

    runtime: str
    images: Images
    spec: Manifest
    hostname: str
    folder: Path
    netns: Netns
    workspace: Path
    pod: Pod | None = None
    mounted: list[Path] = field(default_factory=list)
    id: str = field(default_factory=lambda: f"wsp-{os.getpid()}-{next(_ids)}")
    logs: Path | None = None
    began: float = 0.0

    @property
    def state(self) -> Path:
        return self.folder / "state"

    def command(self, *args: str) -> list[str]:
        """The runtime's command line; runsc in the pod's namespace with its own network stack
        (`--network=sandbox`, the default: netstack takes over the namespace's veth), the OCI
        seccomp profile applied inside the sandbox (`--oci-seccomp`)."""
        if self.runtime == "runc":
            return [RUNC, "--root", str(self.state), *args]
        return [str(self.images.runsc), "--root", str(self.state), "--oci-seccomp", *args]

    def prepare(self) -> Pod:
        """The volumes, kubelet's files and the bundles, from the rendered spec."""
        volumes = self.folder / "volumes"
        etc = self.folder / "etc"
        etc.mkdir(parents=True)
        (etc / "hostname").write_text(f"{self.hostname}\n")
        (etc / "hosts").write_text(
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            f"{self.netns.address}\t{self.hostname}\n"
        )

        def volume_dir(name: str, kind: str) -> Path:
            if kind.startswith("claim:"):
                return self.workspace
            path = volumes / name
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)  # kubelet's emptyDir
            return path

        host = Host(
            netns=self.netns.path,
            hostname=self.hostname,
            rootfs_of=self.rootfs,
            env_of=self.images.env,
            volume_dir=volume_dir,
            etc={
                "hosts": etc / "hosts",
                "hostname": etc / "hostname",
                "resolv.conf": etc / "resolv.conf",
            },
            seccomp=json.loads(SECCOMP.read_text()),
            arch=_go_arch(),
            cgroup_parent=self.cgroup_parent,
        )
        pod = pod_bundle.translate(self.spec, host)
        (etc / "resolv.conf").write_text(pod.resolv_conf)
        for path in [self.workspace, *(volumes.iterdir() if volumes.exists() else [])]:
            kubelet_fs_group(path, pod.fs_group)
        for container in [*pod.init, pod.main]:
            bundle = self.folder / "bundles" / container.name
            bundle.mkdir(parents=True)
            (bundle / "config.json").write_text(json.dumps(container.config, indent=1))
        return pod

    def rootfs(self, image: str) -> Path:
        """A container's root: an overlay of its image's layers, its writes its own."""
        layers = self.images.layers(image)
        top = self.folder / "rootfs" / str(len(self.mounted))
        for part in ("upper", "work", "merged"):
            (top / part).mkdir(parents=True)
        lower = ":".join(str(layer) for layer in layers)
        run(
            "mount", "-t", "overlay", "overlay", "-o",
            f"lowerdir={lower},upperdir={top / 'upper'},workdir={top / 'work'}",
            top / "merged",
        )  # fmt: skip
        self.mounted.append(top / "merged")
        return top / "merged"

    def start(self) -> None:
        """Init containers to completion, then the container."""
        self.state.mkdir(parents=True, exist_ok=True)
        self.pod = self.pod or self.prepare()
        for container in self.pod.init:
            name = f"{self.id}-{container.name}"
            self.netns.configure()
            done = subprocess.run(
                self.command(
                    "run", "--bundle", str(self.folder / "bundles" / container.name), name
                ),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            subprocess.run(
                self.command("delete", "--force", name), check=False, capture_output=True
            )
            if done.returncode != 0:
                raise RuntimeError(f"init container {container.name}: {done.stderr}{done.stdout}")
        self.run_main()

    def run_main(self) -> None:
        """(Re)start the container, as kubelet does after its process exits."""
        assert self.pod is not None
        self.logs = self.folder / "container.log"
        self.netns.configure()
        self.began = time.monotonic()
        with self.logs.open("ab") as log:
            subprocess.run(
                self.command(
                    "run", "--detach", "--bundle", str(self.folder / "bundles" / self.pod.main.name),
                    self.main_id,
                ),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                timeout=60,
                check=True,
            )  # fmt: skip

    def started_to_healthy(self) -> float:
        """Seconds from the container's `run` to its agent's first /health answer."""
        self.wait_healthy()
        return time.monotonic() - self.began

    def kill_main(self) -> None:
        run(*self.command("kill", self.main_id, "KILL"))

    @property
    def main_id(self) -> str:
        return f"{self.id}-main"

    def status(self) -> str:
        found = subprocess.run(
            self.command("state", self.main_id), check=False, capture_output=True, text=True
        )
        if found.returncode != 0:
            return "gone"
        return str(json.loads(found.stdout)["status"])

    def health_url(self) -> str:
        assert self.pod is not None and self.pod.main.health is not None
        path, port = self.pod.main.health
        return f"http://{self.netns.address}:{port}{path}"

    def wait_healthy(self, seconds: float = HEALTH_SECONDS) -> httpx.Response:
        """The first answer of the agent's /health, polled as often as is cheap, bounded."""
        deadline = time.monotonic() + seconds
        with httpx.Client(timeout=1) as client:
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.TransportError):
                    return client.get(self.health_url())
                if self.status() in ("stopped", "gone"):
                    raise RuntimeError(f"the container stopped: {self.log_tail()}")
                time.sleep(0.01)
        raise RuntimeError(f"no /health within {seconds} s: {self.log_tail()}")

    def log_tail(self) -> str:
        return self.logs.read_text()[-2000:] if self.logs and self.logs.exists() else ""

    def stop_main(self) -> None:
        """SIGTERM, the grace period (bounded), SIGKILL, delete: kubelet's stop."""
        grace = min(self.pod.grace_seconds if self.pod else 0, STOP_SECONDS)
        subprocess.run(self.command("kill", self.main_id, "TERM"), check=False, capture_output=True)
        deadline = time.monotonic() + grace
        while self.status() == "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        subprocess.run(self.command("kill", self.main_id, "KILL"), check=False, capture_output=True)
        subprocess.run(
            self.command("delete", "--force", self.main_id), check=False, capture_output=True
        )

    def close(self) -> None:
        self.stop_main()
        for merged in reversed(self.mounted):
            subprocess.run(["umount", merged], check=False, capture_output=True)
        self.mounted.clear()
        # runsc pins an empty network namespace for its gofers on a file in its root, bind
        # mounts stacked one per sandbox (`specutils.UnmountNullNetNS`); bounded by the pod's
        # container starts.
        null_netns = self.state / "null-netns"
        for _ in range(2 * MAX_CONTAINER_STARTS):
            unmounted = subprocess.run(
                ["umount", "-l", null_netns], check=False, capture_output=True
            )
            if unmounted.returncode != 0:
                break
        remove_cgroups(self.cgroup_parent)

    @property
    def cgroup_parent(self) -> str:
        return f"{CGROUP_ROOT}/{self.id}"


def remove_cgroups(path: str) -> None:
    """The pod's cgroups in every hierarchy: the runtimes remove each container's own, not the
    pod's above them (kubelet removes those)."""
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        top = hierarchy / path.lstrip("/")
        if top.is_dir():
            for folder in sorted((d for d in top.rglob("*") if d.is_dir()), reverse=True):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()


def mounts_under(folder: Path) -> list[str]:
    """What is still mounted in `folder`: nothing, once its pod is closed."""
    points = (line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines())
    return [p for p in points if p.startswith(f"{folder}/")]


def _go_arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]


@contextlib.contextmanager
def running(
    runtime: str, images: Images, hostname: str, spec: Manifest, *, folder: Path, workspace: Path
) -> Iterator[RunningPod]:
    """The pod, started, in a network namespace of its own; everything gone afterwards."""
    with Netns.made() as netns:
        pod = RunningPod(runtime, images, spec, hostname, folder, netns, workspace)
        try:
            pod.start()
            yield pod
        finally:
            pod.close()
