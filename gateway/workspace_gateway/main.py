"""`workspace-sandbox-gateway`: E2B's control API and the sandboxes' data plane on one address."""

import argparse
import asyncio
import getpass
import logging
import re
import secrets
import shutil
import socket
import ssl
import sys
from pathlib import Path

import uvicorn

from workspace_gateway import __version__, proxy
from workspace_gateway.app import build_app
from workspace_gateway.local_backend import LocalBackend

AGENT = "workspace-sandbox-agent"
# Far above the SDK's 50 s keepalive pings and its 300 s idle connection pool.
KEEP_ALIVE_SECONDS = 640
SHUTDOWN_GRACE_SECONDS = 3
DOMAIN = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")

log = logging.getLogger("workspace_gateway")


def address(text: str) -> tuple[str, int]:
    """HOST:PORT, with IPv6 hosts in brackets."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:  # noqa: PLR2004
        msg = f"{text!r} is not HOST:PORT"
        raise argparse.ArgumentTypeError(msg)
    return host.strip("[]"), int(port)


def api_key(text: str) -> str:
    # Older SDKs refuse a key of any other shape before sending it.
    if not re.fullmatch(r"e2b_[0-9a-f]+", text):
        msg = "an API key is e2b_ followed by lower-case hex digits"
        raise argparse.ArgumentTypeError(msg)
    return text


def domain(text: str) -> str:
    if not DOMAIN.fullmatch(text):
        msg = f"{text!r} is not a domain name"
        raise argparse.ArgumentTypeError(msg)
    return text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="workspace-sandbox-gateway",
        description="Serve E2B's control API and proxy to each sandbox's agent, on one address.",
    )
    p.add_argument(
        "--local",
        action="store_true",
        help="sandboxes are agent processes on this machine (no isolation: development only)",
    )
    p.add_argument("--address", type=address, required=True, help="HOST:PORT to listen on")
    p.add_argument("--api-key", type=api_key, help="the API key (default: a new one, printed)")
    p.add_argument(
        "--domain",
        type=domain,
        default="e2b.localhost",
        help="the sandboxes' domain, returned to the SDK; hosts <port>-<id>.DOMAIN reach a "
        "sandbox (default e2b.localhost)",
    )
    p.add_argument(
        "--tls-cert",
        type=Path,
        metavar="FILE",
        help="serve HTTPS with this PEM certificate chain (for *.DOMAIN and api.DOMAIN); "
        "needs --tls-key",
    )
    p.add_argument("--tls-key", type=Path, metavar="FILE", help="the PEM private key of --tls-cert")
    p.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


class TLSError(Exception):
    """The certificate or key can't be served; the message says which and why."""


def check_tls(cert: Path | None, key: Path | None) -> None:
    """Fail with one line now, rather than with uvicorn's traceback at startup.

    Both files are read as uvicorn will read them, so a key that doesn't match the
    certificate is caught here too.
    """
    if (cert is None) != (key is None):
        raise TLSError("--tls-cert and --tls-key go together: give both, or neither for HTTP")
    if cert is None or key is None:
        return
    for flag, path, kind in (
        ("--tls-cert", cert, b"CERTIFICATE-----"),
        ("--tls-key", key, b"PRIVATE KEY-----"),
    ):
        try:
            pem = path.read_bytes()
        except OSError as err:
            raise TLSError(f"{flag} {path}: {err.strerror}") from None
        if b"-----BEGIN " not in pem:
            raise TLSError(f"{flag} {path}: not PEM-encoded")
        if kind not in pem:
            what = "certificate" if flag == "--tls-cert" else "private key"
            raise TLSError(f"{flag} {path}: holds no PEM {what}")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except ssl.SSLError as err:
        why = (
            "the key is not the certificate's"
            if err.reason == "KEY_VALUES_MISMATCH"
            else "the PEM data is damaged"
        )
        raise TLSError(f"--tls-cert {cert} with --tls-key {key}: {why}") from None


def find_agent() -> Path | None:
    beside = Path(sys.executable).with_name(AGENT)
    if beside.exists():
        return beside
    found = shutil.which(AGENT)
    return Path(found) if found else None


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if not args.local:
        sys.exit("workspace-sandbox-gateway: only --local is available so far")
    try:
        check_tls(args.tls_cert, args.tls_key)
    except TLSError as err:
        sys.exit(f"workspace-sandbox-gateway: {err}")
    agent = find_agent()
    if agent is None:
        sys.exit(f"workspace-sandbox-gateway: {AGENT} is neither beside Python nor on PATH")
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    # One line per proxied request is the access log's job (`--log-level debug`), not httpx's.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    key = args.api_key or f"e2b_{secrets.token_hex(20)}"
    if not args.api_key:
        print(f"API key: {key}", flush=True)  # noqa: T201
    log.warning(
        "local mode: sandboxes are processes of this user on this machine, with no isolation"
    )
    asyncio.run(serve(LocalBackend(agent, getpass.getuser()), args, key))


async def serve(backend: LocalBackend, args: argparse.Namespace, key: str) -> None:
    host, port = args.address
    http = proxy.client()
    config = uvicorn.Config(
        build_app(backend, http, api_key=key, domain=args.domain),
        host=host,
        port=port,
        http="httptools",
        lifespan="off",
        log_level=args.log_level,
        access_log=args.log_level == "debug",
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        server_header=False,
        ssl_certfile=args.tls_cert,
        ssl_keyfile=args.tls_key,
    )
    reaper = asyncio.create_task(backend.reap_forever())
    scheme = "https" if args.tls_cert else "http"
    log.info("serving %s on %s:%d, domain %s", scheme, host, port, args.domain)
    try:
        await Server(config, backend).serve()
    finally:
        reaper.cancel()
        await backend.close()
        await http.aclose()


class Server(uvicorn.Server):
    """uvicorn's server, which stops every sandbox when it shuts down.

    After a signal uvicorn re-raises it once `serve` returns, so a `finally` there may not run.
    """

    def __init__(self, config: uvicorn.Config, backend: LocalBackend) -> None:
        super().__init__(config)
        self.backend = backend

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.backend.close()
        await super().shutdown(sockets)
