"""File metadata: `X-Metadata-<key>` upload headers, kept as `user.e2b.<key>` extended attributes.

envd 0.6.2's contract, which `files.write(..., metadata={...})` relies on: every file of an
upload gets the request's metadata, keys lowercased; it comes back in each `EntryInfo`
(`get_info`, `list`, `rename`, watch events) and in the upload's answer. The attributes live in
envd's namespace, `user.e2b.`, so that other tools' `user.*` attributes are neither shown nor
touched, and an attribute set in the sandbox (`setfattr -n user.e2b.k`) shows as well.

An upload writes a new file and renames it over the old one, so the new metadata replaces the
old whole, as envd's does; a rename keeps the inode, and with it the metadata. What a caller may
store is bounded as envd bounds it (a key within the kernel's 255-byte attribute name, keys and
values printable ASCII, 4096 bytes in all, which ext4 keeps in one block) and also to `MAX_KEYS`
keys; the request's head is already bounded by the server (`connections.Limits`).

Attributes are set through the new file's descriptor, on the thread acting as the caller's user
(`identity`), and read without following links, so a link never lends its target's metadata.
"""

import errno
import os

from connectrpc.code import Code

from workspace_agent import paths
from workspace_agent.errors import AgentError

PREFIX = "user.e2b."
"""envd's namespace: `user.` is the one a file's owner may write; `e2b.` keeps other tools out."""
HEADER = b"x-metadata-"
MAX_KEYS = 64
MAX_KEY = 255 - len(PREFIX)
"""The kernel's limit on an attribute's name (XATTR_NAME_MAX) counts the prefix."""
MAX_TOTAL = 4096
"""Every key with its prefix, and every value, in bytes: envd's bound, one ext4 block."""

Metadata = dict[str, str]


def _printable(text: str) -> bool:
    return all(" " <= c <= "~" for c in text)


def from_headers(headers: list[tuple[bytes, bytes]]) -> Metadata:
    """The request's `X-Metadata-*` headers as metadata, or one error naming the key at fault."""
    found: Metadata = {}
    total = 0
    for name, raw in headers:
        if not name.lower().startswith(HEADER):
            continue
        key = name[len(HEADER) :].decode("latin-1").lower()
        value = bytes(raw).decode("latin-1")
        if not key:
            raise _invalid("a key is empty (a bare X-Metadata- header)")
        if not _printable(key):
            raise _invalid(f"key {key!r} is not printable US-ASCII")
        if len(key) > MAX_KEY:
            raise _invalid(f"key {key[:32]!r}... is longer than {MAX_KEY} bytes")
        if key in found:
            raise _invalid(f"key {key!r} is given more than once (keys are lowercased)")
        if not _printable(value):
            raise _invalid(f"the value of key {key!r} is not printable US-ASCII")
        if len(found) == MAX_KEYS:
            raise _invalid(f"key {key!r} is one more than the {MAX_KEYS} keys a file may carry")
        total += len(PREFIX) + len(key) + len(value)
        if total > MAX_TOTAL:
            raise _invalid(
                f"key {key!r} brings the metadata to {total} bytes, more than {MAX_TOTAL} "
                f"(each key with its {PREFIX} prefix, and its value)"
            )
        found[key] = value
    return found


def _invalid(what: str) -> AgentError:
    return AgentError(Code.INVALID_ARGUMENT, f"invalid metadata: {what}")


def store(fd: int, metadata: Metadata, path: str) -> None:
    """Set `metadata` on the open file `fd`, which is `path`; as the file's user."""
    for key, value in metadata.items():
        try:
            os.setxattr(fd, PREFIX + key, value.encode("ascii"))
        except OSError as e:
            raise _store_failure(e, path) from None


def _store_failure(error: OSError, path: str) -> AgentError:
    if error.errno in {errno.ENOTSUP, errno.EOPNOTSUPP}:
        return AgentError(
            Code.FAILED_PRECONDITION,
            f"{path}: the file system does not support extended attributes, so the file's "
            "metadata can't be kept; write it without metadata, or on another file system",
        )
    if error.errno in {errno.ENOSPC, errno.EDQUOT}:
        return AgentError(Code.RESOURCE_EXHAUSTED, f"{path}: not enough space for the metadata")
    if error.errno in {errno.E2BIG, errno.ERANGE}:
        return AgentError(
            Code.INVALID_ARGUMENT, f"{path}: more metadata than this file system keeps on a file"
        )
    return paths.failure(error, path)


def read(path: str) -> Metadata:
    """The metadata of `path` itself, best effort: none where it can't be read.

    Attributes set in the sandbox by other means are shown when they are UTF-8 (a protobuf
    string holds nothing else), within the same bounds as an upload's, in name order.
    """
    try:
        names = sorted(os.listxattr(path, follow_symlinks=False))
    except OSError:
        return {}
    found: Metadata = {}
    total = 0
    for name in names:
        if not name.startswith(PREFIX):
            continue
        if len(found) == MAX_KEYS:
            break
        try:
            raw = os.getxattr(path, name, follow_symlinks=False)
            key, value = name[len(PREFIX) :], raw.decode()
            size = len(name.encode()) + len(raw)  # a name that isn't UTF-8 holds surrogates
        except (OSError, UnicodeError):
            continue
        if total + size <= MAX_TOTAL:
            total += size
            found[key] = value
    return found
