"""`EntryInfo`: a file described as envd describes it.

`mode` holds the permission bits alone (the SDK's own tests expect 0o644 for a new file) while
`permissions` spells the whole mode as Go's `FileMode.String()` does. A link is described by
itself (name, size, owner, time) with the type and permission bits of what it points at and
`is_symlink` set; a link whose target can't be reached (missing, a loop, or not visible to the
user) has type `FILE_TYPE_SYMLINK` rather than envd's unspecified type, which the SDK would drop
from listings and so hide a name that exists. `metadata` is the entry's own (`metadata.read`),
never its target's. Run on a thread acting as the caller's user, so what a link's target looks
like is what that user may see.
"""

import grp
import os
import pwd
import stat

from protobuf.wkt.google.protobuf.timestamp_pb import Timestamp

from workspace_agent import metadata, paths
from workspace_agent._proto.filesystem.filesystem_pb import EntryInfo, FileType

# Go's os.FileMode type bits, highest first, with the letter FileMode.String() gives each.
_GO_TYPE_LETTERS = "dalTLDpSugct?"
_DIR, _SYMLINK, _DEVICE, _PIPE, _SOCKET = 1 << 31, 1 << 27, 1 << 26, 1 << 25, 1 << 24
_SETUID, _SETGID, _CHARDEV, _STICKY = 1 << 23, 1 << 22, 1 << 21, 1 << 20


def go_mode(st_mode: int) -> int:
    """A stat mode as Go's os.FileMode bits."""
    kind = stat.S_IFMT(st_mode)
    mode = {
        stat.S_IFDIR: _DIR,
        stat.S_IFLNK: _SYMLINK,
        stat.S_IFBLK: _DEVICE,
        stat.S_IFCHR: _DEVICE | _CHARDEV,
        stat.S_IFIFO: _PIPE,
        stat.S_IFSOCK: _SOCKET,
    }.get(kind, 0)
    for bit, go in ((stat.S_ISUID, _SETUID), (stat.S_ISGID, _SETGID), (stat.S_ISVTX, _STICKY)):
        if st_mode & bit:
            mode |= go
    return mode | (st_mode & 0o777)


def permissions(st_mode: int) -> str:
    """Go's FileMode.String(): type letters (or "-"), then rwx for owner, group and others."""
    mode = go_mode(st_mode)
    kinds = "".join(c for i, c in enumerate(_GO_TYPE_LETTERS) if mode & (1 << (31 - i)))
    rwx = "".join(c if mode & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))
    return (kinds or "-") + rwx


def _file_type(st_mode: int) -> FileType:
    if stat.S_ISDIR(st_mode):
        return FileType.DIRECTORY
    if stat.S_ISLNK(st_mode):
        return FileType.SYMLINK
    return FileType.FILE if stat.S_ISREG(st_mode) else FileType.UNSPECIFIED


class Names:
    """Owner and group names for one call, each looked up once; numbers when unknown."""

    def __init__(self) -> None:
        self._users: dict[int, str] = {}
        self._groups: dict[int, str] = {}

    def user(self, uid: int) -> str:
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self._users[uid] = str(uid)
        return self._users[uid]

    def group(self, gid: int) -> str:
        if gid not in self._groups:
            try:
                self._groups[gid] = grp.getgrgid(gid).gr_name
            except KeyError:
                self._groups[gid] = str(gid)
        return self._groups[gid]


def entry(path: str, names: Names | None = None) -> EntryInfo:
    """Describe `path` itself (a link is not followed for its own name, owner and time)."""
    names = names or Names()
    try:
        st = os.lstat(path)
    except OSError as e:
        raise paths.failure(e, path) from None
    info = EntryInfo(
        name=paths.text(os.path.basename(path) or "/"),
        type=_file_type(st.st_mode),
        path=paths.text(path),
        size=st.st_size,
        mode=stat.S_IMODE(st.st_mode) & 0o777,
        permissions=permissions(st.st_mode),
        owner=names.user(st.st_uid),
        group=names.group(st.st_gid),
        modified_time=Timestamp(
            seconds=st.st_mtime_ns // 1_000_000_000, nanos=st.st_mtime_ns % 1_000_000_000
        ),
        metadata=metadata.read(path),
    )
    if stat.S_ISLNK(st.st_mode):
        info.is_symlink = True
        try:
            target = os.stat(path)
            info.symlink_target = paths.text(os.path.realpath(path, strict=True))
        except OSError:
            info.symlink_target = paths.text(os.readlink(path))
            info.mode = 0
        else:
            info.type = _file_type(target.st_mode)
            info.mode = target.st_mode & 0o777
    return info
