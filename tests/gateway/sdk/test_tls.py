"""Production-shaped: the SDK finds the gateway by `E2B_DOMAIN` alone, over HTTPS on port 443.

No `E2B_API_URL` and no `E2B_SANDBOX_URL`: the SDK calls `https://api.<domain>` for the
control API and `https://49983-<id>.<domain>` for each sandbox, so the gateway's routing by
Host and its TLS are both on the path. `*.localhost` names need no DNS (the SDK's resolver maps
them to the loopback address), and the test CA reaches the SDK through `SSL_CERT_FILE`. The
port is 443 because the SDK has no way to be told another one: the test needs root and a free
port 443, and says so when it skips.
"""

import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.gateway.sdk.gateways import API_KEY, GATEWAY

pytestmark = pytest.mark.e2e  # starts agents or gateways

DOMAIN = "e2b.localhost"
PORT = 443


def _port_free() -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", PORT))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The test CA's certificate; the gateway serves one it signed, on 127.0.0.1:443."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the SDK reaches a domain on port 443 only")
    if not _port_free():
        pytest.skip("127.0.0.1:443 is taken; the SDK reaches a domain on port 443 only")
    certs = pytest.importorskip("tests.gateway.sdk.certs", reason="needs cryptography")
    files = certs.make(tmp_path_factory.mktemp("tls"), [f"*.{DOMAIN}", DOMAIN])
    command = [
        str(GATEWAY),
        "--local",
        "--address",
        f"127.0.0.1:{PORT}",
        "--api-key",
        API_KEY,
        "--domain",
        DOMAIN,
        "--tls-cert",
        str(files.cert),
        "--tls-key",
        str(files.key),
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen(command)
    try:
        _wait_for(process, ssl.create_default_context(cafile=files.ca))
        yield files.ca
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_for(process: "subprocess.Popen[bytes]", trusted: ssl.SSLContext) -> None:
    deadline = time.monotonic() + 15
    while True:
        if process.poll() is not None:
            pytest.fail(f"the gateway exited with {process.returncode} before answering")
        try:
            _get_api(trusted, "/sandboxes")
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                pytest.fail("the gateway did not answer over HTTPS within 15 s")
            time.sleep(0.05)


def _get_api(verify: ssl.SSLContext | bool, path: str) -> httpx.Response:
    """A control API call to 127.0.0.1:443, named api.<domain> in SNI and Host."""
    with httpx.Client(verify=verify, timeout=5) as client:
        return client.get(
            f"https://127.0.0.1:{PORT}{path}",
            headers={"Host": f"api.{DOMAIN}", "X-API-Key": API_KEY},
            extensions={"sni_hostname": f"api.{DOMAIN}"},
        )


# The SDK reads SSL_CERT_FILE once per process, when it first builds a transport, and keeps
# its transports for the life of the process: so it runs in a process of its own, as for a user.
SDK_RUN = """
import json, sys
from e2b import Sandbox
sandbox = Sandbox.create()
seen = {"id": sandbox.sandbox_id, "host": sandbox.get_host(49983)}
try:
    done = sandbox.commands.run("echo $((6 * 7)); echo oops >&2")
    seen["run"] = [done.exit_code, done.stdout, done.stderr]
    sandbox.files.write("/tmp/tls.txt", "over TLS\\n")
    seen["read"] = sandbox.files.read("/tmp/tls.txt")
    seen["listed"] = [s.sandbox_id for s in Sandbox.list().next_items()]
finally:
    sandbox.kill()
seen["running_after_kill"] = sandbox.is_running()
json.dump(seen, sys.stdout)
"""


def test_the_certificate_is_the_one_served(ca: Path) -> None:
    assert _get_api(ssl.create_default_context(cafile=ca), "/v2/sandboxes").json() == []
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        _get_api(ssl.create_default_context(), "/v2/sandboxes")


def _run_sdk(ca: Path | None) -> "subprocess.CompletedProcess[str]":
    """SDK_RUN with only the production settings: the domain, the key and maybe the CA."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.pop("SSL_CERT_FILE", None)
    env |= {"E2B_DOMAIN": DOMAIN, "E2B_API_KEY": API_KEY}
    if ca is not None:
        env["SSL_CERT_FILE"] = str(ca)
    return subprocess.run(
        [sys.executable, "-c", SDK_RUN],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_sdk_by_domain_alone(ca: Path) -> None:
    done = _run_sdk(ca)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    assert seen["host"] == f"49983-{seen['id']}.{DOMAIN}"
    assert seen["run"] == [0, "42\n", "oops\n"]
    assert seen["read"] == "over TLS\n"
    assert seen["listed"] == [seen["id"]]
    assert seen["running_after_kill"] is False


@pytest.mark.usefixtures("ca")
def test_without_the_ca_the_sdk_refuses_the_gateway() -> None:
    done = _run_sdk(None)
    assert done.returncode != 0
    assert "UnknownIssuer" in done.stderr or "CERTIFICATE_VERIFY_FAILED" in done.stderr
