"""Every namespace's WorkspaceSandboxes as one watch keeps them: an informer, as controllers have.

One thread per replica lists the gateway's sandboxes across all namespaces, then watches from
that list's resourceVersion: a 410 (the version was compacted away) lists again, any other
failure reconnects after a capped, doubling pause. The client is synchronous, so the thread is
its own, never the event loop's executor, which every request's API call needs. What it reads
goes to the event loop with `call_soon_threadsafe`; the cache is only ever read and written
there, so no lock guards it and a waiter can look, then wait, without missing a change.

Lists are paginated (LIST_PAGE objects a page, so a list's peak is a page's, not the
cluster's), and a 410 on a page's continue token lists again from the start. The cache keeps
each object's view (`view`), computed on the watch thread as it reads, never the object:
an object whose view is over budget is not cached, and is logged once.

The cache is a hint, never the authority: the backend falls back to the API server on a miss
(see `KubernetesBackend.locate`) and while waiting for a change that does not come.
"""

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.response import BaseHTTPResponse

Key = tuple[str, str]  # (namespace, name)
Obj = dict[str, Any]
Seen = tuple[Key, Obj | None]  # an object's key and its view; None: over budget, not kept

GONE = 410
WATCH_SECONDS = 300  # the server ends each watch after this; the thread then resumes it
READ_SLACK_SECONDS = 30  # a silent connection this much past that is dead, not idle
CONNECT_SECONDS = 10
LIST_SECONDS = 60
# client-go's informers page by 500; objects here may carry 256 KiB of annotations each, so
# a page of 100 bounds a list's peak to about 25 MiB of JSON, whatever the cluster holds.
LIST_PAGE = 100
LIST_RESTARTS = 3  # continue tokens expired this many times in a row: back off, then list again
BACKOFF_FIRST, BACKOFF_MAX = 0.5, 30.0
STOP_SECONDS = 5.0
HEALTHY_SECONDS = 1.0

log = logging.getLogger("workspace_gateway")


class GoneError(Exception):
    """The watch's resourceVersion is too old: list again."""


class Cache:
    """(namespace, name) -> the object's view, kept by the watch thread; for the event loop only.

    `project` makes the view (None when over budget), on the watch thread (`seen`); `keep`
    decides on the view which objects are kept at all.
    """

    def __init__(
        self,
        keep: Callable[[Mapping[str, Any]], bool],
        project: Callable[[Mapping[str, Any]], Obj | None],
    ) -> None:
        self.keep = keep
        self.project = project
        self.objects: dict[Key, Obj] = {}
        self.names: dict[str, set[Key]] = {}
        self.oversized: set[Key] = set()
        """Objects left out for their size, each logged once while it stays so."""
        self.synced = asyncio.Event()
        self.waiters: dict[Key, set[asyncio.Future[None]]] = {}

    def seen(self, obj: Mapping[str, Any]) -> Seen | None:
        """What the cache is handed for an object read: thread-safe, touching no state."""
        key = _key(obj)
        return None if key is None else (key, self.project(obj))

    def get(self, key: Key) -> Obj | None:
        return self.objects.get(key)

    def named(self, name: str) -> list[Obj]:
        """Every namespace's object of this name: `locate`'s candidates."""
        return [self.objects[k] for k in self.names.get(name, ())]

    def replace(self, items: Iterable[Seen]) -> None:
        """A fresh list: whatever it lacks is gone."""
        before = set(self.objects)
        logged = self.oversized
        self.objects.clear()
        self.names.clear()
        self.oversized = set()
        for key, view in items:
            self._store(key, view, logged)
        self.synced.set()
        for key in before | set(self.objects):
            self._wake(key)

    def apply(self, kind: str, seen: Seen) -> None:
        """One watch event: ADDED, MODIFIED or DELETED."""
        key, view = seen
        self._forget(key)
        if kind != "DELETED":
            self._store(key, view, self.oversized)
        else:
            self.oversized.discard(key)
        self._wake(key)

    async def change(self, key: Key, seconds: float) -> bool:
        """Wait for the next change to this object (its deletion too); False after `seconds`."""
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(key, set()).add(waiter)
        try:
            await asyncio.wait_for(waiter, seconds)
        except TimeoutError:
            return False
        finally:
            waiting = self.waiters.get(key, set())
            waiting.discard(waiter)
            if not waiting:
                self.waiters.pop(key, None)
        return True

    def _store(self, key: Key, view: Obj | None, logged: set[Key]) -> None:
        if view is None:
            if key not in logged:
                # The data plane then finds it only through `locate`'s rate-limited direct list.
                log.warning("%s/%s: larger than the gateway caches; not cached", *key)
            self.oversized.add(key)
            return
        self.oversized.discard(key)
        if self.keep(view):
            self.objects[key] = view
            self.names.setdefault(key[1], set()).add(key)

    def _forget(self, key: Key) -> None:
        if self.objects.pop(key, None) is not None:
            same = self.names.get(key[1], set())
            same.discard(key)
            if not same:
                self.names.pop(key[1], None)

    def _wake(self, key: Key) -> None:
        for waiter in self.waiters.get(key, ()):
            if not waiter.done():
                waiter.set_result(None)


