"""GET and POST /files: streamed down and up, multipart and octet-stream, as the caller's user.

A file is opened on a thread acting as the caller's user (`identity`), so the kernel checks every
path component and link; the open descriptor is then streamed in chunks, never read whole.

An upload goes to a new temporary file beside the destination, created as the user, and is
renamed over the destination only once every byte arrived. A failed or abandoned upload leaves
nothing behind, and a link planted at the destination name is replaced, not written through.
The directory is held open from creating the temporary file to renaming it, so both happen in
the same place. An existing file's permission bits carry over to its replacement; its metadata
doesn't: the request's `X-Metadata-*` headers (`metadata`) are set on the temporary file as soon
as it exists, before a byte of the body is written, so a file system that can't keep them fails
the upload at once, and the file appears under its name with its metadata already on it.

Errors found while a body is still arriving are answered after the rest of it has been read
and discarded, so that the SDK, still sending, reads the answer rather than a broken pipe.
"""

import asyncio
import contextlib
import email.utils
import json
import os
import stat
import urllib.parse
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from connectrpc.code import Code
from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header

from workspace_agent import auth, metadata, paths
from workspace_agent.encoding import GzipDecoder, GzipEncoder, accepts_gzip
from workspace_agent.errors import AgentError
from workspace_agent.filesystem import ensure_parent
from workspace_agent.http import (
    JSON,
    Receive,
    Scope,
    Send,
    header,
    number,
    query,
    respond,
    respond_error,
    respond_json,
)
from workspace_agent.identity import Identity
from workspace_agent.metadata import Metadata
from workspace_agent.state import Agent
from workspace_agent.users import User

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

T = TypeVar("T")

READ_CHUNK = 256 << 10
WRITE_BATCH = 1 << 20
"""Upload bytes gathered before one write on a worker thread."""
MAX_PART_HEADER = 16 << 10  # a part's Content-Disposition carries a whole path
Written = dict[str, str | dict[str, str]]
"""One file of an upload's answer: path, name, type, and its metadata if it has some."""


@dataclass
class _Call:
    """One /files request: who asks, as whom, and about what."""

    agent: Agent
    identity: Identity
    scope: Scope
    params: dict[str, str]
    user: User
    metadata: Metadata = field(default_factory=dict)
    """The request's, set on every file it uploads."""

    def path(self, given: str | None) -> str:
        if given is None:
            raise AgentError(Code.INVALID_ARGUMENT, "the path query parameter is required")
        return paths.resolve(given, self.agent.workdir, self.user.home)

    async def as_user(self, work: Callable[[], T]) -> T:
        return await self.identity.run(self.user, work)


async def handle(
    agent: Agent, identity: Identity, scope: Scope, receive: Receive, send: Send
) -> None:
    params = query(scope)
    reading = scope["method"] == "GET"
    try:
        auth.authorize_files(agent.session, scope, params, "read" if reading else "write")
        user = agent.users.resolve(params.get("username") or None)
        call = _Call(agent, identity, scope, params, user)
        await (_download if reading else _upload)(call, receive, send)
    except AgentError as e:
        await respond_error(send, e)


# Downloads


