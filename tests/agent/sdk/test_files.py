"""Files through the real SDK: `/files` both ways and the Filesystem RPCs, as users meet them.

The agent runs as root with `nobody` as its default user, so everything here also checks that
work is done with the caller's authority: files the default user writes belong to `nobody`, and
`user="root"` writes as root. In a pod the agent is `nobody` and nothing else.
"""

import datetime as dt
import grp
import hashlib
import io
import os
import time

import httpx
import pytest
from e2b import FileType, Sandbox
from e2b.exceptions import (
    AuthenticationException,
    FileNotFoundException,
    InvalidArgumentException,
    SandboxException,
)

from tests.agent.sdk.agents import NOBODY, Running

pytestmark = pytest.mark.e2e  # starts agents or gateways

MIB = 1 << 20
NOBODY_GROUP = grp.getgrgid(NOBODY.pw_gid).gr_name


def sha(data: bytes | bytearray) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def big() -> dict[int, bytes]:
    """Incompressible data, 8 MiB and 64 MiB (and a few bytes, so no size is round)."""
    return {size: os.urandom(size) for size in (8 * MIB + 123, 64 * MIB + 5)}


def test_text_is_written_and_read_back_three_ways(sandbox: Sandbox, agent: Running) -> None:
    info = sandbox.files.write("notes.txt", "héllo\nwörld\n")
    assert info.path == str(agent.root / "notes.txt")
    assert info.name == "notes.txt"
    assert info.type == FileType.FILE
    assert sandbox.files.read("notes.txt") == "héllo\nwörld\n"
    assert sandbox.files.read("notes.txt", format="bytes") == bytearray("héllo\nwörld\n".encode())
    stream = sandbox.files.read("notes.txt", format="stream")
    assert b"".join(stream) == "héllo\nwörld\n".encode()


def test_bytes_and_file_likes_are_written(sandbox: Sandbox, agent: Running) -> None:
    sandbox.files.write("raw.bin", b"\x00\x01\xff")
    sandbox.files.write("streamed.bin", io.BytesIO(b"from a file object"))
    assert (agent.root / "raw.bin").read_bytes() == b"\x00\x01\xff"
    assert (agent.root / "streamed.bin").read_bytes() == b"from a file object"


def test_writing_again_replaces_the_whole_file(sandbox: Sandbox, agent: Running) -> None:
    sandbox.files.write("f.txt", "a much longer first version")
    sandbox.files.write("f.txt", "short")
    assert (agent.root / "f.txt").read_text() == "short"


def test_write_files_writes_every_file_and_creates_their_directories(
    sandbox: Sandbox, agent: Running
) -> None:
    elsewhere = agent.root / "deep" / "er" / "three.txt"
    infos = sandbox.files.write_files(
        [
            {"path": "one.txt", "data": "1"},
            {"path": "nested/two.bin", "data": b"2"},
            {"path": str(elsewhere), "data": "3"},
        ]
    )
    assert [i.path for i in infos] == [
        str(agent.root / "one.txt"),
        str(agent.root / "nested" / "two.bin"),
        str(elsewhere),
    ]
    assert (agent.root / "one.txt").read_text() == "1"
    assert (agent.root / "nested" / "two.bin").read_bytes() == b"2"
    assert elsewhere.read_text() == "3"


def test_relative_paths_are_in_the_workspace_root(sandbox: Sandbox, agent: Running) -> None:
    sandbox.files.write("sub/dir/x.txt", "x")
    assert (agent.root / "sub" / "dir" / "x.txt").read_text() == "x"
    assert sandbox.files.get_info(".").path == str(agent.root)
    assert sandbox.files.get_info("sub/../sub/dir/x.txt").path == str(
        agent.root / "sub" / "dir" / "x.txt"
    )


def test_list_shows_entries_to_the_depth_asked(sandbox: Sandbox, agent: Running) -> None:
    sandbox.files.write("top.txt", "t")
    sandbox.files.write("dir/inner.txt", "i")
    sandbox.files.write("dir/sub/deepest.txt", "d")
    shallow = sandbox.files.list(".")
    assert {(e.name, e.type) for e in shallow} == {
        ("top.txt", FileType.FILE),
        ("dir", FileType.DIR),
    }
    deep = sandbox.files.list(".", depth=2)
    assert {e.path for e in deep} == {
        str(agent.root / "top.txt"),
        str(agent.root / "dir"),
        str(agent.root / "dir" / "inner.txt"),
        str(agent.root / "dir" / "sub"),
    }
    with pytest.raises(FileNotFoundException):
        sandbox.files.list("no-such-dir")
    with pytest.raises(InvalidArgumentException):
        sandbox.files.list("top.txt")


