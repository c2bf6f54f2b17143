"""Hostile links: the default user can't reach root's files through the agent running as root.

Code in the sandbox runs as `nobody` and can plant any link in the workspace it owns. The agent
is root, so unless it really acts as `nobody`, a link to a root-only file would be read, written
or removed with root's authority. Here root keeps a 0600 file, a group-readable 0640 file, a
0700 directory and a 0755 directory outside the workspace, and `nobody` aims links at them.
"""

import base64
import concurrent.futures
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.agent.sdk.agents import AUTH, NOBODY, ROOT, Running

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not ROOT, reason="needs root to plant root's files"),
]

SECRET = b"root's secret"


@dataclass
class Roots:
    """Root's things, outside the workspace; every link below points at one of them."""

    base: Path
    secret: Path  # root 0600
    group_secret: Path  # root:root 0640
    private: Path  # root 0700, holding inner.txt
    shared: Path  # root 0755, holding inside.txt


@pytest.fixture
def roots() -> Iterator[Roots]:
    base = Path(tempfile.mkdtemp(prefix="roots-"))
    base.chmod(0o755)  # nobody may look inside; the files' own modes are what stop it
    r = Roots(base, base / "secret.txt", base / "group.txt", base / "private", base / "shared")
    r.secret.write_bytes(SECRET)
    r.secret.chmod(0o600)
    r.group_secret.write_bytes(SECRET)
    r.group_secret.chmod(0o640)
    r.private.mkdir(mode=0o700)
    (r.private / "inner.txt").write_bytes(SECRET)
    (r.private / "inner.txt").chmod(0o644)
    r.shared.mkdir(mode=0o755)
    (r.shared / "inside.txt").write_bytes(SECRET)
    yield r
    shutil.rmtree(base)


def plant(agent: Running, name: str, target: Path | str) -> Path:
    """A link as nobody would make it, in nobody's workspace."""
    link = agent.root / name
    link.symlink_to(target)
    os.lchown(link, NOBODY.pw_uid, NOBODY.pw_gid)
    return link


def rpc(
    agent: Running, method: str, body: dict[str, object], user: str | None = None
) -> httpx.Response:
    headers = {"content-type": "application/json", "connect-protocol-version": "1"}
    if user:
        headers["authorization"] = "Basic " + base64.b64encode(f"{user}:".encode()).decode()
    return agent.post(f"/filesystem.Filesystem/{method}", json=body, headers=headers)


def upload(agent: Running, path: str, data: bytes, *, octet: bool = False) -> httpx.Response:
    if octet:
        return agent.post(
            "/files",
            params={"path": path},
            content=data,
            headers={"content-type": "application/octet-stream"},
        )
    return agent.post("/files", params={"path": path}, files={"file": ("x", data)})


def unchanged(roots: Roots) -> None:
    assert roots.secret.read_bytes() == SECRET
    assert roots.secret.stat().st_uid == 0
    assert sorted(p.name for p in roots.base.iterdir()) == [
        "group.txt",
        "private",
        "secret.txt",
        "shared",
    ]
    assert [p.name for p in roots.shared.iterdir()] == ["inside.txt"]
    assert [p.name for p in roots.private.iterdir()] == ["inner.txt"]


def test_reading_through_a_link_is_refused(agent: Running, roots: Roots) -> None:
    plant(agent, "to-secret", roots.secret)
    plant(agent, "to-private", roots.private)
    for path in ("to-secret", "to-private/inner.txt", str(roots.secret), str(roots.group_secret)):
        r = agent.get("/files", params={"path": path})
        assert r.status_code == 403, path
        assert "permission denied" in r.json()["message"]
        assert SECRET not in r.content
    as_root = agent.get("/files", params={"path": "to-secret", "username": "root"})
    assert as_root.content == SECRET  # the same link is fine for root


