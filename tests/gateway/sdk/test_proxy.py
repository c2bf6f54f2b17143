"""The data plane: streaming both ways, big files, internal paths, unknown sandboxes."""

import getpass
import gzip
import hashlib
import io
import os
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from e2b import Sandbox

from tests.gateway.sdk.gateways import Gateway

pytestmark = pytest.mark.e2e  # starts agents or gateways

MIB = 1024 * 1024


def test_output_streams_live_through_the_proxy(sandbox: Sandbox) -> None:
    arrivals: list[tuple[float, str]] = []
    started = time.monotonic()
    sandbox.commands.run(
        "echo first; sleep 3; echo second",
        on_stdout=lambda line: arrivals.append((time.monotonic() - started, line)),
    )
    ended = time.monotonic() - started
    assert [line.strip() for _, line in arrivals] == ["first", "second"]
    assert arrivals[0][0] < ended - 2, "the first line waited for the command to end"


def test_eight_mib_both_ways(sandbox: Sandbox) -> None:
    data = os.urandom(8 * 1024 * 1024 + 123)
    sandbox.files.write("big.bin", data)  # multipart
    assert bytes(sandbox.files.read("big.bin", format="bytes")) == data
    sandbox.files.write("big-stream.bin", io.BytesIO(data))  # octet-stream, chunked
    assert bytes(sandbox.files.read("big-stream.bin", format="bytes")) == data
    assert sandbox.commands.run("wc -c < big-stream.bin").stdout.strip() == str(len(data))


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


@pytest.mark.slow
def test_the_gateway_s_memory_stays_flat_for_hundreds_of_mib(
    sandbox: Sandbox, gateway: Gateway, tmp_path: Path
) -> None:
    size = 256 * MIB
    source = tmp_path / "big.bin"
    digest = hashlib.sha256()
    with source.open("wb") as out:
        block = os.urandom(MIB)
        for i in range(size // MIB):
            piece = i.to_bytes(4, "big") + block[4:]
            digest.update(piece)
            out.write(piece)
    before = _rss(gateway.process.pid)
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss(gateway.process.pid))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with source.open("rb") as f:
            sandbox.files.write("huge.bin", f)
        back = hashlib.sha256()
        for chunk in sandbox.files.read("huge.bin", format="stream"):
            back.update(chunk)
    finally:
        done.set()
        sampler.join()
    assert back.hexdigest() == digest.hexdigest()
    # Buffering either body would hold 256 MiB; streaming holds a few reads' worth.
    assert peak - before < 48 * MIB, f"the gateway grew by {(peak - before) // MIB} MiB"


def test_compressed_downloads_pass_through_as_they_are(sandbox: Sandbox, gateway_url: str) -> None:
    text = b"the same line, again and again\n" * 20000
    sandbox.files.write("text.txt", text)
    signed = urlsplit(sandbox.download_url("text.txt"))
    url = f"{gateway_url}{signed.path}?{signed.query}"
    headers = {"E2b-Sandbox-Id": sandbox.sandbox_id}
    with httpx.stream("GET", url, headers={**headers, "Accept-Encoding": "gzip"}) as answer:
        raw = b"".join(answer.iter_raw())
    assert answer.headers["content-encoding"] == "gzip"
    assert len(raw) < len(text) // 10, "the proxy inflated the agent's gzip"
    assert gzip.decompress(raw) == text
    with httpx.stream("GET", url, headers={**headers, "Accept-Encoding": "identity"}) as answer:
        plain = b"".join(answer.iter_raw())
    assert "content-encoding" not in answer.headers
    assert plain == text


def test_a_signed_url_without_the_sandbox_s_header_says_why(sandbox: Sandbox) -> None:
    """Over plain HTTP the SDK's signed URLs carry no sandbox ID: a browser that opens one is
    told so, never that its API key is wrong."""
    sandbox.files.write("a.txt", "hello")
    for answer in (
        httpx.get(sandbox.download_url("a.txt")),
        httpx.post(sandbox.upload_url("b.txt"), files={"file": ("b.txt", b"up")}),
    ):
        assert answer.status_code == 421, answer.text
        message = answer.json()["message"]
        assert "names no sandbox" in message and "49983-<sandbox id>.<domain>" in message
    assert not sandbox.files.exists("b.txt")


