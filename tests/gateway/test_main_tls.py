"""`--tls-cert` and `--tls-key`: HTTPS when both are given, one clear line when they can't be used."""

import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.gateway.sdk import certs
from tests.ports import free_port

pytestmark = pytest.mark.e2e  # starts agents or gateways

GATEWAY = Path(sys.executable).with_name("workspace-sandbox-gateway")
KEY = "e2b_" + "ab" * 20


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> certs.Files:
    return certs.make(tmp_path_factory.mktemp("tls"), ["*.example.test", "example.test"])


def refusal(*args: str) -> str:
    """The gateway's one-line complaint about these TLS arguments."""
    command = [str(GATEWAY), "--local", "--address", "127.0.0.1:1", *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr.strip()


def test_one_without_the_other_is_refused(files: certs.Files) -> None:
    for args in (["--tls-cert", str(files.cert)], ["--tls-key", str(files.key)]):
        assert "--tls-cert and --tls-key go together" in refusal(*args)


def test_unreadable_files_are_named(files: certs.Files, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    message = refusal("--tls-cert", str(missing), "--tls-key", str(files.key))
    assert message.endswith(f"--tls-cert {missing}: No such file or directory")
    message = refusal("--tls-cert", str(files.cert), "--tls-key", str(tmp_path))
    assert message.endswith(f"--tls-key {tmp_path}: Is a directory")


def test_files_that_are_not_pem_or_not_a_pair_are_refused(
    files: certs.Files, tmp_path: Path
) -> None:
    der = tmp_path / "cert.der"
    der.write_bytes(ssl.PEM_cert_to_DER_cert(files.cert.read_text()))
    message = refusal("--tls-cert", str(der), "--tls-key", str(files.key))
    assert message.endswith(f"--tls-cert {der}: not PEM-encoded")
    message = refusal("--tls-cert", str(files.cert), "--tls-key", str(files.cert))
    assert message.endswith(f"--tls-key {files.cert}: holds no PEM private key")
    message = refusal("--tls-cert", str(files.key), "--tls-key", str(files.key))
    assert message.endswith(f"--tls-cert {files.key}: holds no PEM certificate")
    message = refusal("--tls-cert", str(files.ca), "--tls-key", str(files.key))
    assert message.endswith("the key is not the certificate's")
    damaged = tmp_path / "damaged.pem"
    damaged.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    message = refusal("--tls-cert", str(damaged), "--tls-key", str(files.key))
    assert message.endswith("the PEM data is damaged")


def test_with_both_it_serves_https_only(files: certs.Files) -> None:
    port = free_port()
    process = subprocess.Popen(
        [
            GATEWAY,
            "--local",
            "--address",
            f"127.0.0.1:{port}",
            "--api-key",
            KEY,
            "--domain",
            "example.test",
            "--tls-cert",
            files.cert,
            "--tls-key",
            files.key,
            "--log-level",
            "warning",
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        trusted = httpx.Client(verify=ssl.create_default_context(cafile=files.ca), timeout=5)
        deadline = time.monotonic() + 15
        while True:
            try:
                answer = trusted.get(
                    f"https://127.0.0.1:{port}/v2/sandboxes",
                    headers={"X-API-Key": KEY, "Host": "api.example.test"},
                    extensions={"sni_hostname": "api.example.test"},
                )
                break
            except httpx.ConnectError:
                assert process.poll() is None, "the gateway exited"
                assert time.monotonic() < deadline, "no HTTPS answer within 15 s"
                time.sleep(0.05)
        assert (answer.status_code, answer.json()) == (200, [])
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/v2/sandboxes", headers={"X-API-Key": KEY})
        trusted.close()
    finally:
        process.terminate()
        process.wait(15)
