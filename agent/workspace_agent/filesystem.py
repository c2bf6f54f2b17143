"""The Filesystem service: stat, list, mkdir, move, remove, each as the caller's user.

The operations are plain blocking functions run on a thread acting as the user (`identity`), so
the kernel decides what the user may see or change, links included. `EntryInfo` is what envd
sends: `mode` holds the permission bits alone (the SDK's own tests expect 0o644 for a new file)
while `permissions` spells the whole mode as Go's `FileMode.String()` does. A link is described
by itself (name, size, owner, time) with the type and permission bits of what it points at and
`is_symlink` set; a link whose target can't be reached (missing, a loop, or not visible to the
user) has type `FILE_TYPE_SYMLINK` rather than envd's unspecified type, which the SDK would drop
from listings and so hide a name that exists.
"""

import errno
import grp
import os
import pwd
import shutil
import stat
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from connectrpc.code import Code
from connectrpc.request import RequestContext
from protobuf.wkt.google.protobuf.timestamp_pb import Timestamp

from workspace_agent import paths
from workspace_agent._proto.filesystem.filesystem_connect import Filesystem
from workspace_agent._proto.filesystem.filesystem_pb import (
    CreateWatcherRequest,
    CreateWatcherResponse,
    EntryInfo,
    FileType,
    GetWatcherEventsRequest,
    GetWatcherEventsResponse,
    ListDirRequest,
    ListDirResponse,
    MakeDirRequest,
    MakeDirResponse,
    MoveRequest,
    MoveResponse,
    RemoveRequest,
    RemoveResponse,
    RemoveWatcherRequest,
    RemoveWatcherResponse,
    StatRequest,
    StatResponse,
    WatchDirRequest,
    WatchDirResponse,
)
from workspace_agent.errors import AgentError
from workspace_agent.identity import Identity
from workspace_agent.state import Agent
from workspace_agent.users import User, basic_user

T = TypeVar("T")

# Go's os.FileMode type bits, highest first, with the letter FileMode.String() gives each.
_GO_TYPE_LETTERS = "dalTLDpSugct?"
_DIR, _SYMLINK, _DEVICE, _PIPE, _SOCKET = 1 << 31, 1 << 27, 1 << 26, 1 << 25, 1 << 24
_SETUID, _SETGID, _CHARDEV, _STICKY = 1 << 23, 1 << 22, 1 << 21, 1 << 20
DIR_MODE = 0o755  # what envd creates directories with, before the umask


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


class _Names:
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


def entry(path: str, names: _Names | None = None) -> EntryInfo:
    """Describe `path` itself (a link is not followed for its own name, owner and time)."""
    names = names or _Names()
    try:
        st = os.lstat(path)
    except OSError as e:
        raise paths.failure(e, path) from None
    info = EntryInfo(
        name=os.path.basename(path) or "/",
        type=_file_type(st.st_mode),
        path=path,
        size=st.st_size,
        mode=stat.S_IMODE(st.st_mode) & 0o777,
        permissions=permissions(st.st_mode),
        owner=names.user(st.st_uid),
        group=names.group(st.st_gid),
        modified_time=Timestamp(
            seconds=st.st_mtime_ns // 1_000_000_000, nanos=st.st_mtime_ns % 1_000_000_000
        ),
    )
    if stat.S_ISLNK(st.st_mode):
        info.is_symlink = True
        try:
            target = os.stat(path)
            info.symlink_target = os.path.realpath(path, strict=True)
        except OSError:
            info.symlink_target = os.readlink(path)
            info.mode = 0
        else:
            info.type = _file_type(target.st_mode)
            info.mode = target.st_mode & 0o777
    return info


def list_dir(path: str, depth: int) -> list[EntryInfo]:
    """Entries below `path`, `depth` levels down, links listed but never followed."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise paths.failure(e, path) from None
    if not stat.S_ISDIR(st.st_mode):
        raise AgentError(Code.INVALID_ARGUMENT, f"{path}: path is not a directory")
    names = _Names()
    out: list[EntryInfo] = []
    # Depth first in name order, as Go's WalkDir; a stack, as a hostile tree may be very deep.
    pending = [(child, 1) for child in reversed(_children(path, top=True))]
    while pending:
        child_path, level = pending.pop()
        try:
            info = entry(child_path, names)
        except AgentError:
            continue  # gone since it was listed
        out.append(info)
        if level < depth and info.type == FileType.DIRECTORY and not info.is_symlink:
            below = _children(child_path, top=False)
            pending += [(grandchild, level + 1) for grandchild in reversed(below)]
    return out


def _children(directory: str, *, top: bool) -> list[str]:
    """The paths in `directory`, by name; a subdirectory the user can't read has none."""
    try:
        with os.scandir(directory) as it:
            names = sorted(e.name for e in it)
    except OSError as e:
        if top:
            raise paths.failure(e, directory) from None
        return []
    return [_join(directory, name) for name in names]


def _join(directory: str, name: str) -> str:
    return directory.rstrip("/") + "/" + name