def _open_for_reading(path: str) -> tuple[int, os.stat_result]:
    """Open as the user; O_NONBLOCK so a planted FIFO can't hold a thread."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as e:
        raise paths.failure(e, path) from None
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode):
        return fd, st
    os.close(fd)
    what = "is a directory" if stat.S_ISDIR(st.st_mode) else "is not a regular file"
    raise AgentError(Code.INVALID_ARGUMENT, f"path '{path}' {what}")


def byte_range(value: str | None, size: int) -> tuple[int, int] | None:
    """The one range `Range: bytes=...` asks for, as (start, end inclusive); None for all.

    Several ranges, or a header that isn't a byte range, are answered with the whole file, as
    RFC 9110 allows; a range that starts past the end is refused.
    """
    if not value:
        return None
    unit, _, spec = value.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    start, end = number(first), number(last)
    malformed = (
        (first and start is None) or (last and end is None) or (start is None and end is None)
    )
    if not dash or malformed or (start is not None and end is not None and end < start):
        return None
    if start is None:  # the last N bytes
        assert end is not None  # noqa: S101  # one of the two is a number
        if end == 0 or size == 0:
            raise _Unsatisfiable
        return max(size - end, 0), size - 1
    if start >= size:
        raise _Unsatisfiable
    return start, min(end, size - 1) if end is not None else size - 1


class _Unsatisfiable(Exception):  # noqa: N818  # a range, not an error of ours
    pass


def content_disposition(name: str) -> bytes:
    """`inline` with the file's name, also as RFC 5987 UTF-8 when plain ASCII can't hold it."""
    plain = "".join(c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in name)
    value = f'inline; filename="{plain}"'
    if plain != name:
        value += "; filename*=UTF-8''" + urllib.parse.quote(name, safe="")
    return value.encode()


def _next_chunk(fd: int, offset: int, size: int, encoder: GzipEncoder | None) -> tuple[int, bytes]:
    data = os.pread(fd, size, offset)
    return len(data), (encoder.encode(data) if encoder and data else data)


async def _download(call: _Call, receive: Receive, send: Send) -> None:
    path = call.path(call.params.get("path"))
    fd, st = await call.as_user(lambda: _open_for_reading(path))
    try:
        await _send_file(call.scope, receive, send, fd=fd, st=st, name=os.path.basename(path))
    finally:
        os.close(fd)


def _try_gzip(fd: int, size: int) -> tuple[GzipEncoder | None, int, bytes]:
    """Compress the first chunk; keep compressing only if that paid (the chunk as sent)."""
    data = os.pread(fd, size, 0)
    encoder = GzipEncoder()
    packed = encoder.encode(data)
    if encoder.compressing:
        return encoder, len(data), encoder.HEADER + packed
    return None, len(data), data


async def _send_file(
    scope: Scope, receive: Receive, send: Send, *, fd: int, st: os.stat_result, name: str
) -> None:
    """The file whole or the range asked for; gzip when the client takes it and it pays."""
    size = st.st_size
    headers = [
        (b"content-type", b"application/octet-stream"),
        (b"content-disposition", content_disposition(name)),
        (b"last-modified", email.utils.formatdate(st.st_mtime, usegmt=True).encode()),
        (b"accept-ranges", b"bytes"),
        (b"vary", b"Accept-Encoding"),
    ]
    ranged = header(scope, "range") if header(scope, "if-range") is None else None
    try:
        span = byte_range(ranged, size)
    except _Unsatisfiable:
        message = f"range {ranged!r} is outside the file's {size} bytes"
        body = json.dumps({"code": 416, "message": message}).encode()
        await respond(send, 416, body, JSON, ((b"content-range", f"bytes */{size}".encode()),))
        return
    start, end = span or (0, size - 1)
    status, encoder, offset, first = 200, None, start, b""
    if span is not None:
        status = 206
        headers.append((b"content-range", f"bytes {start}-{end}/{size}".encode()))
    elif accepts_gzip(header(scope, "accept-encoding")):
        encoder, offset, first = await asyncio.to_thread(_try_gzip, fd, min(READ_CHUNK, size))
    if encoder is not None:
        headers.append((b"content-encoding", b"gzip"))
    else:
        headers.append((b"content-length", str(end - start + 1).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    async with _watch_disconnect(receive) as gone:
        if first:
            await send({"type": "http.response.body", "body": first, "more_body": True})
        while offset <= end and not gone.is_set():
            n, data = await asyncio.to_thread(
                _next_chunk, fd, offset, min(READ_CHUNK, end + 1 - offset), encoder
            )
            if n == 0:  # shrank under us
                if encoder is None:
                    return  # short of its Content-Length: the server drops the connection
                break
            offset += n
            if data:
                await send({"type": "http.response.body", "body": data, "more_body": True})
        tail = encoder.finish() if encoder else b""
        await send({"type": "http.response.body", "body": tail, "more_body": False})


@contextlib.asynccontextmanager
async def _watch_disconnect(receive: Receive) -> AsyncIterator[asyncio.Event]:
    """An event set when the client goes away, so a long download stops reading the file."""
    gone = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    task = asyncio.create_task(watch())
    try:
        yield gone
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# Uploads


class _Gone(Exception):  # noqa: N818  # the client left; there is no one to answer
    pass


class _Body:
    """The request body as it arrives, inflated when it is gzip."""

    def __init__(self, receive: Receive, decoder: GzipDecoder | None) -> None:
        self._receive = receive
        self._decoder = decoder
        self.done = False

    async def chunks(self) -> AsyncIterator[bytes]:
        while not self.done:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise _Gone
            data: bytes = message.get("body", b"")
            self.done = not message.get("more_body", False)
            if self._decoder is None:
                if data:
                    yield data
                continue
            for piece in self._decoder.decode(data):
                yield piece
            if self.done and (rest := self._decoder.finish()):
                yield rest

    async def drain(self) -> None:
        while not self.done:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise _Gone
            self.done = not message.get("more_body", False)


def _decoder(scope: Scope) -> GzipDecoder | None:
    coding = (header(scope, "content-encoding") or "identity").strip().lower()
    if coding == "identity":
        return None
    if coding in {"gzip", "x-gzip"}:
        return GzipDecoder()
    raise AgentError(
        Code.INVALID_ARGUMENT, f"unsupported Content-Encoding {coding!r}; gzip or identity only"
    )


@dataclass
class _Temporary:
    """A temporary file being written beside its destination, in a directory held open."""

    directory: int
    name: str
    final: str
    fd: int


def _create_beside(path: str, labels: Metadata) -> _Temporary:
    """As the user: the parent directories, then an exclusive new file in the last of them.

    The new file gets the old one's permission bits and `labels` as its metadata.
    """
    parent, final = os.path.split(path)
    if not final:
        raise AgentError(Code.INVALID_ARGUMENT, f"path '{path}' is a directory")
    ensure_parent(path)
    try:
        directory = os.open(parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise paths.failure(e, parent) from None
    try:
        keep = _existing_mode(directory, final, path)
        name = paths.upload_name(final)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(name, flags, 0o666, dir_fd=directory)
    except OSError as e:
        os.close(directory)
        raise paths.failure(e, path) from None
    except AgentError:
        os.close(directory)
        raise
    temporary = _Temporary(directory, name, final, fd)
    try:
        metadata.store(fd, labels, path)  # first: the old bits may not let the user write
        if keep is not None:
            os.fchmod(fd, keep)
    except OSError as e:
        _abandon(temporary)
        raise paths.failure(e, path) from None
    except BaseException:
        _abandon(temporary)
        raise
    return temporary


def _existing_mode(directory: int, final: str, path: str) -> int | None:
    try:
        st = os.lstat(final, dir_fd=directory)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        raise AgentError(Code.INVALID_ARGUMENT, f"path '{path}' is a directory")
    return stat.S_IMODE(st.st_mode) & 0o777 if stat.S_ISREG(st.st_mode) else None


def _write_all(fd: int, data: bytes, path: str) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as e:
        raise paths.failure(e, path) from None


def _rename_into_place(temporary: _Temporary, path: str) -> None:
    try:
        os.rename(
            temporary.name,
            temporary.final,
            src_dir_fd=temporary.directory,
            dst_dir_fd=temporary.directory,
        )
    except OSError as e:
        raise paths.failure(e, path) from None


def _discard(temporary: _Temporary) -> None:
    with contextlib.suppress(OSError):
        os.unlink(temporary.name, dir_fd=temporary.directory)


def _abandon(temporary: _Temporary) -> None:
    """As the user, before `_create_beside` returns: the temporary file gone, all closed."""
    os.close(temporary.fd)
    _discard(temporary)
    os.close(temporary.directory)


@dataclass
class _Destination:
    """One file being uploaded: written in batches, renamed into place or discarded."""

    call: _Call
    path: str
    temporary: _Temporary | None = None
    pending: bytearray = field(default_factory=bytearray)

    async def open(self) -> None:
        labels = self.call.metadata
        self.temporary = await self.call.as_user(lambda: _create_beside(self.path, labels))

    async def fill(self, chunks: AsyncIterator[bytes]) -> Written:
        """The whole of `chunks` as this file, or nothing at all."""
        await self.open()
        try:
            async for chunk in chunks:
                await self.write(chunk)
            return await self.commit()
        except BaseException:
            await self.abort()
            raise

    async def write(self, data: bytes) -> None:
        self.pending += data
        if len(self.pending) >= WRITE_BATCH:
            await self._flush()

    async def _flush(self) -> None:
        assert self.temporary is not None  # noqa: S101  # opened before the first write
        data, self.pending = bytes(self.pending), bytearray()
        await asyncio.to_thread(_write_all, self.temporary.fd, data, self.path)

    async def commit(self) -> Written:
        assert self.temporary is not None  # noqa: S101  # opened before the first write
        await self._flush()
        temporary = self.temporary
        fd, temporary.fd = temporary.fd, -1
        try:
            os.close(fd)  # a network filesystem may report a failed write only here
        except OSError as e:
            await self.abort()
            raise paths.failure(e, self.path) from None
        try:
            await self.call.as_user(lambda: _rename_into_place(temporary, self.path))
        except BaseException:
            await self.abort()
            raise
        os.close(temporary.directory)
        self.temporary = None
        written: Written = {"path": self.path, "name": os.path.basename(self.path), "type": "file"}
        if self.call.metadata:  # as envd: only when there is some
            written["metadata"] = dict(self.call.metadata)
        return written

    async def abort(self) -> None:
        temporary, self.temporary = self.temporary, None
        if temporary is None:
            return
        if temporary.fd >= 0:
            os.close(temporary.fd)
        try:
            await self.call.as_user(lambda: _discard(temporary))
        finally:
            os.close(temporary.directory)


async def _upload(call: _Call, receive: Receive, send: Send) -> None:
    kind, options = parse_options_header(header(call.scope, "content-type") or "")
    body = _Body(receive, _decoder(call.scope))
    try:
        call.metadata = metadata.from_headers(call.scope["headers"])
        if kind == b"application/octet-stream":
            destination = _Destination(call, call.path(call.params.get("path")))
            written = [await destination.fill(body.chunks())]
        elif kind.startswith(b"multipart/"):
            boundary = options.get(b"boundary")
            if not boundary:
                raise AgentError(Code.INVALID_ARGUMENT, "the multipart body has no boundary")
            written = await _write_parts(call, boundary, body)
        else:
            raise AgentError(
                Code.INVALID_ARGUMENT,
                f"unsupported Content-Type {kind.decode('latin-1')!r}; "
                "multipart/form-data or application/octet-stream only",
            )
    except AgentError as e:
        await body.drain()
        await respond_error(send, e)
        return
    except _Gone:
        return
    await respond_json(send, 200, written)


@dataclass
class _Part:
    """What python-multipart's callbacks reported since the last look, as events."""

    events: list[tuple[str, bytes]] = field(default_factory=list)
    header_name: bytearray = field(default_factory=bytearray)
    header_value: bytearray = field(default_factory=bytearray)
    disposition: bytes = b""

    def callbacks(self) -> "MultipartCallbacks":
        return {
            "on_part_data": self._data,
            "on_header_field": self._header_name,
            "on_header_value": self._header_value,
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_end": self._end,
        }

    def _data(self, chunk: bytes, start: int, end: int) -> None:
        self.events.append(("data", chunk[start:end]))

    def _header_name(self, chunk: bytes, start: int, end: int) -> None:
        self.header_name += chunk[start:end]

    def _header_value(self, chunk: bytes, start: int, end: int) -> None:
        self.header_value += chunk[start:end]

    def _header_end(self) -> None:
        if bytes(self.header_name).lower() == b"content-disposition":
            self.disposition = bytes(self.header_value)
        self.header_name.clear()
        self.header_value.clear()

    def _headers_finished(self) -> None:
        self.events.append(("begin", self.disposition))
        self.disposition = b""

    def _end(self) -> None:
        self.events.append(("end", b""))