def test_init_is_refused_from_outside(sandbox: Sandbox, gateway_url: str) -> None:
    for path in ("/init", "/freeze", "/unfreeze", "/fsfreeze", "/fsthaw", "/collapse"):
        answer = httpx.post(
            gateway_url + path,
            json={"accessToken": "taken", "envVars": {"EVIL": "1"}},
            headers={"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49983"},
        )
        assert answer.status_code == 403, path
        assert answer.json()["code"] == 403
    # The sandbox's token and environment are as the gateway set them.
    assert sandbox.commands.run("echo ${EVIL:-unset}").stdout == "unset\n"


def test_an_unknown_sandbox_answers_e2b_s_502(gateway_url: str) -> None:
    # A token of a sandbox since killed, say: without one, 401 before any look-up.
    headers = {"E2b-Sandbox-Id": "nosuchsandbox", "X-Access-Token": "0" * 64}
    answer = httpx.get(gateway_url + "/health", headers=headers)
    assert answer.status_code == 502
    assert answer.json() == {
        "sandboxId": "nosuchsandbox",
        "message": "The sandbox was not found",
        "code": 502,
    }


def test_host_routing_reaches_the_sandbox(sandbox: Sandbox, gateway_url: str, key: str) -> None:
    host = {"Host": f"49983-{sandbox.sandbox_id}.e2b.localhost"}
    token = {"X-Access-Token": sandbox._envd_access_token or ""}  # where the SDK keeps it
    health = httpx.get(gateway_url + "/health", headers={**host, **token})
    assert health.status_code == 204
    assert httpx.get(gateway_url + "/health", headers=host).status_code == 401
    api = httpx.get(
        gateway_url + f"/sandboxes/{sandbox.sandbox_id}",
        headers={"Host": "api.e2b.localhost", "X-API-Key": key},
    )
    assert api.status_code == 200
    assert api.json()["sandboxID"] == sandbox.sandbox_id


def test_the_agent_needs_the_sandbox_s_token(sandbox: Sandbox, gateway_url: str) -> None:
    answer = httpx.post(
        gateway_url + "/process.Process/List",
        json={},
        headers={"E2b-Sandbox-Id": sandbox.sandbox_id, "Connect-Protocol-Version": "1"},
    )
    assert answer.status_code == 401


def test_internal_paths_stay_refused_however_spelled(sandbox: Sandbox, gateway_url: str) -> None:
    for path in ("//init", "/%69nit", "/files/../init", "/init/"):
        answer = httpx.post(
            gateway_url + path,
            json={"accessToken": "taken"},
            headers={"E2b-Sandbox-Id": sandbox.sandbox_id},
        )
        assert answer.status_code in {403, 404}, path
    assert sandbox.commands.run("echo still mine").stdout == "still mine\n"


def test_the_user_a_command_names_reaches_the_agent(sandbox: Sandbox) -> None:
    """`user=` travels as envd's `Authorization: Basic`, which the gateway passes on (it drops
    any other `Authorization`, a Kubernetes token among them). As root (CI) the local agents
    act as anyone, so another user than the default one shows it; elsewhere only their own."""
    other = "nobody" if os.geteuid() == 0 else getpass.getuser()
    ran = sandbox.commands.run("id -un", user=other, cwd="/")
    assert ran.stdout == f"{other}\n"


def test_a_target_that_is_no_path_never_names_another_host(
    sandbox: Sandbox, gateway_url: str
) -> None:
    """`*@host:port/path` (which httptools passes on) must not become the agent's URL's
    userinfo: with the caller's own token, the gateway would have sent it anywhere it reaches."""
    with socket.create_server(("127.0.0.1", 0)) as sink:
        sink.settimeout(0.5)
        port = sink.getsockname()[1]
        host, gateway_port = urlsplit(gateway_url).hostname, urlsplit(gateway_url).port
        assert host is not None and gateway_port is not None
        token = sandbox._envd_access_token or ""  # where the SDK keeps it
        for target in (f"*@127.0.0.1:{port}/init", f"*@127.0.0.1:{port}/x", "*", "x/files"):
            with socket.create_connection((host, gateway_port), timeout=5) as client:
                head = (
                    f"POST {target} HTTP/1.1\r\nHost: {host}\r\n"
                    f"E2b-Sandbox-Id: {sandbox.sandbox_id}\r\nX-Access-Token: {token}\r\n"
                    "Content-Length: 2\r\nConnection: close\r\n\r\n{}"
                )
                client.sendall(head.encode())
                answer = b""
                while chunk := client.recv(65536):
                    answer += chunk
            assert answer.split(b"\r\n", 1)[0] in {
                b"HTTP/1.1 400 Bad Request",
                b"HTTP/1.1 404 Not Found",
            }, (target, answer[:200])
            with pytest.raises(TimeoutError):
                sink.accept()
