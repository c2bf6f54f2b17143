"""`/files` on the wire: what the SDK doesn't show, with raw HTTP.

Ranges, content codings, headers, multipart bodies of several parts, error bodies, a full disk,
uploads that fail or are abandoned half-way, and the agent's memory while it moves 256 MiB.
"""

import gzip
import hashlib
import json
import os
import socket
import subprocess
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.agent.sdk.agents import AUTH, NOBODY, TOKEN, Running

pytestmark = pytest.mark.e2e  # starts agents or gateways

MIB = 1 << 20


def put(agent: Running, path: str, data: bytes) -> Path:
    r = agent.post("/files", params={"path": path}, files={"file": ("ignored", data)})
    assert r.status_code == 200, r.text
    return agent.root / path


def leftovers(directory: Path) -> list[str]:
    """Temporary upload files that should never outlive their request."""
    return [p.name for p in directory.rglob("*") if p.name.endswith(".upload")]


# Downloads


def test_ranges(agent: Running) -> None:
    put(agent, "r.bin", bytes(range(100)))
    cases = {
        "bytes=0-9": (206, bytes(range(10)), "bytes 0-9/100"),
        "bytes=90-": (206, bytes(range(90, 100)), "bytes 90-99/100"),
        "bytes=-5": (206, bytes(range(95, 100)), "bytes 95-99/100"),
        "bytes=95-1000": (206, bytes(range(95, 100)), "bytes 95-99/100"),
        "bytes=9-3": (200, bytes(range(100)), None),  # not a valid range: the whole file
        "bytes=0-1,5-6": (200, bytes(range(100)), None),  # several: the whole file
        "items=0-1": (200, bytes(range(100)), None),
        "bytes=\u00b2-3": (200, bytes(range(100)), None),  # a digit to isdigit(), not to int()
        "bytes=0-" + "9" * 5000: (200, bytes(range(100)), None),  # past int()'s 4,300 digits
    }
    for value, (status, body, content_range) in cases.items():
        r = agent.get(
            "/files",
            params={"path": "r.bin"},
            headers={"Range": value.encode("latin-1"), "Accept-Encoding": "identity"},
        )
        assert (r.status_code, r.content, r.headers.get("content-range")) == (
            status,
            body,
            content_range,
        ), value
        assert r.headers["content-length"] == str(len(body))
    past = agent.get("/files", params={"path": "r.bin"}, headers={"Range": "bytes=100-"})
    assert past.status_code == 416
    assert past.headers["content-range"] == "bytes */100"
    assert past.json()["code"] == 416


def test_a_range_is_never_compressed(agent: Running) -> None:
    put(agent, "t.txt", b"abc" * 1000)
    r = agent.get(
        "/files",
        params={"path": "t.txt"},
        headers={"Range": "bytes=0-2", "Accept-Encoding": "gzip"},
    )
    assert r.status_code == 206
    assert "content-encoding" not in r.headers
    assert r.content == b"abc"


def raw_get(agent: Running, path: str, accept: str | None) -> tuple[httpx.Headers, bytes]:
    headers = {"Accept-Encoding": accept} if accept is not None else {}
    with httpx.Client() as client:
        if accept is None:
            del client.headers["Accept-Encoding"]
        with client.stream(
            "GET", agent.url + "/files", params={"path": path}, headers={**headers, **AUTH}
        ) as r:
            assert r.status_code == 200
            return r.headers, b"".join(r.iter_raw())


@pytest.mark.parametrize(
    ("accept", "gzipped"),
    [
        ("gzip", True),
        ("gzip, deflate", True),
        ("br;q=1.0, gzip;q=0.5", True),
        ("*", True),
        (None, False),
        ("identity", False),
        ("deflate", False),
        ("gzip;q=0", False),
        ("identity;q=1, gzip;q=0.5", False),
    ],
)
def test_gzip_when_the_client_takes_it(agent: Running, accept: str | None, gzipped: bool) -> None:
    text = b"".join(b"line %d of a log\n" % i for i in range(50_000))
    put(agent, "log.txt", text)
    headers, raw = raw_get(agent, "log.txt", accept)
    if gzipped:
        assert headers["content-encoding"] == "gzip"
        assert "content-length" not in headers
        assert gzip.decompress(raw) == text
        assert len(raw) < len(text) / 5
    else:
        assert "content-encoding" not in headers
        assert raw == text
        assert headers["content-length"] == str(len(text))
    assert headers["vary"] == "Accept-Encoding"