def test_exists_and_get_info(sandbox: Sandbox, agent: Running) -> None:
    before = dt.datetime.now(dt.UTC)
    sandbox.files.write("info.txt", "four")
    sandbox.files.make_dir("a-dir")
    assert sandbox.files.exists("info.txt")
    assert sandbox.files.exists("a-dir")
    assert not sandbox.files.exists("nothing-here")
    info = sandbox.files.get_info("info.txt")
    assert (info.name, info.type, info.path) == (
        "info.txt",
        FileType.FILE,
        str(agent.root / "info.txt"),
    )
    assert (info.size, info.mode, info.permissions) == (4, 0o644, "-rw-r--r--")
    assert (info.owner, info.group) == ("nobody", NOBODY_GROUP)
    assert before - dt.timedelta(seconds=2) <= info.modified_time
    directory = sandbox.files.get_info("a-dir")
    assert (directory.type, directory.mode, directory.permissions) == (
        FileType.DIR,
        0o755,
        "drwxr-xr-x",
    )
    with pytest.raises(FileNotFoundException):
        sandbox.files.get_info("nothing-here")


def test_rename_moves_and_creates_the_destination_directories(
    sandbox: Sandbox, agent: Running
) -> None:
    sandbox.files.write("old.txt", "content")
    moved = sandbox.files.rename("old.txt", "new/place/renamed.txt")
    assert moved.path == str(agent.root / "new" / "place" / "renamed.txt")
    assert moved.type == FileType.FILE
    assert not (agent.root / "old.txt").exists()
    assert (agent.root / "new" / "place" / "renamed.txt").read_text() == "content"
    with pytest.raises(FileNotFoundException):
        sandbox.files.rename("old.txt", "anything.txt")


def test_remove_files_trees_and_nothing(sandbox: Sandbox, agent: Running) -> None:
    sandbox.files.write("gone.txt", "x")
    sandbox.files.write("tree/a/b/c.txt", "x")
    sandbox.files.remove("gone.txt")
    sandbox.files.remove("tree")
    sandbox.files.remove("was-never-here")
    assert not (agent.root / "gone.txt").exists()
    assert not (agent.root / "tree").exists()


def test_make_dir_once_then_false_and_not_over_a_file(sandbox: Sandbox, agent: Running) -> None:
    assert sandbox.files.make_dir("made/with/parents") is True
    assert sandbox.files.make_dir("made/with/parents") is False
    assert (agent.root / "made" / "with" / "parents").is_dir()
    sandbox.files.write("plain.txt", "x")
    with pytest.raises(InvalidArgumentException):
        sandbox.files.make_dir("plain.txt")


def test_missing_files_and_directories_are_refused_as_the_sdk_expects(sandbox: Sandbox) -> None:
    with pytest.raises(FileNotFoundException):
        sandbox.files.read("missing.txt")
    with pytest.raises(FileNotFoundException):
        sandbox.files.read("missing/deeper.txt", format="bytes")
    sandbox.files.make_dir("a-directory")
    with pytest.raises(InvalidArgumentException, match="is a directory"):
        sandbox.files.read("a-directory")


WAYS = {
    "multipart": {},
    "octet-stream": {"use_octet_stream": True},
    "gzip": {"gzip": True},
}


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize(
    "size",
    [
        pytest.param(8 * MIB + 123, id="8MiB"),
        pytest.param(64 * MIB + 5, id="64MiB", marks=pytest.mark.slow),
    ],
)
def test_large_files_both_ways(
    sandbox: Sandbox, agent: Running, big: dict[int, bytes], size: int, way: str
) -> None:
    data = big[size]
    sandbox.files.write("large.bin", data, **WAYS[way])  # type: ignore[arg-type]
    on_disk = agent.root / "large.bin"
    assert on_disk.stat().st_size == size
    assert sha(on_disk.read_bytes()) == sha(data)
    assert sha(sandbox.files.read("large.bin", format="bytes", gzip=way == "gzip")) == sha(data)
    digest = hashlib.sha256()
    for chunk in sandbox.files.read("large.bin", format="stream"):
        digest.update(chunk)
    assert digest.hexdigest() == sha(data)


def test_a_file_like_upload_is_streamed_whole(
    sandbox: Sandbox, agent: Running, big: dict[int, bytes]
) -> None:
    data = big[64 * MIB + 5]
    sandbox.files.write("from-io.bin", io.BytesIO(data))
    assert sha((agent.root / "from-io.bin").read_bytes()) == sha(data)


def test_the_default_user_owns_what_it_writes_and_root_what_root_writes(
    sandbox: Sandbox, agent: Running
) -> None:
    sandbox.files.write("mine/by-default.txt", "x")
    sandbox.files.write("by-root.txt", "x", user="root")
    sandbox.files.make_dir("root-dir", user="root")
    default = agent.root / "mine" / "by-default.txt"
    assert (default.stat().st_uid, default.stat().st_gid) == (NOBODY.pw_uid, NOBODY.pw_gid)
    assert (agent.root / "mine").stat().st_uid == NOBODY.pw_uid
    assert (agent.root / "by-root.txt").stat().st_uid == 0
    assert (agent.root / "root-dir").stat().st_uid == 0
    assert sandbox.files.get_info("by-root.txt").owner == "root"
    # nobody can't write into root's new directory; root reads nobody's file.
    with pytest.raises(SandboxException, match="permission denied"):
        sandbox.files.write("root-dir/intruder.txt", "x")
    assert sandbox.files.read("mine/by-default.txt", user="root") == "x"