def test_writing_at_a_planted_name_replaces_the_link(agent: Running, roots: Roots) -> None:
    for octet in (False, True):
        link = plant(agent, "dest.txt", roots.secret)
        r = upload(agent, "dest.txt", b"nobody's data", octet=octet)
        assert r.status_code == 200, r.text
        assert not link.is_symlink()
        assert link.read_bytes() == b"nobody's data"
        assert link.stat().st_uid == NOBODY.pw_uid
        link.unlink()
        unchanged(roots)


def test_metadata_goes_on_the_new_file_never_through_a_planted_link(
    agent: Running, roots: Roots
) -> None:
    labels = {"x-metadata-k": "nobody's label"}
    for target, octet in ((roots.secret, False), (roots.shared / "inside.txt", True)):
        link = plant(agent, "labelled.txt", target)
        if octet:
            octet_stream = {"content-type": "application/octet-stream", **labels}
            r = agent.post(
                "/files", params={"path": "labelled.txt"}, content=b"x", headers=octet_stream
            )
        else:
            r = agent.post(
                "/files",
                params={"path": "labelled.txt"},
                files={"file": ("x", b"x")},
                headers=labels,
            )
        assert r.status_code == 200, r.text
        assert not link.is_symlink()
        assert os.getxattr(link, "user.e2b.k") == b"nobody's label"
        assert link.stat().st_uid == NOBODY.pw_uid
        assert os.listxattr(target) == []
        link.unlink()
    unchanged(roots)


def test_a_link_shows_none_of_its_targets_metadata(agent: Running, roots: Roots) -> None:
    inside = roots.shared / "inside.txt"  # nobody may read it, and so its attributes too
    os.setxattr(inside, "user.e2b.owner", b"root")
    plant(agent, "to-inside", inside)
    link = rpc(agent, "Stat", {"path": "to-inside"}).json()["entry"]
    assert (link["isSymlink"], link.get("metadata")) == (True, None)
    listed = rpc(agent, "ListDir", {"path": "."}).json()["entries"]
    assert [(e["name"], e.get("metadata")) for e in listed] == [("to-inside", None)]
    direct = rpc(agent, "Stat", {"path": str(inside)}).json()["entry"]
    assert direct["metadata"] == {"owner": "root"}


def test_writing_into_a_linked_root_directory_is_refused(agent: Running, roots: Roots) -> None:
    plant(agent, "shared", roots.shared)
    plant(agent, "private", roots.private)
    for path in ("shared/new.txt", "shared/inside.txt", "private/inner.txt", "private/sub/new.txt"):
        for octet in (False, True):
            r = upload(agent, path, b"x", octet=octet)
            assert r.status_code == 403, (path, r.text)
    unchanged(roots)
    assert roots.shared.joinpath("inside.txt").read_bytes() == SECRET


def test_move_remove_and_make_dir_cannot_touch_roots_files(agent: Running, roots: Roots) -> None:
    link = plant(agent, "to-secret", roots.secret)
    plant(agent, "shared", roots.shared)
    plant(agent, "private", roots.private)
    (agent.root / "mine.txt").write_text("mine")
    os.chown(agent.root / "mine.txt", NOBODY.pw_uid, NOBODY.pw_gid)

    refused = [
        ("Move", {"source": str(roots.secret), "destination": "stolen.txt"}),
        ("Move", {"source": "shared/inside.txt", "destination": "stolen.txt"}),
        ("Move", {"source": "mine.txt", "destination": "shared/planted.txt"}),
        ("Move", {"source": "mine.txt", "destination": "private/planted.txt"}),
        ("Remove", {"path": "shared/inside.txt"}),
        ("Remove", {"path": "private/inner.txt"}),
        ("Remove", {"path": str(roots.private)}),
        ("MakeDir", {"path": "shared/newdir"}),
        ("MakeDir", {"path": "private/newdir"}),
    ]
    for method, body in refused:
        r = rpc(agent, method, body)
        assert r.status_code == 403, (method, body, r.text)
        assert r.json()["code"] == "permission_denied"
    unchanged(roots)

    # What nobody may do is done to the link itself, never to what it points at.
    moved = rpc(agent, "Move", {"source": "to-secret", "destination": "moved-link"})
    assert moved.status_code == 200
    assert (agent.root / "moved-link").is_symlink()
    assert rpc(agent, "Remove", {"path": "moved-link"}).status_code == 200
    assert not (agent.root / "moved-link").is_symlink()
    assert not link.exists()
    assert rpc(agent, "Remove", {"path": "shared"}).status_code == 200
    unchanged(roots)