def _part_target(disposition: bytes) -> tuple[str, str | None]:
    """The form name and file name of a part; names are UTF-8, as the SDK's client sends them."""
    _, options = parse_options_header(disposition.decode("latin-1"))
    try:
        name = options.get(b"name", b"").decode()
        filename = options.get(b"filename")
        # The SDK's client writes '"' as %22 in form parameters (HTML5's rule).
        return name, None if filename is None else filename.decode().replace("%22", '"')
    except UnicodeDecodeError:
        raise AgentError(Code.INVALID_ARGUMENT, "a part's file name is not UTF-8") from None


async def _write_parts(call: _Call, boundary: bytes, body: _Body) -> list[Written]:
    """Each part named `file` to the path its file name gives (or `?path=`), in order."""
    part = _Part()
    try:
        parser = MultipartParser(boundary, part.callbacks(), max_header_size=MAX_PART_HEADER)
    except ValueError as e:
        raise AgentError(Code.INVALID_ARGUMENT, f"bad multipart boundary: {e}") from None
    files = _Files(call)
    try:
        async for chunk in body.chunks():
            try:
                parser.write(chunk)
            except Exception as e:  # python-multipart's errors are several unrelated types
                raise AgentError(Code.INVALID_ARGUMENT, f"malformed multipart body: {e}") from None
            await files.act_on(part.events)
            part.events.clear()
        if parser.state != MultipartState.END:
            raise AgentError(
                Code.INVALID_ARGUMENT, "the multipart body ended before its last boundary"
            )
    except BaseException:
        await files.abort()
        raise
    if not files.written:
        raise AgentError(Code.INVALID_ARGUMENT, "the multipart body has no part named 'file'")
    return files.written


