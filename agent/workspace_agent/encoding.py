"""gzip for /files, streamed both ways and never at the cost of throughput.

Downloads: the SDK's HTTP client asks for gzip on every read, and zlib at its fastest level
compresses data that won't compress (archives, images, anything random) at only about 60 MiB/s
on a small VM, well under what a plain copy does; even stored, gzip costs the client a second
pass. So a file whose first chunk doesn't shrink is sent as it is (Accept-Encoding permits, it
does not oblige), and for the rest the encoder decides chunk by chunk: it
deflates a chunk, and when that saved less than a tenth, the next chunks go out as deflate
*stored* blocks (a copy plus a checksum) until it tries compressing again. Every compressed run
ends with a full flush, which resets zlib's history, so stored blocks can sit between compressed
ones in one valid gzip stream. Text still shrinks ten- to twenty-fold; random bytes cost a copy.

Uploads: `Content-Encoding: gzip` bodies are inflated as they arrive, in bounded pieces, so a
small body that inflates hugely never sits in memory whole.
"""

import struct
import zlib
from collections.abc import Iterator

from connectrpc.code import Code

from workspace_agent.errors import AgentError

LEVEL = 1
STORED_RUN = 16
"""Chunks sent stored after the first that didn't compress, before compressing is tried again."""
MAX_STORED_RUN = 64
WORTH_IT = 0.9
"""A chunk is worth compressing when it shrinks below this fraction of its size."""
_MAX_STORED = 0xFFFF
INFLATE_PIECE = 1 << 20
"""The most an uploaded gzip body inflates to at once."""


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether the client takes gzip at least as gladly as the identity coding."""
    if not accept_encoding:
        return False
    quality: dict[str, float] = {}
    for item in accept_encoding.split(","):
        name, _, params = item.partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key.lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        quality[name.strip().lower()] = q
    gzip = quality.get("gzip", quality.get("x-gzip", quality.get("*", 0.0)))
    return gzip > 0 and gzip >= quality.get("identity", 0.0)


class GzipEncoder:
    """One gzip member, built chunk by chunk from deflated and stored blocks."""

    HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"  # deflate, no name, no time, Unix

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._crc = 0
        self._size = 0
        self._store = 0
        self._run = STORED_RUN

    def encode(self, data: bytes) -> bytes:
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        if self._store:
            self._store -= 1
            return _stored(data)
        out = self._deflate.compress(data) + self._deflate.flush(zlib.Z_FULL_FLUSH)
        if len(out) > len(data) * WORTH_IT:
            self._store = self._run
            self._run = min(self._run * 2, MAX_STORED_RUN)
        else:
            self._run = STORED_RUN
        return out

    @property
    def compressing(self) -> bool:
        """Whether the last chunk paid for compressing (the next is compressed too)."""
        return self._store == 0

    def finish(self) -> bytes:
        return self._deflate.flush(zlib.Z_FINISH) + struct.pack(
            "<II", self._crc, self._size & 0xFFFFFFFF
        )


def _stored(data: bytes) -> bytes:
    """Deflate stored blocks (not final) holding `data` as it is."""
    view = memoryview(data)
    parts: list[bytes | memoryview] = []
    for start in range(0, len(data), _MAX_STORED):
        block = view[start : start + _MAX_STORED]
        parts += [struct.pack("<BHH", 0, len(block), len(block) ^ 0xFFFF), block]
    return b"".join(parts)


class GzipDecoder:
    """Inflates a gzip request body (one member or several) in pieces of bounded size."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def decode(self, data: bytes) -> Iterator[bytes]:
        try:
            while data:
                if self._inflate.eof:  # another member follows
                    self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                piece = self._inflate.decompress(data, INFLATE_PIECE)
                if piece:
                    yield piece
                data = self._inflate.unconsumed_tail or self._inflate.unused_data
        except zlib.error as e:
            raise AgentError(
                Code.INVALID_ARGUMENT, f"the request body is not valid gzip: {e}"
            ) from None

    def finish(self) -> bytes:
        """What the inflater still holds; an error if the body stopped inside a member."""
        try:
            rest = self._inflate.flush()
        except zlib.error as e:
            raise AgentError(
                Code.INVALID_ARGUMENT, f"the request body is not valid gzip: {e}"
            ) from None
        if not self._inflate.eof:
            raise AgentError(Code.INVALID_ARGUMENT, "the gzip request body ended early")
        return rest