def test_gzip_of_mixed_data_is_one_valid_stream(agent: Running) -> None:
    """Compressible and incompressible stretches alternate; every byte survives."""
    text = b"".join(b"row %d,some,columns\n" % i for i in range(200_000))
    noise = os.urandom(9 * MIB)
    data = text[: 3 * MIB] + noise + text + noise[:12345] + b"end"
    put(agent, "mixed.bin", data)
    headers, raw = raw_get(agent, "mixed.bin", "gzip")
    assert headers["content-encoding"] == "gzip"
    assert zlib.decompress(raw, 16 + zlib.MAX_WBITS) == data
    assert len(raw) < len(data) - len(text) // 2  # the text parts did shrink


def test_headers_of_a_download(agent: Running) -> None:
    put(agent, "notes.txt", b"x")
    r = agent.get("/files", params={"path": "notes.txt"})
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["content-disposition"] == 'inline; filename="notes.txt"'
    assert r.headers["accept-ranges"] == "bytes"
    mtime = (agent.root / "notes.txt").stat().st_mtime
    assert r.headers["last-modified"] == time.strftime(
        "%a, %d %b %Y %H:%M:%S GMT", time.gmtime(mtime)
    )
    put(agent, 'naïve "quoted".txt', b"x")
    r = agent.get("/files", params={"path": 'naïve "quoted".txt'})
    assert r.headers["content-disposition"] == (
        "inline; filename=\"na_ve _quoted_.txt\"; filename*=UTF-8''na%C3%AFve%20%22quoted%22.txt"
    )


def test_error_bodies_are_envds_json(agent: Running) -> None:
    (agent.root / "dir").mkdir()
    cases = [
        (agent.get("/files", params={"path": "missing.txt"}), 404, "missing.txt"),
        (agent.get("/files", params={"path": "dir"}), 400, "is a directory"),
        (agent.get("/files"), 400, "path query parameter is required"),
        (agent.get("/files", params={"path": ""}), 400, "path is empty"),
        (
            agent.get("/files", params={"path": "x", "username": "no-such-user"}),
            401,
            "no-such-user",
        ),
        (
            agent.post("/files", content=b"x", headers={"content-type": "text/plain"}),
            400,
            "text/plain",
        ),
        (
            agent.post(
                "/files", content=b"x", headers={"content-type": "application/octet-stream"}
            ),
            400,
            "path query parameter is required",
        ),
        (
            agent.post(
                "/files",
                params={"path": "x"},
                content=b"x",
                headers={"content-type": "application/octet-stream", "content-encoding": "br"},
            ),
            400,
            "unsupported Content-Encoding 'br'",
        ),
    ]
    for r, status, text in cases:
        assert r.status_code == status, r.text
        assert r.headers["content-type"] == "application/json; charset=utf-8"
        body = r.json()
        assert body["code"] == status
        assert text in body["message"]


def test_a_fifo_is_refused_at_once(agent: Running) -> None:
    os.mkfifo(agent.root / "pipe")
    r = agent.get("/files", params={"path": "pipe"}, timeout=5)
    assert r.status_code == 400
    assert "is not a regular file" in r.json()["message"]


# Uploads


def test_several_parts_in_one_body(agent: Running) -> None:
    r = agent.post(
        "/files",
        files=[
            ("file", ("first.txt", b"1")),
            ("other", ("ignored.txt", b"not a file part")),
            ("file", ("sub/second.txt", b"2")),
            ("file", (str(agent.root / "third.txt"), b"3")),
        ],
        data={"field": "ignored too"},
    )
    assert r.status_code == 200, r.text
    assert r.json() == [
        {"path": str(agent.root / "first.txt"), "name": "first.txt", "type": "file"},
        {"path": str(agent.root / "sub" / "second.txt"), "name": "second.txt", "type": "file"},
        {"path": str(agent.root / "third.txt"), "name": "third.txt", "type": "file"},
    ]
    assert (agent.root / "sub" / "second.txt").read_bytes() == b"2"
    assert not (agent.root / "ignored.txt").exists()