@dataclass
class _Files:
    """The files of a multipart body: those written, and the one being written."""

    call: _Call
    written: list[Written] = field(default_factory=list)
    paths: set[str] = field(default_factory=set)
    """The paths in `written`, for the duplicate check of each next part."""
    current: "_Destination | None" = None

    async def act_on(self, events: list[tuple[str, bytes]]) -> None:
        for kind, data in events:
            if kind == "begin":
                self.current = await _begin_part(self.call, data, self.paths)
            elif kind == "data" and self.current is not None:
                await self.current.write(data)
            elif kind == "end" and self.current is not None:
                current, self.current = self.current, None
                self.written.append(await current.commit())
                self.paths.add(current.path)

    async def abort(self) -> None:
        if self.current is not None:
            await self.current.abort()


async def _begin_part(call: _Call, disposition: bytes, taken: set[str]) -> "_Destination | None":
    name, filename = _part_target(disposition)
    if name != "file":
        return None
    given = call.params.get("path") or filename
    if not given:
        raise AgentError(Code.INVALID_ARGUMENT, "a part named 'file' has no file name to write to")
    path = call.path(given)
    if path in taken:
        raise AgentError(
            Code.INVALID_ARGUMENT, f"'{path}' is named by more than one part of the upload"
        )
    destination = _Destination(call, path)
    await destination.open()
    return destination
