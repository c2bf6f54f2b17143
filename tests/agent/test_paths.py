"""Paths and modes, without a server: what the agent resolves and how it spells a file's mode."""

import errno
import os
import stat
import subprocess
from pathlib import Path

import pytest
from connectrpc.code import Code
from workspace_agent import paths
from workspace_agent.entries import go_mode, permissions
from workspace_agent.errors import AgentError
from workspace_agent.filesystem import list_dir

WORKDIR = Path("/workspace")
HOME = Path("/home/user")


@pytest.mark.parametrize(
    ("given", "resolved"),
    [
        ("file.txt", "/workspace/file.txt"),
        ("./a/../b//c/", "/workspace/b/c"),
        (".", "/workspace"),
        ("..", "/"),
        ("../../../etc/passwd", "/etc/passwd"),
        ("/abs/./x/../y", "/abs/y"),
        ("//double", "/double"),
        ("~", "/home/user"),
        ("~/notes", "/home/user/notes"),
    ],
)
def test_resolve(given: str, resolved: str) -> None:
    assert paths.resolve(given, WORKDIR, HOME) == resolved


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("", "path is empty"),
        ("a\0b", "path 'a\\x00b' contains a NUL byte"),
        ("~root/x", "path '~root/x': only the caller's own home (~) can be expanded"),
    ],
)
def test_resolve_refuses(given: str, message: str) -> None:
    with pytest.raises(AgentError) as raised:
        paths.resolve(given, WORKDIR, HOME)
    assert (raised.value.code, raised.value.message) == (Code.INVALID_ARGUMENT, message)


def test_kernel_errors_become_the_codes_the_sdk_maps() -> None:
    cases = {
        errno.ENOENT: Code.NOT_FOUND,
        errno.EACCES: Code.PERMISSION_DENIED,
        errno.EISDIR: Code.INVALID_ARGUMENT,
        errno.EEXIST: Code.ALREADY_EXISTS,
        errno.ENOSPC: Code.RESOURCE_EXHAUSTED,
        errno.EIO: Code.INTERNAL,
    }
    for number, code in cases.items():
        error = paths.failure(OSError(number, "ignored"), "/p")
        assert error.code == code
        assert error.message.startswith("/p: ")


@pytest.mark.parametrize(
    ("mode", "go", "text"),
    [
        (stat.S_IFREG | 0o644, 0o644, "-rw-r--r--"),
        (stat.S_IFDIR | 0o755, 1 << 31 | 0o755, "drwxr-xr-x"),
        (stat.S_IFLNK | 0o777, 1 << 27 | 0o777, "Lrwxrwxrwx"),
        (stat.S_IFREG | stat.S_ISUID | 0o755, 1 << 23 | 0o755, "urwxr-xr-x"),
        (stat.S_IFREG | stat.S_ISGID | 0o750, 1 << 22 | 0o750, "grwxr-x---"),
        (stat.S_IFDIR | stat.S_ISVTX | 0o777, 1 << 31 | 1 << 20 | 0o777, "dtrwxrwxrwx"),
        (stat.S_IFCHR | 0o666, 1 << 26 | 1 << 21 | 0o666, "Dcrw-rw-rw-"),
        (stat.S_IFIFO | 0o600, 1 << 25 | 0o600, "prw-------"),
        (stat.S_IFSOCK | 0o755, 1 << 24 | 0o755, "Srwxr-xr-x"),
        (stat.S_IFREG, 0, "----------"),
    ],
)
def test_modes_as_go_spells_them(mode: int, go: int, text: str) -> None:
    assert go_mode(mode) == go
    assert permissions(mode) == text


def test_listing_a_very_deep_tree(tmp_path: Path) -> None:
    """Hostile code can nest directories far deeper than Python's recursion limit."""
    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(1500):  # pathlib and os.makedirs would recurse themselves
        os.mkdir("d", dir_fd=fd)
        fd, parent = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    os.close(fd)
    (tmp_path / "a.txt").write_text("a")
    try:
        found = list_dir(str(tmp_path), 5000)
        assert len(found) == 1501
        assert [e.name for e in found[:3]] == ["a.txt", "d", "d"]
        assert found[-1].path == str(tmp_path) + "/d" * 1500
        assert len(list_dir(str(tmp_path), 3)) == 4
    finally:
        subprocess.run(["rm", "-rf", str(tmp_path / "d")], check=True)


def test_upload_names_are_recognised_and_short() -> None:
    for final in ("a.txt", "x" * 255, "ü" * 100, ".hidden", "name.upload"):
        temporary = paths.upload_name(final)
        assert paths.is_upload_name(temporary)
        assert len(temporary.encode()) <= 255
    for name in (
        "a.txt",
        ".a.txt.upload",
        ".a.0123456789abcdeg.upload",
        "a.0123456789abcdef.upload",
    ):
        assert not paths.is_upload_name(name)