def test_the_path_parameter_wins_over_the_part_name(agent: Running) -> None:
    r = agent.post("/files", params={"path": "chosen.txt"}, files={"file": ("other.txt", b"c")})
    assert r.json()[0]["path"] == str(agent.root / "chosen.txt")
    assert not (agent.root / "other.txt").exists()


def test_unusual_file_names_in_parts(agent: Running) -> None:
    names = ['quo"te.txt', "back\\slash.txt", "ünï cödé.txt"]
    r = agent.post("/files", files=[("file", (n, n.encode())) for n in names])
    assert r.status_code == 200, r.text
    for n in names:
        assert (agent.root / n).read_bytes() == n.encode()


def test_one_path_twice_in_a_body_is_refused(agent: Running) -> None:
    r = agent.post("/files", files=[("file", ("same.txt", b"1")), ("file", ("same.txt", b"2"))])
    assert r.status_code == 400
    assert "more than one part" in r.json()["message"]
    assert (agent.root / "same.txt").read_bytes() == b"1"
    assert leftovers(agent.root) == []


def test_multipart_without_a_file_part_or_cut_short_is_refused(agent: Running) -> None:
    r = agent.post("/files", data={"just": "fields"}, files={"notfile": ("a.txt", b"x")})
    assert r.status_code == 400
    assert "no part named 'file'" in r.json()["message"]
    cut = b'--B\r\nContent-Disposition: form-data; name="file"; filename="cut.txt"\r\n\r\npartial'
    r = agent.post(
        "/files", content=cut, headers={"content-type": "multipart/form-data; boundary=B"}
    )
    assert r.status_code == 400
    assert "ended before its last boundary" in r.json()["message"]
    assert not (agent.root / "cut.txt").exists()
    assert leftovers(agent.root) == []


def test_gzip_uploads_are_inflated_and_bad_ones_leave_nothing(agent: Running) -> None:
    data = b"".join(b"entry %d\n" % i for i in range(100_000))
    headers = {"content-type": "application/octet-stream", "content-encoding": "gzip"}
    r = agent.post("/files", params={"path": "z.txt"}, content=gzip.compress(data), headers=headers)
    assert r.status_code == 200, r.text
    assert (agent.root / "z.txt").read_bytes() == data
    two = gzip.compress(b"one ") + gzip.compress(b"two")
    agent.post("/files", params={"path": "two.txt"}, content=two, headers=headers)
    assert (agent.root / "two.txt").read_bytes() == b"one two"

    for bad in (b"not gzip at all", gzip.compress(data)[:-100]):
        r = agent.post("/files", params={"path": "z.txt"}, content=bad, headers=headers)
        assert r.status_code == 400
        assert "gzip" in r.json()["message"]
    assert (agent.root / "z.txt").read_bytes() == data  # untouched by the failed uploads
    assert leftovers(agent.root) == []

    multipart = agent.post(
        "/files",
        files={"file": ("mz.txt", b"multipart, gzipped")},
    ).request
    body = gzip.compress(multipart.read())
    r = agent.post(
        "/files",
        content=body,
        headers={"content-type": multipart.headers["content-type"], "content-encoding": "gzip"},
    )
    assert r.status_code == 200, r.text
    assert (agent.root / "mz.txt").read_bytes() == b"multipart, gzipped"


def test_a_directory_or_a_file_in_the_way_is_refused(agent: Running) -> None:
    (agent.root / "a-dir").mkdir()
    (agent.root / "a-file").write_text("x")
    r = agent.post("/files", params={"path": "a-dir"}, files={"file": ("x", b"x")})
    assert r.status_code == 400
    assert "is a directory" in r.json()["message"]
    r = agent.post("/files", params={"path": "a-file/below.txt"}, files={"file": ("x", b"x")})
    assert r.status_code == 400
    assert "not a directory" in r.json()["message"]
    assert leftovers(agent.root) == []


def test_overwriting_keeps_the_permission_bits(agent: Running) -> None:
    script = put(agent, "run.sh", b"#!/bin/sh\necho one\n")
    script.chmod(0o750)
    put(agent, "run.sh", b"#!/bin/sh\necho two\n")
    assert script.stat().st_mode & 0o777 == 0o750
    assert script.read_bytes() == b"#!/bin/sh\necho two\n"


