"""File metadata below the SDK: the headers' rules, the attributes' bounds, raw uploads.

`metadata.from_headers` turns an upload's `X-Metadata-*` headers into metadata or one error
naming the key at fault; `metadata.read` reads a file's back within the same bounds, whatever
was set in the sandbox by other means. A file system without extended attributes fails the
upload, whole, before its body is written.
"""

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from connectrpc.code import Code
from workspace_agent import metadata
from workspace_agent.errors import AgentError

from tests.agent.needs import unavailable
from tests.agent.sdk.agents import NOBODY, Running

pytestmark = pytest.mark.e2e  # starts agents or gateways

OCTET = {"content-type": "application/octet-stream"}


def headers(*pairs: tuple[str, str | bytes]) -> list[tuple[bytes, bytes]]:
    """Headers as an ASGI scope holds them: names lower-cased, values as sent."""
    return [
        (name.lower().encode(), value if isinstance(value, bytes) else value.encode())
        for name, value in pairs
    ]


def test_keys_are_lowercased_and_other_headers_ignored() -> None:
    got = metadata.from_headers(
        headers(("X-Metadata-Owner", "agent-7"), ("Content-Type", "text/plain"), ("x-m", "1"))
    )
    assert got == {"owner": "agent-7"}
    assert metadata.from_headers(headers(("X-Metadata-empty-value", ""))) == {"empty-value": ""}


def test_the_bounds_themselves_are_accepted() -> None:
    longest = metadata.from_headers(headers(("x-metadata-" + "k" * 246, "v")))
    assert list(longest) == ["k" * 246]
    most = metadata.from_headers(headers(*((f"x-metadata-{n:02}", "v") for n in range(64))))
    assert len(most) == metadata.MAX_KEYS
    whole = metadata.from_headers(headers(("x-metadata-k", "v" * (4096 - 10))))
    assert len(whole["k"]) == 4086


@pytest.mark.parametrize(
    ("given", "message"),
    [
        pytest.param(
            headers(("x-metadata-", "v")),
            "invalid metadata: a key is empty (a bare X-Metadata- header)",
            id="empty-key",
        ),
        pytest.param(
            headers(("x-metadata-k", b"caf\xe9")),
            "invalid metadata: the value of key 'k' is not printable US-ASCII",
            id="value-not-ascii",
        ),
        pytest.param(
            headers(("x-metadata-k", "tab\there")),
            "invalid metadata: the value of key 'k' is not printable US-ASCII",
            id="value-with-a-control-character",
        ),
        pytest.param(
            [(b"x-metadata-k\xe9", b"v")],
            "invalid metadata: key 'k\xe9' is not printable US-ASCII",
            id="key-not-ascii",
        ),
        pytest.param(
            headers(("x-metadata-" + "k" * 247, "v")),
            "invalid metadata: key 'kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk'... is longer than 246 bytes",
            id="key-longer-than-an-attribute-name",
        ),
        pytest.param(
            headers(("X-Metadata-A", "1"), ("x-metadata-a", "2")),
            "invalid metadata: key 'a' is given more than once (keys are lowercased)",
            id="key-twice",
        ),
        pytest.param(
            headers(*((f"x-metadata-{n:02}", "v") for n in range(65))),
            "invalid metadata: key '64' is one more than the 64 keys a file may carry",
            id="too-many-keys",
        ),
        pytest.param(
            headers(("x-metadata-a", "v" * 2000), ("x-metadata-b", "v" * 2080)),
            "invalid metadata: key 'b' brings the metadata to 4100 bytes, more than 4096 "
            "(each key with its user.e2b. prefix, and its value)",
            id="too-many-bytes-in-all",
        ),
    ],
)
def test_what_cannot_be_kept_is_one_error_naming_the_key(
    given: list[tuple[bytes, bytes]], message: str
) -> None:
    with pytest.raises(AgentError) as refused:
        metadata.from_headers(given)
    assert (refused.value.code, refused.value.message) == (Code.INVALID_ARGUMENT, message)


