"""The Filesystem service: stat, list, mkdir, move, remove and watch, as the caller's user.

The operations are plain blocking functions run on a thread acting as the user (`identity`), so
the kernel decides what the user may see or change, links included; `entries` describes what
they find, `watchers` watches directories.
"""

import errno
import os
import shutil
import stat
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from connectrpc.code import Code
from connectrpc.request import RequestContext

from workspace_agent import paths, watchers
from workspace_agent._proto.filesystem.filesystem_connect import Filesystem
from workspace_agent._proto.filesystem.filesystem_pb import (
    CreateWatcherRequest,
    CreateWatcherResponse,
    EntryInfo,
    FilesystemEvent,
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
from workspace_agent.entries import Names, entry
from workspace_agent.errors import AgentError
from workspace_agent.http import number
from workspace_agent.identity import Identity
from workspace_agent.state import Agent
from workspace_agent.users import User, basic_user
from workspace_agent.watchers import Polled, Watch

T = TypeVar("T")

DIR_MODE = 0o755  # what envd creates directories with, before the umask
MAX_QUIET = 3
"""The longest a watch stream goes without sending anything."""


def list_dir(path: str, depth: int) -> list[EntryInfo]:
    """Entries below `path`, `depth` levels down, links listed but never followed."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise paths.failure(e, path) from None
    if not stat.S_ISDIR(st.st_mode):
        raise AgentError(Code.INVALID_ARGUMENT, f"{path}: path is not a directory")
    names = Names()
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
        self.polled = Polled()

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
        self, request: WatchDirRequest, ctx: RequestContext[WatchDirRequest, WatchDirResponse]
    ) -> AsyncIterator[WatchDirResponse]:
        watch = self._watch(ctx, request)
        await watch.start()
        try:
            interval = _keepalive_seconds(ctx.request_headers.get("keepalive-ping-interval"))
            yield watchers.started()
            while True:
                if not await watch.wait(interval):
                    yield watchers.keepalive()
                    continue
                batch: list[FilesystemEvent] = []
                await watch.read_into(batch)
                for event in batch:
                    yield watchers.changed(event)
        finally:
            watch.close()

    async def create_watcher(
        self,
        request: CreateWatcherRequest,
        ctx: RequestContext[CreateWatcherRequest, CreateWatcherResponse],
    ) -> CreateWatcherResponse:
        watch = self._watch(ctx, request)
        return CreateWatcherResponse(watcher_id=await self.polled.create(watch))

    async def get_watcher_events(
        self,
        request: GetWatcherEventsRequest,
        _ctx: RequestContext[GetWatcherEventsRequest, GetWatcherEventsResponse],
    ) -> GetWatcherEventsResponse:
        return GetWatcherEventsResponse(events=await self.polled.take(request.watcher_id))

    async def remove_watcher(
        self,
        request: RemoveWatcherRequest,
        _ctx: RequestContext[RemoveWatcherRequest, RemoveWatcherResponse],
    ) -> RemoveWatcherResponse:
        await self.polled.remove(request.watcher_id)
        return RemoveWatcherResponse()

    def _watch(
        self, ctx: RequestContext[Any, Any], request: WatchDirRequest | CreateWatcherRequest
    ) -> Watch:
        user = self._user(ctx)
        return Watch(
            self.identity,
            user,
            self._path(request.path, user),
            recursive=request.recursive,
            include_entry=request.include_entry,
            allow_network_mounts=request.allow_network_mounts,
        )


def _keepalive_seconds(header: str | None) -> float:
    """`Keepalive-Ping-Interval` (whole seconds), but never more than `MAX_QUIET` seconds.

    The Connect library notices a client that went away only when the next message is sent,
    and until then the watch is held; frequent keepalives release it within seconds, and a
    client ignores keepalives however often they come.
    """
    seconds = number(header, digits=9)
    return float(min(max(MAX_QUIET if seconds is None else seconds, 1), MAX_QUIET))
