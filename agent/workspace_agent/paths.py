"""The one place that turns a request's path into the absolute path the agent works on.

Paths are not confined to the workspace: as with envd, a caller may name any path, and what it
may do there is decided by the kernel acting as the caller's user (`identity`). So resolving is
purely lexical: `~` is the user's home, relative paths start at the working directory (the
workspace root unless `/init` named another), and `..` is folded only after joining, so
`../x` from the workspace means the workspace's parent, as a shell would say.

`failure` turns what the kernel answered into the error the SDK maps to the right exception.
"""

import errno
import posixpath
import re
import secrets
from pathlib import Path

from connectrpc.code import Code

from workspace_agent.errors import AgentError


def resolve(path: str, workdir: Path, home: Path) -> str:
    if not path:
        raise AgentError(Code.INVALID_ARGUMENT, "path is empty")
    if "\0" in path:
        raise AgentError(Code.INVALID_ARGUMENT, f"path {path!r} contains a NUL byte")
    if path == "~" or path.startswith("~/"):
        path = str(home) + path[1:]
    elif path.startswith("~"):
        raise AgentError(
            Code.INVALID_ARGUMENT, f"path {path!r}: only the caller's own home (~) can be expanded"
        )
    joined = posixpath.join(str(workdir), path)
    normal = posixpath.normpath(joined)
    return "/" + normal.lstrip("/")  # normpath keeps a leading "//"


def text(name: str) -> str:
    """A name the kernel gave, as text a message can carry.

    Names are bytes; Python holds those that aren't UTF-8 with surrogates, which no protobuf
    string can hold, so one such name (code in the sandbox may make any) would fail a whole
    listing or end a watch. Each undecodable byte is shown as U+FFFD instead.
    """
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


_UPLOAD = re.compile(r"\..*\.[0-9a-f]{16}\.upload", re.DOTALL)


def upload_name(final: str) -> str:
    """The temporary name an upload to `final` is written under, beside it."""
    return f".{final[:32]}.{secrets.token_hex(8)}.upload"  # within NAME_MAX in any script


def is_upload_name(name: str) -> bool:
    return _UPLOAD.fullmatch(name) is not None


_CODES = {
    errno.ENOENT: (Code.NOT_FOUND, "no such file or directory"),
    errno.ENOTDIR: (Code.NOT_FOUND, "a component of the path is not a directory"),
    errno.EACCES: (Code.PERMISSION_DENIED, "permission denied"),
    errno.EPERM: (Code.PERMISSION_DENIED, "operation not permitted"),
    errno.EROFS: (Code.PERMISSION_DENIED, "read-only file system"),
    errno.EISDIR: (Code.INVALID_ARGUMENT, "is a directory"),
    errno.ELOOP: (Code.INVALID_ARGUMENT, "too many levels of symbolic links"),
    errno.ENAMETOOLONG: (Code.INVALID_ARGUMENT, "file name too long"),
    errno.EEXIST: (Code.ALREADY_EXISTS, "already exists"),
    errno.ENOTEMPTY: (Code.ALREADY_EXISTS, "directory not empty"),
    errno.EINVAL: (Code.INVALID_ARGUMENT, "invalid argument"),
    errno.ENOSPC: (Code.RESOURCE_EXHAUSTED, "not enough disk space"),
    errno.EDQUOT: (Code.RESOURCE_EXHAUSTED, "disk quota exceeded"),
}


def failure(error: OSError, path: str) -> AgentError:
    """The kernel's answer about `path`, as the error the caller gets."""
    code, text = _CODES.get(error.errno or 0, (Code.INTERNAL, error.strerror or str(error)))
    return AgentError(code, f"{path}: {text}")
