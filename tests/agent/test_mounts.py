"""Watching a network file system: refused unless `allow_network_mounts`, as envd refuses it.

The decision is tested on its own with fake mount tables, and `statfs`'s answer on file systems
every Linux has. As root, a real FUSE mount (this module serves it from a thread: one empty
directory, over `/dev/fuse`) is watched through the SDK, refused and then allowed.
"""

import ctypes
import errno
import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2b import Sandbox
from e2b.exceptions import InvalidArgumentException
from workspace_agent import mounts

from tests.agent.needs import unavailable
from tests.agent.sdk.agents import Running

pytestmark = pytest.mark.e2e  # starts agents or gateways

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
31 27 0:45 / /mnt/share rw,relatime shared:5 - nfs4 server:/export rw,vers=4.2
32 27 0:46 / /mnt/ssh rw,nosuid,nodev,relatime - fuse.sshfs me@host:/ rw,user_id=0
33 27 0:47 / /run/kata-containers/shared rw,relatime - virtiofs kataShared rw
34 27 0:48 / /mnt/with\\040space rw - cifs //server/share rw
"""
PROC_SUPER_MAGIC, SYSFS_MAGIC = 0x9FA0, 0x62656572


@pytest.mark.parametrize(
    ("device", "named"),
    [
        pytest.param(os.makedev(0, 45), "nfs4", id="nfs"),
        pytest.param(os.makedev(0, 46), "fuse.sshfs", id="fuse-with-its-subtype"),
        pytest.param(os.makedev(0, 47), "virtiofs", id="virtiofs"),
        pytest.param(os.makedev(0, 48), "cifs", id="an-escaped-mount-point"),
        pytest.param(os.makedev(254, 0), "ext4", id="the-root-disk"),
        pytest.param(os.makedev(0, 99), None, id="a-device-the-table-lacks"),
    ],
)
def test_the_mount_table_names_a_device_s_file_system(device: int, named: str | None) -> None:
    assert mounts.mount_type(device, MOUNTINFO) == named


@pytest.mark.parametrize(
    ("f_type", "named", "kind"),
    [
        pytest.param(0x6969, "nfs4", "nfs4", id="nfs-by-its-mount-name"),
        pytest.param(0x6969, None, "nfs", id="nfs-without-a-mount-table"),
        pytest.param(0xFF534D42, "cifs", "cifs", id="cifs"),
        pytest.param(0xFE534D42, "smb3", "smb3", id="smb2-and-later"),
        pytest.param(0x517B, None, "smb", id="smb"),
        pytest.param(0x65735546, "fuse.sshfs", "fuse.sshfs", id="fuse"),
        pytest.param(0x65735546, "virtiofs", None, id="virtiofs-is-a-vm-s-own-disk"),
        pytest.param(0xEF53, "ext4", None, id="ext4"),
        pytest.param(0x01021994, "tmpfs", None, id="tmpfs"),
        pytest.param(0x01021997, "9p", None, id="gvisor-s-gofer"),
        pytest.param(0x794C7630, "overlay", None, id="overlay"),
    ],
)
def test_which_file_systems_are_network_ones(
    f_type: int, named: str | None, kind: str | None
) -> None:
    assert mounts.network_kind(f_type, named) == kind


def test_statfs_gives_each_file_system_s_magic() -> None:
    assert mounts.filesystem_type("/proc") == PROC_SUPER_MAGIC
    assert mounts.filesystem_type("/sys") == SYSFS_MAGIC
    assert mounts.network_filesystem("/proc", os.stat("/proc").st_dev) is None
    with pytest.raises(FileNotFoundError):
        mounts.filesystem_type("/nonexistent/path")


# A real FUSE mount, served here: the kernel's requests from <linux/fuse.h>, answered as a
# directory that is empty and never changes.

FUSE_GETATTR, FUSE_STATFS, FUSE_INIT = 3, 17, 26
FUSE_FORGET, FUSE_INTERRUPT, FUSE_BATCH_FORGET = 2, 36, 42
ROOT_ATTR = struct.pack(
    "<QII" + "QQQQQQ" + "IIIIIIIIII",
    0,
    0,
    0,
    1,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0o40755,
    2,
    0,
    0,
    0,
    4096,
    0,
)
ANSWERS = {
    # 7.31, no flags, 4 KiB writes; the kernel takes a shorter answer from an older daemon.
    FUSE_INIT: struct.pack("<IIIIHHIIHHII", 7, 31, 0, 0, 0, 0, 4096, 0, 0, 0, 0, 0) + bytes(24),
    FUSE_GETATTR: ROOT_ATTR,
    FUSE_STATFS: struct.pack("<QQQQQIIII", 0, 0, 0, 0, 0, 4096, 255, 4096, 0) + bytes(24),
}
UNANSWERED = {FUSE_FORGET, FUSE_INTERRUPT, FUSE_BATCH_FORGET}


def _serve(fd: int) -> None:
    while True:
        try:
            request = os.read(fd, 1 << 17)
        except OSError as e:
            if e.errno in {errno.ENOENT, errno.EINTR}:  # a request taken back
                continue
            return  # ENODEV: unmounted
        _, opcode, unique = struct.unpack_from("<IIQ", request)
        if opcode in UNANSWERED:
            continue
        body = ANSWERS.get(opcode, b"")
        error = 0 if opcode in ANSWERS else -errno.ENOSYS
        os.write(fd, struct.pack("<IiQ", 16 + len(body), error, unique) + body)


@pytest.fixture
def fuse_mount(agent: Running) -> Iterator[Path]:
    """`share` in the workspace, a FUSE file system of type `fuse.wstest` (needs root)."""
    mountpoint = agent.root / "share"
    mountpoint.mkdir()
    try:
        fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        unavailable(f"no FUSE here: {e}")
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
    flags = 2 | 4  # MS_NOSUID | MS_NODEV
    if libc.mount(b"wstest", bytes(mountpoint), b"fuse.wstest", flags, options) != 0:
        os.close(fd)
        unavailable(f"cannot mount FUSE: {os.strerror(ctypes.get_errno())}")
    server = threading.Thread(target=_serve, args=(fd,), daemon=True)
    server.start()
    try:
        yield mountpoint
    finally:
        libc.umount2(bytes(mountpoint), 2)  # MNT_DETACH: the kernel ends the connection
        server.join(10)
        os.close(fd)


def test_a_network_mount_is_watched_only_when_allowed(
    sandbox: Sandbox, agent: Running, fuse_mount: Path
) -> None:
    with pytest.raises(InvalidArgumentException) as refused:
        sandbox.files.watch_dir("share")
    assert str(fuse_mount) in str(refused.value)
    assert (
        f"cannot watch path on network filesystem: {fuse_mount} (fuse.wstest); "
        "allow_network_mounts=True watches it, but changes made elsewhere are not seen"
    ) in str(refused.value)
    handle = sandbox.files.watch_dir("share", allow_network_mounts=True)
    assert handle.get_new_events() == []
    handle.stop()
    watched = sandbox.files.watch_dir(".")  # the workspace's own disk is no network one
    watched.stop()
    del agent
