"""The `workspace-sandbox serve` command: its flags, its certificates, and mTLS end to end."""

import datetime as dt
import gc
import ipaddress
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog
from click.testing import CliRunner
from crossplane.function import runtime
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from function.fn import FunctionRunner
from function.main import cli
from tests.ports import free_port
from tests.support import request, results, wait_until_serving, xr

EXE = Path(sys.executable).parent / "workspace-sandbox"
NO_CERTS = (
    "error: serve needs mTLS certificates: set --tls-certs-dir or TLS_SERVER_CERTS_DIR to a "
    "directory with tls.crt, tls.key and ca.crt, or pass --insecure to serve without TLS\n"
)
NEEDS = "the certificates directory needs tls.crt, tls.key and ca.crt"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(
    subject: str, key: ec.EllipticCurvePrivateKey, ca_key: ec.EllipticCurvePrivateKey
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name("ca"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=subject == "ca", path_length=None), critical=True)
    )
    if subject != "ca":
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A server directory as Crossplane mounts it, and beside it a client's, one CA for both."""
    root = tmp_path_factory.mktemp("certs")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _pem(_issue("ca", ca_key, ca_key))
    for side in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        (root / side).mkdir()
        (root / side / "tls.crt").write_bytes(_pem(_issue(side, key, ca_key)))
        (root / side / "tls.key").write_bytes(_key(key))
        (root / side / "ca.crt").write_bytes(ca)
    return root


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """What `serve` hands the SDK, instead of serving; which directory it loaded, if any."""
    calls: dict[str, Any] = {"loaded": []}
    load = runtime.load_credentials

    def loaded(certs_dir: str) -> grpc.ServerCredentials:
        calls["loaded"].append(certs_dir)
        return load(certs_dir)

    monkeypatch.setattr(runtime, "load_credentials", loaded)
    monkeypatch.setattr(
        runtime, "serve", lambda function, address, **kw: calls.update(kw, fn=function, at=address)
    )
    # serve tunes the collector for a long-lived server; not for this test process.
    monkeypatch.setattr(gc, "freeze", lambda: None)
    monkeypatch.setattr(gc, "set_threshold", lambda *_: None)
    yield calls
    structlog.reset_defaults()


def invoke(args: list[str], certs_env: str | None = None) -> Any:
    # None unsets the variable, whatever the environment running the tests has.
    return CliRunner().invoke(cli, ["serve", *args], env={"TLS_SERVER_CERTS_DIR": certs_env})


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(["--tls-certs-dir", "{server}"], None, id="tls-certs-dir-as-the-sdks"),
        pytest.param(["--tls-server-certs-dir", "{server}"], None, id="tls-server-certs-dir-alias"),
        pytest.param([], "{server}", id="env-as-crossplane-sets-it"),
        pytest.param(["--tls-certs-dir", "{server}"], "{client}", id="the-flag-beats-the-env"),
    ],
)
def test_certificates_come_from_the_flag_its_alias_or_the_env(
    served: dict[str, Any], certs: Path, args: list[str], env: str | None
) -> None:
    dirs = {"server": certs / "server", "client": certs / "client"}
    result = invoke([a.format_map(dirs) for a in args], env and env.format_map(dirs))
    assert result.exit_code == 0, result.output
    assert served["loaded"] == [str(certs / "server")]
    assert isinstance(served["creds"], grpc.ServerCredentials)
    assert served["insecure"] is False


@pytest.mark.parametrize("env", [None, "{server}"], ids=["no-certs", "certs-in-env-ignored"])
def test_insecure_serves_plaintext_only(
    served: dict[str, Any], certs: Path, env: str | None
) -> None:
    result = invoke(["--insecure"], env and env.format(server=certs / "server"))
    assert result.exit_code == 0, result.output
    assert served["loaded"] == []
    assert served["creds"] is None
    assert served["insecure"] is True


def test_address_message_size_and_debug_reach_the_server(served: dict[str, Any]) -> None:
    args = ["--insecure", "--address", "127.0.0.1:7000", "--max-recv-message-size", "8", "-d"]
    result = invoke(args)
    assert result.exit_code == 0, result.output
    assert served["at"] == "127.0.0.1:7000"
    assert served["options"] == [("grpc.max_receive_message_length", 8 * 1024 * 1024)]
    assert isinstance(served["fn"], FunctionRunner)
    assert served["fn"].debug is True