@pytest.fixture
def roomy() -> Iterator[Path]:
    """A file on tmpfs, which keeps more attributes than ext4's one block (Linux 6.6 and later)."""
    with tempfile.TemporaryDirectory(dir="/dev/shm") as folder:
        path = Path(folder) / "f"
        path.write_text("x")
        try:
            os.setxattr(path, "user.e2b.a-huge", b"h" * 5000)
        except OSError as e:
            unavailable(f"tmpfs here keeps no large user attributes: {e}")
        yield path


def test_reading_back_is_bounded_and_skips_what_is_not_utf8(roomy: Path) -> None:
    for n in range(70):
        os.setxattr(roomy, f"user.e2b.k{n:02}", b"v")
    os.setxattr(roomy, "user.e2b.a-not-utf8", b"\xff")
    os.setxattr(roomy, "user.not-ours", b"x")
    assert metadata.read(str(roomy)) == {f"k{n:02}": "v" for n in range(64)}
    assert metadata.read(str(roomy.with_name("missing"))) == {}


def test_a_link_has_none_of_its_targets_metadata(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("x")
    os.setxattr(target, "user.e2b.k", b"v")
    (tmp_path / "link").symlink_to(target)
    assert metadata.read(str(target)) == {"k": "v"}
    assert metadata.read(str(tmp_path / "link")) == {}


# Raw uploads


def test_a_refused_upload_is_envds_400_and_writes_nothing(agent: Running) -> None:
    for how in ("multipart", "octet-stream"):
        bad = {"x-metadata-k": b"caf\xe9"}
        if how == "multipart":
            r = agent.post(
                "/files", params={"path": "f.txt"}, files={"file": ("f", b"x")}, headers=bad
            )
        else:
            r = agent.post(
                "/files", params={"path": "f.txt"}, content=b"x" * (1 << 20), headers=OCTET | bad
            )
        assert r.status_code == 400, how
        assert r.json() == {
            "code": 400,
            "message": "invalid metadata: the value of key 'k' is not printable US-ASCII",
        }
        assert list(agent.root.iterdir()) == []


def test_the_upload_answer_carries_the_metadata_only_when_given(agent: Running) -> None:
    r = agent.post(
        "/files", params={"path": "a.txt"}, content=b"a", headers=OCTET | {"X-Metadata-K": "v"}
    )
    assert r.json() == [
        {"path": str(agent.root / "a.txt"), "name": "a.txt", "type": "file", "metadata": {"k": "v"}}
    ]
    r = agent.post("/files", params={"path": "b.txt"}, content=b"b", headers=OCTET)
    assert r.json() == [{"path": str(agent.root / "b.txt"), "name": "b.txt", "type": "file"}]


@pytest.fixture
def no_attributes(agent: Running) -> Iterator[Path]:
    """A ramfs inside the workspace, which keeps no extended attributes (needs mount rights)."""
    mountpoint = agent.root / "plain"
    mountpoint.mkdir()
    done = subprocess.run(
        ["mount", "-t", "ramfs", "-o", "mode=0755", "ramfs", str(mountpoint)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        unavailable(f"cannot mount a ramfs: {done.stderr.decode().strip()}")
    os.chown(mountpoint, NOBODY.pw_uid, NOBODY.pw_gid)
    yield mountpoint
    subprocess.run(["umount", "-l", str(mountpoint)], check=True)


def test_a_file_system_without_attributes_is_a_clear_error(
    agent: Running, no_attributes: Path
) -> None:
    r = agent.post("/files", params={"path": "plain/kept.txt"}, content=b"old", headers=OCTET)
    assert r.status_code == 200, r.text
    r = agent.post(
        "/files",
        params={"path": "plain/kept.txt"},
        content=b"new" * (1 << 18),
        headers=OCTET | {"x-metadata-k": "v"},
    )
    assert r.status_code == 400
    assert r.json()["message"] == (
        f"{no_attributes / 'kept.txt'}: the file system does not support extended attributes, "
        "so the file's metadata can't be kept; write it without metadata, or on another file "
        "system"
    )
    assert [p.name for p in no_attributes.iterdir()] == ["kept.txt"]
    assert (no_attributes / "kept.txt").read_bytes() == b"old"