def test_in_a_pod_everything_is_the_pods_user(pod_sandbox: Sandbox, pod_agent: Running) -> None:
    pod_sandbox.files.write("pod/file.txt", "in a pod")
    assert pod_sandbox.files.read("pod/file.txt") == "in a pod"
    assert (pod_agent.root / "pod" / "file.txt").stat().st_uid == NOBODY.pw_uid
    assert pod_sandbox.files.get_info("pod/file.txt").owner == "nobody"
    assert [e.name for e in pod_sandbox.files.list("pod")] == ["file.txt"]
    with pytest.raises(SandboxException, match="cannot act as 'root'"):
        pod_sandbox.files.write("as-root.txt", "x", user="root")
    with pytest.raises(SandboxException, match="cannot act as 'root'"):
        pod_sandbox.files.get_info("pod/file.txt", user="root")
    assert not (pod_agent.root / "as-root.txt").exists()


# Signed URLs: once /init set a token, a URL signed with it is enough without the header.


@pytest.fixture
def secured(sandbox: Sandbox) -> Sandbox:
    """The SDK holding the token `/init` set (every test's agent is `/init`ed with it)."""
    return sandbox


@pytest.fixture
def without_token(sandbox: Sandbox) -> Sandbox:
    """The SDK as debug mode makes it, knowing no token."""
    del sandbox  # for its agent, and the environment that debug mode reads
    return Sandbox.create()


def test_after_init_only_the_token_holder_gets_in(secured: Sandbox, without_token: Sandbox) -> None:
    secured.files.write("secret.txt", "s")
    assert secured.files.read("secret.txt") == "s"
    with pytest.raises(AuthenticationException):
        without_token.files.read("secret.txt")
    with pytest.raises(AuthenticationException):
        without_token.files.write("other.txt", "x")


def test_signed_download_and_upload_urls(secured: Sandbox, agent: Running) -> None:
    secured.files.write("shared.txt", "for the browser")
    got = httpx.get(secured.download_url("shared.txt"))
    assert (got.status_code, got.text) == (200, "for the browser")
    expiring = httpx.get(secured.download_url("shared.txt", use_signature_expiration=60))
    assert expiring.text == "for the browser"

    put = httpx.post(secured.upload_url("up/loaded.txt"), files={"file": ("x", b"uploaded")})
    assert put.status_code == 200
    assert put.json()[0]["path"] == str(agent.root / "up" / "loaded.txt")
    assert (agent.root / "up" / "loaded.txt").read_bytes() == b"uploaded"
    assert (agent.root / "up" / "loaded.txt").stat().st_uid == NOBODY.pw_uid

    as_root = httpx.post(
        secured.upload_url("by-root.txt", user="root"), files={"file": ("x", b"r")}
    )
    assert as_root.status_code == 200
    assert (agent.root / "by-root.txt").stat().st_uid == 0


def test_signed_urls_are_bound_to_path_operation_user_and_time(secured: Sandbox) -> None:
    secured.files.write("a.txt", "a")
    secured.files.write("b.txt", "b")
    expired = httpx.get(secured.download_url("a.txt", use_signature_expiration=-120))
    assert expired.status_code == 401
    assert expired.json() == {"code": 401, "message": "signature is already expired"}

    other_path = httpx.get(secured.download_url("a.txt").replace("path=a.txt", "path=b.txt"))
    assert other_path.status_code == 401
    other_user = httpx.get(secured.download_url("a.txt") + "&username=root")
    assert other_user.status_code == 401
    read_url_to_write = httpx.post(
        secured.download_url("a.txt"), files={"file": ("x", b"overwritten")}
    )
    assert read_url_to_write.status_code == 401
    later = int(time.time()) + 3600
    stretched = secured.download_url("a.txt", use_signature_expiration=60)
    stretched = stretched.rsplit("signature_expiration=", 1)[0] + f"signature_expiration={later}"
    assert httpx.get(stretched).status_code == 401
    assert secured.files.read("a.txt") == "a"


def test_a_wrong_token_in_the_header_is_refused_even_with_a_signature(
    secured: Sandbox, agent: Running
) -> None:
    secured.files.write("a.txt", "a")
    r = httpx.get(secured.download_url("a.txt"), headers={"X-Access-Token": "wrong"})
    assert r.status_code == 401
    empty = httpx.get(secured.download_url("a.txt"), headers={"X-Access-Token": ""})
    assert empty.status_code == 401  # present, even empty, it must match: the gateway's rule
    assert agent.anonymous.get("/files", params={"path": "a.txt"}).status_code == 401


def test_an_expiration_is_plain_digits_as_the_gateway_reads_it(secured: Sandbox) -> None:
    secured.files.write("a.txt", "a")
    signed = secured.download_url("a.txt", use_signature_expiration=60)
    head, _, value = signed.rpartition("signature_expiration=")
    assert httpx.get(signed).status_code == 200
    for spelled in (f"%2B{value}", f"%20{value}", f"{value[:-1]}_{value[-1]}"):
        answer = httpx.get(head + "signature_expiration=" + spelled)
        assert answer.status_code == 401, spelled
