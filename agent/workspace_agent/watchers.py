"""Watching a directory (and, if asked, everything below it) with inotify, as the caller's user.

The kernel checks a watch when it is added, against the adding thread's credentials, so watches
are added on a thread acting as the user (`identity`): a user can't watch a directory it can't
read. Events then arrive on the agent's own thread. Below the top directory, links are never
followed and a directory the user can't read is skipped; a directory created later is watched
as soon as its creation is seen (anything made inside it before that is missed, as with envd).

Events are named relative to the watched directory and typed as envd types fsnotify's: one
inotify event may carry several kinds (created, renamed, changed mode, written, removed), each
sent as an event of its own. `/files` writes to a temporary name and renames it into place; a
watcher sees neither, but the created, mode-changed and written events envd's writing in place
gives, so that code waiting for a file to be written works unchanged.

With `include_entry`, an event that created, wrote or changed the mode of an entry carries
its `EntryInfo` (metadata included), looked up as the user when the event is read; one that
removed or renamed it away carries none, as with envd: the entry is gone from that path, and
what is there now may be another one. Neither does an event whose entry has gone since.

A directory on a network file system (`mounts`) is refused unless `allow_network_mounts` is
set, as envd refuses it: inotify sees only this kernel's changes, not the server's or another
client's. Only the watched directory is checked, as envd checks it.

The streaming form sends keepalives; the polled form (the sync SDK's) keeps at most
`MAX_UNREAD` events and fails when more go unread.
"""

import asyncio
import contextlib
import os
import posixpath
import secrets
import stat
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from connectrpc.code import Code
from inotify_simple import INotify, flags
from protobuf import Oneof

from workspace_agent import mounts, paths
from workspace_agent._proto.filesystem.filesystem_pb import (
    EntryInfo,
    EventType,
    FilesystemEvent,
    WatchDirResponse,
)
from workspace_agent.entries import entry
from workspace_agent.errors import AgentError
from workspace_agent.identity import Identity
from workspace_agent.users import User

MASK = (
    flags.CREATE
    | flags.MOVED_TO
    | flags.MOVED_FROM
    | flags.MOVE_SELF
    | flags.ATTRIB
    | flags.MODIFY
    | flags.DELETE
    | flags.DELETE_SELF
)
# In envd's order: created, renamed, changed mode, written, removed.
KINDS = (
    (flags.CREATE | flags.MOVED_TO, EventType.CREATE),
    (flags.MOVED_FROM | flags.MOVE_SELF, EventType.RENAME),
    (flags.ATTRIB, EventType.CHMOD),
    (flags.MODIFY, EventType.WRITE),
    (flags.DELETE | flags.DELETE_SELF, EventType.REMOVE),
)
UPLOADED = [EventType.CREATE, EventType.CHMOD, EventType.WRITE]
"""An upload renamed into place, as envd's writing in place (create, chown, write) looks."""
WITH_ENTRY = frozenset({EventType.CREATE, EventType.WRITE, EventType.CHMOD})
"""The kinds of event whose entry is still at its path, and so is sent with `include_entry`."""
MAX_UNREAD = 10_000
MAX_POLLED = 64  # each holds an inotify instance; root has 128 by default


