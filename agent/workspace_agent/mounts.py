"""Network file systems, which a watch refuses unless `allow_network_mounts` says otherwise.

inotify reports what this kernel does to a file; on a file system shared over the network, what
the server or another client changes is never seen, so envd (0.6.4) refuses to watch a
directory there by default, and tells one apart as it does: by the type `statfs(2)` gives,
NFS, CIFS, SMB or FUSE (the magic numbers of the kernel's `include/uapi/linux/magic.h`).

One FUSE file system is not shared with anyone: virtiofs, which is how Kata hands a pod's volumes
to its VM, so that a Kata sandbox's workspace may be on it. `statfs` calls it FUSE too; the
mount table (`/proc/self/mountinfo`, matched by device number) gives its name.
"""

import ctypes
import functools
import os
from collections.abc import Callable
from pathlib import Path

NETWORK = {
    0x6969: "nfs",
    0xFF534D42: "cifs",
    0x517B: "smb",
    0xFE534D42: "smb2",
    0x65735546: "fuse",
}
"""statfs's f_type of each file system envd treats as a network one."""
LOCAL_FUSE = frozenset({"virtiofs"})
MOUNTINFO = Path("/proc/self/mountinfo")


class _Statfs(ctypes.Structure):
    """glibc's `struct statfs` on Linux: `long` words, unsigned counts, then the rest."""

    _fields_ = (
        ("f_type", ctypes.c_long),
        ("f_bsize", ctypes.c_long),
        ("f_blocks", ctypes.c_ulong),
        ("f_bfree", ctypes.c_ulong),
        ("f_bavail", ctypes.c_ulong),
        ("f_files", ctypes.c_ulong),
        ("f_ffree", ctypes.c_ulong),
        ("f_fsid", ctypes.c_int * 2),
        ("f_namelen", ctypes.c_long),
        ("f_frsize", ctypes.c_long),
        ("f_flags", ctypes.c_long),
        ("f_spare", ctypes.c_long * 4),
    )


@functools.cache
def _statfs() -> Callable[..., int]:
    statfs = ctypes.CDLL(None, use_errno=True).statfs
    statfs.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Statfs)]
    statfs.restype = ctypes.c_int
    return statfs


def filesystem_type(path: str) -> int:
    """statfs(2)'s f_type for `path` (links followed, as `stat` follows them)."""
    found = _Statfs()
    if _statfs()(os.fsencode(path), ctypes.byref(found)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(found.f_type) & 0xFFFFFFFF  # a 32-bit magic, sign-extended where `long` is wider


def mount_type(device: int, mountinfo: str) -> str | None:
    """The type the mount table names for the file system of `device`, if it names one."""
    wanted = f"{os.major(device)}:{os.minor(device)}"
    for line in mountinfo.splitlines():
        fields, _, tail = line.partition(" - ")  # ID, parent, major:minor, ... - type, source
        if fields.split()[2:3] == [wanted] and tail.split():
            return tail.split()[0]
    return None


def network_kind(f_type: int, named: str | None) -> str | None:
    """What network file system a path of type `f_type`, mounted as `named`, is on; None if local.

    `named` is the mount table's type (`nfs4`, `fuse.sshfs`, `virtiofs`), or None if unknown.
    """
    kind = NETWORK.get(f_type)
    if kind is None or named in LOCAL_FUSE:
        return None
    return named or kind


def network_filesystem(path: str, device: int) -> str | None:
    """The network file system `path` (whose `st_dev` is `device`) is on, or None if local."""
    f_type = filesystem_type(path)
    if f_type not in NETWORK:
        return None
    try:
        named = mount_type(device, MOUNTINFO.read_text(errors="replace"))
    except OSError:
        named = None
    return network_kind(f_type, named)