def test_make_dir_through_a_dangling_link_creates_nothing_outside(
    agent: Running, roots: Roots
) -> None:
    plant(agent, "dangling", roots.base / "would-be-dir")
    r = rpc(agent, "MakeDir", {"path": "dangling"})
    assert r.status_code == 400
    assert not (roots.base / "would-be-dir").exists()
    assert rpc(agent, "MakeDir", {"path": "dangling/child"}).status_code == 404
    assert not (roots.base / "would-be-dir").exists()
    unchanged(roots)


def test_listing_never_follows_links(agent: Running, roots: Roots) -> None:
    plant(agent, "to-private", roots.private)
    plant(agent, "to-shared", roots.shared)
    plant(agent, "to-secret", roots.secret)
    plant(agent, "dangling", "/nonexistent/target")
    r = rpc(agent, "ListDir", {"path": ".", "depth": 5})
    assert r.status_code == 200
    entries = {e["name"]: e for e in r.json()["entries"]}
    assert set(entries) == {"to-private", "to-shared", "to-secret", "dangling"}
    assert all(e["isSymlink"] for e in entries.values())
    assert all(e["permissions"] == "Lrwxrwxrwx" for e in entries.values())
    # What nobody can see of each target: a file, a directory, and two it can't reach.
    assert entries["to-secret"]["type"] == "FILE_TYPE_FILE"
    assert entries["to-secret"]["symlinkTarget"] == str(roots.secret)
    assert entries["to-secret"]["mode"] == 0o600
    assert entries["to-shared"]["type"] == "FILE_TYPE_DIRECTORY"
    assert entries["dangling"]["type"] == "FILE_TYPE_SYMLINK"
    assert entries["dangling"]["symlinkTarget"] == "/nonexistent/target"

    assert rpc(agent, "ListDir", {"path": "to-private"}).status_code == 403
    as_root = rpc(agent, "ListDir", {"path": "to-private"}, user="root")
    assert [e["name"] for e in as_root.json()["entries"]] == ["inner.txt"]


def test_root_and_nobody_at_once_never_share_credentials(agent: Running, roots: Roots) -> None:
    """Reads as root and as nobody interleave on the agent's threads; none borrows the other's."""
    (agent.root / "own.txt").write_text("nobody's")
    os.chown(agent.root / "own.txt", NOBODY.pw_uid, NOBODY.pw_gid)
    (agent.root / "own.txt").chmod(0o600)

    def read(user: str, path: str) -> int:
        with httpx.Client() as client:
            r = client.get(
                agent.url + "/files", params={"path": path, "username": user}, headers=AUTH
            )
            if r.status_code == 200:
                assert r.content in {SECRET, b"nobody's"}
            return r.status_code

    jobs = [("root", str(roots.secret)), ("nobody", str(roots.secret))] * 40
    jobs += [("nobody", "own.txt"), ("root", "own.txt")] * 20
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(lambda job: (job, read(*job)), jobs))
    for (user, path), status in statuses:
        expected = 403 if (user, path) == ("nobody", str(roots.secret)) else 200
        assert status == expected, (user, path)

    # The agent's own thread is untouched: root's ids, root's (supplementary) groups.
    status = Path(f"/proc/{agent.process.pid}/status").read_text().splitlines()
    fields = {line.split(":")[0]: line.split(":", 1)[1].split() for line in status}
    assert fields["Uid"] == ["0", "0", "0", "0"]
    assert fields["Gid"] == ["0", "0", "0", "0"]
    assert fields["Groups"] == [str(g) for g in os.getgroups()]