class Watch:
    """One inotify instance over one directory tree, for one user."""

    def __init__(
        self,
        identity: Identity,
        user: User,
        root: str,
        *,
        recursive: bool,
        include_entry: bool,
        allow_network_mounts: bool,
    ) -> None:
        self.identity = identity
        self.user = user
        self.root = root
        self.recursive = recursive
        self.include_entry = include_entry
        self.allow_network_mounts = allow_network_mounts
        self._inotify = INotify(nonblocking=True)
        self._dirs: dict[int, str] = {}
        self._ready = asyncio.Event()
        self._reading = False
        self._uploads: set[int] = set()
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        try:
            await self.identity.run(self.user, self._watch_root)
        except BaseException:
            self.close()
            raise

    def _watch_root(self) -> None:
        try:
            st = os.stat(self.root)
        except OSError as e:
            raise paths.failure(e, self.root) from None
        if not stat.S_ISDIR(st.st_mode):
            raise AgentError(Code.INVALID_ARGUMENT, f"{self.root}: path is not a directory")
        if not self.allow_network_mounts:
            self._refuse_network_mount(st.st_dev)
        try:
            self._dirs[self._inotify.add_watch(self.root, MASK | flags.ONLYDIR)] = self.root
        except OSError as e:
            raise paths.failure(e, self.root) from None
        if self.recursive:
            self._watch_below(self.root)

    def _refuse_network_mount(self, device: int) -> None:
        try:
            kind = mounts.network_filesystem(self.root, device)
        except OSError as e:
            raise paths.failure(e, self.root) from None
        if kind is not None:
            raise AgentError(
                Code.INVALID_ARGUMENT,
                f"cannot watch path on network filesystem: {self.root} ({kind}); "
                "allow_network_mounts=True watches it, but changes made elsewhere are not seen",
            )

    def _watch_below(self, top: str) -> None:
        """Watch every directory under `top` the user can read; never through a link."""
        pending = [top]
        while pending:
            directory = pending.pop()
            try:
                with os.scandir(directory) as it:
                    subdirs = [e.path for e in it if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for sub in subdirs:
                try:
                    wd = self._inotify.add_watch(sub, MASK | flags.ONLYDIR | flags.DONT_FOLLOW)
                except OSError:
                    continue
                self._dirs[wd] = sub
                pending.append(sub)

    async def wait(self, seconds: float | None) -> bool:
        """Until there are events to read; False when `seconds` passed first."""
        if not self._reading:
            asyncio.get_running_loop().add_reader(self._inotify.fileno(), self._ready.set)
            self._reading = True
        try:
            await asyncio.wait_for(self._ready.wait(), seconds)
        except TimeoutError:
            return False
        self._ready.clear()
        return True

    async def read_into(self, sink: list[FilesystemEvent]) -> None:
        """Append what happened so far, in order, however many callers read at once."""
        async with self._lock:
            sink += await self._convert(self._inotify.read(timeout=0))

    async def _convert(self, raw: list[Any]) -> list[FilesystemEvent]:
        out: list[FilesystemEvent] = []
        for wd, mask, cookie, name in raw:
            if mask & flags.Q_OVERFLOW:
                raise AgentError(Code.RESOURCE_EXHAUSTED, "too many changes: events were lost")
            found = self._kinds(wd, mask, cookie, name)
            if found is None:
                continue
            path, kinds = found
            if self.recursive and mask & flags.ISDIR and mask & (flags.CREATE | flags.MOVED_TO):
                await self.identity.run(self.user, partial(self._watch_new, path))
            wanted = self.include_entry and not WITH_ENTRY.isdisjoint(kinds)
            info = await self._entry(path) if wanted else None
            relative = paths.text(posixpath.relpath(path, self.root))  # lexical: no I/O
            for kind in kinds:
                event = FilesystemEvent(name=relative, type=kind)
                if info is not None and kind in WITH_ENTRY:
                    event.entry = info
                out.append(event)
        return out

    def _kinds(
        self, wd: int, mask: int, cookie: int, name: str
    ) -> tuple[str, list[EventType]] | None:
        """The path one inotify event is about, and the kinds of event to send for it."""
        if mask & flags.IGNORED:  # the watch is gone with its directory
            self._dirs.pop(wd, None)
            return None
        directory = self._dirs.get(wd)
        if directory is None:
            return None
        if name and paths.is_upload_name(name):  # an upload's temporary file
            if mask & flags.MOVED_FROM:
                self._uploads = {*list(self._uploads)[-99:], cookie}
            return None
        if mask & flags.MOVED_TO and cookie in self._uploads:
            self._uploads.discard(cookie)
            return os.path.join(directory, name), UPLOADED
        path = os.path.join(directory, name) if name else directory
        return path, [kind for bits, kind in KINDS if mask & bits]

    def _watch_new(self, path: str) -> None:
        try:
            wd = self._inotify.add_watch(path, MASK | flags.ONLYDIR | flags.DONT_FOLLOW)
        except OSError:
            return
        self._dirs[wd] = path
        self._watch_below(path)

    async def _entry(self, path: str) -> EntryInfo | None:
        try:
            return await self.identity.run(self.user, lambda: entry(path))
        except AgentError:
            return None  # gone already, or not the user's to see

    def close(self) -> None:
        if self._reading:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._inotify.fileno())
            self._reading = False
        self._inotify.close()


@dataclass
class _Polled:
    watch: Watch
    unread: list[FilesystemEvent] = field(default_factory=list)
    error: AgentError | None = None
    task: "asyncio.Task[None] | None" = None

    async def collect(self) -> None:
        """Read as events come, so that new subdirectories are watched straight away."""
        try:
            while True:
                await self.watch.wait(None)
                await self.take()
        except AgentError as e:
            self.error = e
        finally:
            self.watch.close()

    async def take(self) -> None:
        await self.watch.read_into(self.unread)
        if len(self.unread) > MAX_UNREAD:
            raise AgentError(Code.RESOURCE_EXHAUSTED, f"more than {MAX_UNREAD} events went unread")


class Polled:
    """Watchers the sync SDK creates, polls and removes by id."""

    def __init__(self) -> None:
        self._watchers: dict[str, _Polled] = {}

    async def create(self, watch: Watch) -> str:
        if len(self._watchers) >= MAX_POLLED:
            raise AgentError(Code.RESOURCE_EXHAUSTED, f"at most {MAX_POLLED} watchers at once")
        await watch.start()
        polled = _Polled(watch)
        polled.task = asyncio.create_task(polled.collect())
        watcher_id = "w" + secrets.token_hex(10)
        self._watchers[watcher_id] = polled
        return watcher_id

    async def take(self, watcher_id: str) -> list[FilesystemEvent]:
        """The events since the last call, up to this moment."""
        polled = self._get(watcher_id)
        if polled.error is None:
            try:
                await polled.take()
            except AgentError as e:
                polled.error = e
        if polled.error is not None:
            raise polled.error
        events, polled.unread = polled.unread, []
        return events

    async def remove(self, watcher_id: str) -> None:
        polled = self._get(watcher_id)
        del self._watchers[watcher_id]
        if polled.task is not None:
            polled.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await polled.task
        polled.watch.close()

    def _get(self, watcher_id: str) -> _Polled:
        polled = self._watchers.get(watcher_id)
        if polled is None:
            raise AgentError(Code.NOT_FOUND, f"watcher with id {watcher_id} not found")
        return polled


def started() -> WatchDirResponse:
    event: Oneof[Literal["start"], WatchDirResponse.StartEvent]
    event = Oneof("start", WatchDirResponse.StartEvent())
    return WatchDirResponse(event=event)


def keepalive() -> WatchDirResponse:
    event: Oneof[Literal["keepalive"], WatchDirResponse.KeepAlive]
    event = Oneof("keepalive", WatchDirResponse.KeepAlive())
    return WatchDirResponse(event=event)


def changed(change: FilesystemEvent) -> WatchDirResponse:
    event: Oneof[Literal["filesystem"], FilesystemEvent] = Oneof("filesystem", change)
    return WatchDirResponse(event=event)