def make_dir(path: str) -> EntryInfo:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise paths.failure(e, path) from None
    else:
        if stat.S_ISDIR(st.st_mode):
            raise AgentError(Code.ALREADY_EXISTS, f"{path}: directory already exists")
        raise AgentError(Code.INVALID_ARGUMENT, f"{path}: path exists but is not a directory")
    try:
        os.makedirs(path, mode=DIR_MODE)
    except FileExistsError:
        if os.path.islink(path):
            raise AgentError(
                Code.INVALID_ARGUMENT, f"{path}: a symbolic link whose target can't be created"
            ) from None
        raise AgentError(Code.ALREADY_EXISTS, f"{path}: directory already exists") from None
    except OSError as e:
        raise paths.failure(e, path) from None
    return entry(path)


def ensure_parent(path: str) -> None:
    """Create the directories above `path`, as the user, like envd does before writing."""
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, mode=DIR_MODE, exist_ok=True)
    except FileExistsError:
        raise AgentError(
            Code.INVALID_ARGUMENT, f"{parent}: a component of the path is not a directory"
        ) from None
    except OSError as e:
        raise paths.failure(e, parent) from None


def move(source: str, destination: str) -> EntryInfo:
    try:
        os.lstat(source)
    except OSError as e:
        raise paths.failure(e, source) from None
    ensure_parent(destination)
    try:
        os.rename(source, destination)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise paths.failure(e, destination) from None
        try:  # another filesystem: copy (links as links), then remove the source
            shutil.move(source, destination)
        except OSError as e2:
            raise paths.failure(e2, destination) from None
    return entry(destination)


def remove(path: str) -> None:
    """Like Go's os.RemoveAll: a link is removed, not followed; a missing path is no error."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as e:
        raise paths.failure(e, path) from None
    try:
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)  # works through directory descriptors, never follows links
        else:
            os.unlink(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise paths.failure(e, e.filename or path) from None


class FilesystemService(Filesystem):
    def __init__(self, agent: Agent, identity: Identity) -> None:
        self.agent = agent
        self.identity = identity

    def _user(self, ctx: RequestContext[Any, Any]) -> User:
        return self.agent.users.resolve(basic_user(ctx.request_headers.get("authorization")))

    def _path(self, path: str, user: User) -> str:
        return paths.resolve(path, self.agent.workdir, user.home)

    async def _as(self, ctx: RequestContext[Any, Any], work: Callable[[User], T]) -> T:
        user = self._user(ctx)
        return await self.identity.run(user, lambda: work(user))

    async def stat(
        self, request: StatRequest, ctx: RequestContext[StatRequest, StatResponse]
    ) -> StatResponse:
        found = await self._as(ctx, lambda u: entry(self._path(request.path, u)))
        return StatResponse(entry=found)

    async def list_dir(
        self, request: ListDirRequest, ctx: RequestContext[ListDirRequest, ListDirResponse]
    ) -> ListDirResponse:
        depth = request.depth or 1
        found = await self._as(ctx, lambda u: list_dir(self._path(request.path, u), depth))
        return ListDirResponse(entries=found)

    async def make_dir(
        self, request: MakeDirRequest, ctx: RequestContext[MakeDirRequest, MakeDirResponse]
    ) -> MakeDirResponse:
        made = await self._as(ctx, lambda u: make_dir(self._path(request.path, u)))
        return MakeDirResponse(entry=made)

    async def move(
        self, request: MoveRequest, ctx: RequestContext[MoveRequest, MoveResponse]
    ) -> MoveResponse:
        moved = await self._as(
            ctx,
            lambda u: move(self._path(request.source, u), self._path(request.destination, u)),
        )
        return MoveResponse(entry=moved)

    async def remove(
        self, request: RemoveRequest, ctx: RequestContext[RemoveRequest, RemoveResponse]
    ) -> RemoveResponse:
        await self._as(ctx, lambda u: remove(self._path(request.path, u)))
        return RemoveResponse()

    async def watch_dir(
        self, _request: WatchDirRequest, _ctx: RequestContext[WatchDirRequest, WatchDirResponse]
    ) -> AsyncIterator[WatchDirResponse]:
        raise _no_watching()
        yield WatchDirResponse()  # makes this a stream; never reached

    async def create_watcher(
        self,
        _request: CreateWatcherRequest,
        _ctx: RequestContext[CreateWatcherRequest, CreateWatcherResponse],
    ) -> CreateWatcherResponse:
        raise _no_watching()

    async def get_watcher_events(
        self,
        _request: GetWatcherEventsRequest,
        _ctx: RequestContext[GetWatcherEventsRequest, GetWatcherEventsResponse],
    ) -> GetWatcherEventsResponse:
        raise _no_watching()

    async def remove_watcher(
        self,
        _request: RemoveWatcherRequest,
        _ctx: RequestContext[RemoveWatcherRequest, RemoveWatcherResponse],
    ) -> RemoveWatcherResponse:
        raise _no_watching()


def _no_watching() -> AgentError:
    return AgentError(
        Code.UNIMPLEMENTED, "watching directories is not supported by this sandbox's agent"
    )