def test_debug_is_off_by_default(served: dict[str, Any]) -> None:
    assert invoke(["--insecure"]).exit_code == 0
    assert served["fn"].debug is False


def test_no_certificates_and_not_insecure_is_one_line(served: dict[str, Any]) -> None:
    result = invoke([])
    assert (result.exit_code, result.stderr) == (2, NO_CERTS)
    assert "fn" not in served


@pytest.mark.parametrize("missing", ["tls.crt", "tls.key", "ca.crt"])
def test_a_missing_file_is_named(
    served: dict[str, Any], certs: Path, tmp_path: Path, missing: str
) -> None:
    for name in ("tls.crt", "tls.key", "ca.crt"):
        if name != missing:
            (tmp_path / name).write_bytes((certs / "server" / name).read_bytes())
    result = invoke([], str(tmp_path))
    want = f"error: {tmp_path / missing}: No such file or directory; {NEEDS}\n"
    assert (result.exit_code, result.stderr) == (2, want)
    assert "fn" not in served


def test_an_unreadable_file_is_named(served: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "tls.crt").mkdir()
    result = invoke(["--tls-certs-dir", str(tmp_path)])
    want = f"error: {tmp_path / 'tls.crt'}: Is a directory; {NEEDS}\n"
    assert (result.exit_code, result.stderr) == (2, want)
    assert "fn" not in served


def test_a_missing_directory_is_named(served: dict[str, Any], tmp_path: Path) -> None:
    result = invoke(["--tls-certs-dir", str(tmp_path / "tls")])
    want = f"error: {tmp_path / 'tls'}: no such directory; {NEEDS}\n"
    assert (result.exit_code, result.stderr) == (2, want)
    assert "fn" not in served


def test_a_file_that_is_not_pem_is_named(
    served: dict[str, Any], certs: Path, tmp_path: Path
) -> None:
    # gRPC would accept it here and fail later with "Failed to bind to address".
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).write_bytes((certs / "server" / name).read_bytes())
    (tmp_path / "ca.crt").write_text("ca\n")
    result = invoke([], str(tmp_path))
    want = f"error: {tmp_path / 'ca.crt'}: not PEM-encoded; {NEEDS}\n"
    assert (result.exit_code, result.stderr) == (2, want)
    assert "fn" not in served


def _environ(certs_dir: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TLS_SERVER_CERTS_DIR"}
    if certs_dir:
        env["TLS_SERVER_CERTS_DIR"] = str(certs_dir)
    return {**env, "PYTHONUNBUFFERED": "1"}


def test_the_process_exits_with_the_line_and_no_traceback() -> None:
    run = subprocess.run(
        [str(EXE), "serve", "--address", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        env=_environ(None),
        timeout=60,
        check=False,
    )
    assert (run.returncode, run.stderr, run.stdout) == (2, NO_CERTS, "")


def _client(certs: Path, *, with_cert: bool) -> grpc.ChannelCredentials:
    client = certs / "client"
    if not with_cert:
        return grpc.ssl_channel_credentials((client / "ca.crt").read_bytes())
    return grpc.ssl_channel_credentials(
        (client / "ca.crt").read_bytes(),
        (client / "tls.key").read_bytes(),
        (client / "tls.crt").read_bytes(),
    )


@pytest.fixture(scope="module")
def mtls_address(certs: Path) -> Iterator[str]:
    """`serve` as Crossplane runs it: certificates from TLS_SERVER_CERTS_DIR, no flags."""
    addr = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [str(EXE), "serve", "--address", addr],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_environ(certs / "server"),
    )
    try:
        with grpc.secure_channel(addr, _client(certs, with_cert=True)) as channel:
            wait_until_serving(proc, channel)
        yield addr
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_mtls_answers_a_caller_with_a_certificate_from_the_ca(
    mtls_address: str, certs: Path
) -> None:
    with grpc.secure_channel(mtls_address, _client(certs, with_cert=True)) as channel:
        rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request(xr()), timeout=10)
    assert not results(rsp)
    assert "vm" in rsp.desired.resources


def test_mtls_refuses_a_caller_without_a_certificate(mtls_address: str, certs: Path) -> None:
    with grpc.secure_channel(mtls_address, _client(certs, with_cert=False)) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.RunFunction(request(xr()), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