class Allowance:
    """A token bucket: at most `burst` at once, refilled at `rate` a second (times in seconds)."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.when = now

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.when) * self.rate)
        self.when = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


def _key(obj: Mapping[str, Any]) -> Key | None:
    metadata = obj.get("metadata") or {}
    namespace, name = metadata.get("namespace"), metadata.get("name")
    if isinstance(namespace, str) and isinstance(name, str):
        return namespace, name
    return None


def _version(obj: Mapping[str, Any]) -> str | None:
    value = (obj.get("metadata") or {}).get("resourceVersion")
    return value if isinstance(value, str) and value else None


class Watcher:
    """The one thread that lists and watches, handing what it reads to `cache` on `loop`.

    `listing(**options)` is the client's cluster-wide list of the resource, label selector and
    all; with `watch=True` and `_preload_content=False` it answers the open stream.
    """

    def __init__(
        self, listing: Callable[..., Any], cache: Cache, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.listing = listing
        self.cache = cache
        self.loop = loop
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.response: BaseHTTPResponse | None = None
        self.thread = threading.Thread(target=self._run, name="sandbox-watch", daemon=True)

    def start(self) -> None:
        self.thread.start()

    async def stop(self) -> None:
        """End the thread: a watch blocked on a silent stream is woken by shutting its socket."""
        self.stopping.set()
        with self.lock:
            if self.response is not None:
                _shut(self.response)
        await asyncio.to_thread(self.thread.join, STOP_SECONDS)
        if self.thread.is_alive():  # a list still under way; it ends within LIST_SECONDS
            log.warning("the sandbox watch did not stop within %.0f s", STOP_SECONDS)

    def _run(self) -> None:
        version: str | None = None
        pause = BACKOFF_FIRST
        while not self.stopping.is_set():
            try:
                if version is None:
                    version = self._list()
                version, healthy = self._watch(version)
            except GoneError:
                version = None  # list again at once: the watch was fine, only too far behind
                continue
            except Exception as e:  # any failure: reconnect, never give up
                if self.stopping.is_set():
                    break
                log.warning("the sandbox watch failed (%s); again in %.1f s", _why(e), pause)
                healthy = False
            if healthy:
                pause = BACKOFF_FIRST
            elif self.stopping.wait(pause):
                break
            else:
                pause = min(pause * 2, BACKOFF_MAX)

    def _list(self) -> str:
        """Every page, each object's view made as it is read; the version the list is at."""
        for _ in range(LIST_RESTARTS):
            try:
                seen, version = self._pages()
            except GoneError:
                continue  # a continue token expired between two pages: from the start
            self._hand(self.cache.replace, seen)
            return version
        raise ValueError(f"the list's continue token expired {LIST_RESTARTS} times in a row")

    def _pages(self) -> tuple[list[Seen], str]:
        seen: list[Seen] = []
        token: str | None = None
        while True:
            options: dict[str, Any] = {"limit": LIST_PAGE}
            if token:
                options["_continue"] = token
            try:
                listed = self.listing(**options, _request_timeout=(CONNECT_SECONDS, LIST_SECONDS))
            except ApiException as e:
                if e.status == GONE and token:
                    raise GoneError from None
                raise
            seen += [s for o in listed.get("items") or [] if (s := self.cache.seen(o)) is not None]
            del listed["items"]  # the page's objects go now, not at the next page
            metadata = listed.get("metadata") or {}
            token = metadata.get("continue") or None
            if token is None:
                break
        version = metadata.get("resourceVersion")
        if not isinstance(version, str) or not version:
            raise ValueError("the list carried no resourceVersion")
        return seen, version

    def _watch(self, version: str) -> tuple[str, bool]:
        """Follow one watch until the server ends it; the last version seen, and if it was healthy.

        Healthy is having carried events or lasted: only a failing watch backs off.
        """
        began = time.monotonic()
        try:
            response = self.listing(
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
                _preload_content=False,
                _request_timeout=(CONNECT_SECONDS, WATCH_SECONDS + READ_SLACK_SECONDS),
            )
        except ApiException as e:
            if e.status == GONE:
                raise GoneError from None
            raise
        heard = False
        with self.lock:
            self.response = response
        try:
            if self.stopping.is_set():  # stopped before the stream was there to shut
                return version, heard
            for line in response:
                version = self._event(line, version)
                heard = True
        finally:
            with self.lock:
                self.response = None
            response.release_conn()
        return version, heard or time.monotonic() - began >= HEALTHY_SECONDS

    def _event(self, line: bytes, version: str) -> str:
        if not line.strip():
            return version
        event = json.loads(line)
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == GONE:
                raise GoneError
            raise ValueError(f"the watch ended with {obj.get('code')}: {obj.get('message')}")
        if kind in {"ADDED", "MODIFIED", "DELETED"} and (seen := self.cache.seen(obj)):
            self._hand(self.cache.apply, kind, seen)
        return _version(obj) or version  # a BOOKMARK only moves the version on

    def _hand(self, method: Callable[..., None], *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(method, *args)
        except RuntimeError:  # the loop is closed: nobody is left to read the cache
            self.stopping.set()


def _shut(response: BaseHTTPResponse) -> None:
    with contextlib.suppress(Exception):  # already closed or released: nothing to wake
        response.shutdown()


def _why(e: Exception) -> str:
    if isinstance(e, ApiException):
        return f"{e.status} {e.reason}"
    return type(e).__name__