def test_an_abandoned_upload_leaves_nothing_behind(agent: Running) -> None:
    put(agent, "kept.bin", b"the old content")
    address = urlsplit(agent.url)
    with socket.create_connection((address.hostname, address.port)) as s:
        s.sendall(
            b"POST /files?path=kept.bin HTTP/1.1\r\nHost: x\r\n"
            b"X-Access-Token: " + TOKEN.encode() + b"\r\n"
            b"Content-Type: application/octet-stream\r\nContent-Length: 10485760\r\n\r\n"
        )
        s.sendall(b"x" * MIB)
        time.sleep(0.3)
    deadline = time.monotonic() + 5
    while leftovers(agent.root) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers(agent.root) == []
    assert (agent.root / "kept.bin").read_bytes() == b"the old content"


@pytest.fixture
def small_disk(agent: Running) -> Iterator[Path]:
    """A 1 MiB tmpfs inside the workspace, owned by the default user (needs mount rights)."""
    mountpoint = agent.root / "small"
    mountpoint.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size=1m,uid={NOBODY.pw_uid}", "tmpfs", str(mountpoint)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    yield mountpoint
    subprocess.run(["umount", "-l", str(mountpoint)], check=True)


def test_a_full_disk_is_507_and_leaves_the_old_file(agent: Running, small_disk: Path) -> None:
    put(agent, "small/keep.txt", b"before")
    for how in ("multipart", "octet-stream"):
        if how == "multipart":
            r = agent.post(
                "/files",
                params={"path": "small/keep.txt"},
                files={"file": ("x", os.urandom(3 * MIB))},
            )
        else:
            r = agent.post(
                "/files",
                params={"path": "small/keep.txt"},
                content=os.urandom(3 * MIB),
                headers={"content-type": "application/octet-stream"},
            )
        assert r.status_code == 507, how
        assert r.json()["code"] == 507
        assert "disk" in r.json()["message"]
        assert (small_disk / "keep.txt").read_bytes() == b"before"
        assert leftovers(small_disk) == []


# Memory stays flat while big files move


def peak_rss(pid: int) -> int:
    """The process's high-water resident set, in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def chunks(total: int, digest: "hashlib._Hash") -> Iterator[bytes]:
    block = os.urandom(MIB)
    for i in range(total // MIB):
        chunk = block[i % 7 :] + block[: i % 7]  # a different MiB each time, cheaply
        digest.update(chunk)
        yield chunk


def test_256_mib_up_and_down_with_flat_memory(agent: Running) -> None:
    put(agent, "warm.txt", b"warm up the code paths first")
    agent.get("/files", params={"path": "warm.txt"}, headers={"Accept-Encoding": "gzip"})
    before = peak_rss(agent.process.pid)

    sent = hashlib.sha256()
    r = httpx.post(
        agent.url + "/files",
        params={"path": "huge.bin"},
        content=chunks(256 * MIB, sent),
        headers={"content-type": "application/octet-stream", **AUTH},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    got = hashlib.sha256()
    for accept in ("identity", "gzip"):
        got = hashlib.sha256()
        with httpx.stream(
            "GET",
            agent.url + "/files",
            params={"path": "huge.bin"},
            headers={"Accept-Encoding": accept, **AUTH},
            timeout=120,
        ) as down:
            for piece in down.iter_bytes():
                got.update(piece)
        assert got.hexdigest() == sent.hexdigest(), accept

    grown = peak_rss(agent.process.pid) - before
    assert grown < 32 * MIB, f"the agent's peak memory grew by {grown / MIB:.1f} MiB"


def test_errors_name_the_request_in_json(agent: Running) -> None:
    r = agent.get("/files", params={"path": "/nonexistent/deep/file"})
    assert json.loads(r.content) == {
        "code": 404,
        "message": "/nonexistent/deep/file: no such file or directory",
    }


def test_what_does_not_compress_is_sent_as_it_is(agent: Running) -> None:
    """gzip is the client's offer, not an obligation: random bytes and tiny files go plain."""
    noise = os.urandom(3 * MIB)
    put(agent, "noise.bin", noise)
    put(agent, "tiny.txt", b"hi")
    put(agent, "empty.txt", b"")
    for name, data in (("noise.bin", noise), ("tiny.txt", b"hi"), ("empty.txt", b"")):
        headers, raw = raw_get(agent, name, "gzip")
        assert "content-encoding" not in headers, name
        assert headers["content-length"] == str(len(data))
        assert raw == data
