"""`workspace-sandbox-gateway`: E2B's control API and the sandboxes' data plane on one address."""

import argparse
import asyncio
import getpass
import logging
import re
import shutil
import socket
import ssl
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn

from workspace_gateway import __version__, exposition, http_protocol, previews, proxy
from workspace_gateway.app import build_app
from workspace_gateway.backend import ServedBackend, always, reap_forever, refill_forever
from workspace_gateway.keys import KEY, Keys, StaticKeys, new_key
from workspace_gateway.local_backend import LocalBackend, Pool, Temperature
from workspace_gateway.metrics import Metrics

if TYPE_CHECKING:  # the cluster mode's, which --local never imports
    from workspace_gateway.kubernetes.lease import Elector

AGENT = "workspace-sandbox-agent"
LOCAL_NAMESPACE = "local"
# Far above the SDK's 50 s keepalive pings and its 300 s idle connection pool.
KEEP_ALIVE_SECONDS = 640
SHUTDOWN_GRACE_SECONDS = 3
MAX_LOCAL_POOL = 64  # each member is an agent process on this machine
MAX_HEAD_TIMEOUT = 600
MAX_STREAM_CAP = 1 << 20
DOMAIN = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")

log = logging.getLogger("workspace_gateway")


def address(text: str) -> tuple[str, int]:
    """HOST:PORT, with IPv6 hosts in brackets."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:  # noqa: PLR2004  # the port range
        msg = f"{text!r} is not HOST:PORT"
        raise argparse.ArgumentTypeError(msg)
    return host.strip("[]"), int(port)


def api_key(text: str) -> str:
    # Older SDKs refuse a key of any other shape before sending it.
    if not KEY.fullmatch(text):
        msg = "an API key is e2b_ followed by 40 lower-case hex digits"
        raise argparse.ArgumentTypeError(msg)
    return text


def pool_size(text: str) -> int:
    if not text.isdigit() or int(text) > MAX_LOCAL_POOL:
        msg = f"{text!r} is not a pool size from 0 to {MAX_LOCAL_POOL}"
        raise argparse.ArgumentTypeError(msg)
    return int(text)


def stream_cap(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) <= MAX_STREAM_CAP:
        msg = f"{text!r} is not a number of streams from 1 to {MAX_STREAM_CAP}"
        raise argparse.ArgumentTypeError(msg)
    return int(text)


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= MAX_HEAD_TIMEOUT:
        msg = f"{text!r} is not a number of seconds above 0, at most {MAX_HEAD_TIMEOUT}"
        raise argparse.ArgumentTypeError(msg)
    return value


def domain(text: str) -> str:
    if not DOMAIN.fullmatch(text):
        msg = f"{text!r} is not a domain name"
        raise argparse.ArgumentTypeError(msg)
    return text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="workspace-sandbox-gateway",
        description="Serve E2B's control API and proxy to each sandbox's agent, on one address.",
        epilog="API keys in a cluster: workspace-sandbox-gateway keys --help",
    )
    p.add_argument(
        "--local",
        action="store_true",
        help="sandboxes are agent processes on this machine (no isolation: development only)",
    )
    p.add_argument(
        "--kubernetes",
        action="store_true",
        help="sandboxes are WorkspaceSandboxes in each key's namespace; keys are Secrets",
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
        "--metrics-address",
        type=address,
        metavar="HOST:PORT",
        help="serve Prometheus' /metrics on this second, plain-HTTP listener (default: none); "
        "never on --address",
    )
    p.add_argument(
        "--head-timeout",
        type=seconds,
        default=http_protocol.HEAD_SECONDS,
        metavar="SECONDS",
        help="how long a request's head (line and headers, at most "
        f"{http_protocol.MAX_HEAD_BYTES // 1024} KiB) may take to arrive: from the connection "
        "for its first, from its first byte for the next (default "
        f"{http_protocol.HEAD_SECONDS:.0f})",
    )
    p.add_argument(
        "--max-streams",
        type=stream_cap,
        default=proxy.MAX_STREAMS,
        metavar="N",
        help="data-plane requests under way at once, in all; one more is answered 429 "
        f"(default {proxy.MAX_STREAMS})",
    )
    p.add_argument(
        "--max-tenant-streams",
        type=stream_cap,
        default=proxy.MAX_TENANT_STREAMS,
        metavar="N",
        help="the same, per namespace of the sandboxes reached "
        f"(default {proxy.MAX_TENANT_STREAMS})",
    )
    local = p.add_argument_group("--local")
    local.add_argument(
        "--pool-size",
        type=pool_size,
        default=0,
        metavar="N",
        help="keep N sandboxes of template base made ahead, so a create takes one (default 0)",
    )
    local.add_argument(
        "--pool-temperature",
        choices=[t.value for t in Temperature],
        default=Temperature.RUNNING.value,
        help="running: agents started, answer at once; suspended: started once, then stopped, "
        "and started again at hand-out (default running)",
    )
    cluster = p.add_argument_group("--kubernetes")
    cluster.add_argument("--templates", type=Path, help="the template mapping file (YAML)")
    cluster.add_argument(
        "--token-seed-file",
        type=Path,
        help="a file (a mounted Secret) with the seed every sandbox's access token derives from",
    )
    cluster.add_argument(
        "--agent-port", type=int, default=49983, help="SandboxPlatform gateway.agentPort"
    )
    cluster.add_argument(
        "--gateway-namespace", help="where the key Secrets and the reaper's Lease are"
    )
    cluster.add_argument(
        "--auth",
        choices=["api-keys", "kubernetes-tokens"],
        default="api-keys",
        help="how callers are known: API keys (Secrets, the default), or ServiceAccount/OIDC "
        "tokens checked with TokenReview and SubjectAccessReview",
    )
    cluster.add_argument(
        "--token-audience",
        action="append",
        default=[],
        metavar="AUDIENCE",
        help="with kubernetes-tokens: accept only tokens for this audience (repeatable)",
    )
    cluster.add_argument("--kubeconfig", help="default: KUBECONFIG, ~/.kube, else in-cluster")
    cluster.add_argument("--context", help="the kubeconfig context")
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
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["keys"]:
        from workspace_gateway.kubernetes import keys_cli  # noqa: PLC0415  # only the keys command needs it

        keys_cli.main(argv[1:])
        return
    if argv[:1] == ["adopt"]:
        from workspace_gateway.kubernetes import adopt_cli  # noqa: PLC0415  # only this command needs it

        adopt_cli.main(argv[1:])
        return
    args = parser().parse_args(argv)
    if args.local == args.kubernetes:
        sys.exit("workspace-sandbox-gateway: give exactly one of --local and --kubernetes")
    try:
        check_tls(args.tls_cert, args.tls_key)
    except TLSError as err:
        sys.exit(f"workspace-sandbox-gateway: {err}")
    if args.kubernetes and (args.pool_size or args.pool_temperature != Temperature.RUNNING):
        sys.exit(
            "workspace-sandbox-gateway: --pool-size and --pool-temperature go with --local; "
            "a cluster's pools are set per template"
        )
    setup_logging(args.log_level)
    if args.kubernetes:
        from workspace_gateway.kubernetes import main as kubernetes_main  # noqa: PLC0415  # only the cluster mode needs it

        metrics = Metrics()
        backend, cluster_keys, elector = kubernetes_main.open_cluster(args, metrics)
        asyncio.run(serve(backend, args, cluster_keys, elector, metrics=metrics))
        return
    if args.auth != "api-keys" or args.token_audience:
        sys.exit("workspace-sandbox-gateway: --local takes API keys only (--api-key)")
    agent = find_agent()
    if agent is None:
        sys.exit(f"workspace-sandbox-gateway: {AGENT} is neither beside Python nor on PATH")
    key = args.api_key or new_key()
    if not args.api_key:
        print(f"API key: {key}", flush=True)  # noqa: T201  # the operator must see the key
    log.warning(
        "local mode: sandboxes are processes of this user on this machine, with no isolation"
    )
    keys = StaticKeys({key: LOCAL_NAMESPACE})
    metrics = Metrics()
    pool = Pool(args.pool_size, Temperature(args.pool_temperature))
    pools = {(LOCAL_NAMESPACE, "base"): pool} if args.pool_size else {}
    local = LocalBackend(agent, getpass.getuser(), metrics=metrics, pools=pools)
    metrics_port = args.metrics_address[1] if args.metrics_address else 0
    local.reserved = {p for p in (args.address[1], metrics_port) if p}
    log.warning(
        "local mode: a preview (<port>-<id>.%s, or E2b-Sandbox-Port) reaches that port of this "
        "machine's loopback, whichever process listens there",
        args.domain,
    )
    asyncio.run(serve(local, args, keys, metrics=metrics))


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(levelname)s %(name)s: %(message)s")
    # One line per proxied request is the access log's job (`--log-level debug`), not httpx's.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    # The audit log: bare JSON lines on stdout, for a log shipper to read as they are.
    audit = logging.getLogger("workspace_gateway.audit")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    audit.addHandler(handler)
    audit.propagate = False


async def serve(
    backend: ServedBackend,
    args: argparse.Namespace,
    keys: Keys,
    elector: "Elector | None" = None,
    metrics: Metrics | None = None,
) -> None:
    """Serve until stopped, and `/metrics` on `--metrics-address` when given.

    With an elector (several replicas), only its leader reaps and tops the pools up.
    """
    metrics = metrics or Metrics()
    metrics_server = None
    metrics_sockets = []
    if args.metrics_address is not None:
        try:
            metrics_sockets.append(exposition.bind(*args.metrics_address))
        except OSError as e:
            sys.exit(f"workspace-sandbox-gateway: --metrics-address: {e.strerror}")
        metrics_server = exposition.metrics_server(metrics, args.log_level)
    host, port = args.address
    http = proxy.client()
    config = uvicorn.Config(
        build_app(
            backend,
            http,
            keys=keys,
            domain=args.domain,
            streams=proxy.Streams(args.max_streams, args.max_tenant_streams),
        ),
        host=host,
        port=port,
        http=http_protocol.bounded(args.head_timeout),
        # Previews' WebSockets (`previews`), relayed message by message: no compression to
        # undo and redo, and the client's own pings, not the gateway's.
        ws="websockets-sansio",
        ws_per_message_deflate=False,
        ws_ping_interval=None,
        ws_max_size=previews.MAX_MESSAGE_BYTES,
        lifespan="off",
        log_level=args.log_level,
        access_log=args.log_level == "debug",
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        server_header=False,
        ssl_certfile=args.tls_cert,
        ssl_keyfile=args.tls_key,
    )
    if elector is not None:
        elector.start()
    leading = elector.leading if elector is not None else always
    reaper = asyncio.create_task(reap_forever(backend, leading))
    refiller = asyncio.create_task(refill_forever(backend, leading))
    metrics_task = None
    if metrics_server is not None:
        metrics_task = asyncio.create_task(metrics_server.serve(metrics_sockets))
        log.info("serving /metrics on %s:%d", *args.metrics_address)
    scheme = "https" if args.tls_cert else "http"
    log.info("serving %s on %s:%d, domain %s", scheme, host, port, args.domain)
    try:
        await Server(config, backend, elector, metrics_server).serve()
    finally:
        reaper.cancel()
        refiller.cancel()
        if metrics_server is not None and metrics_task is not None:
            metrics_server.should_exit = True
            await metrics_task
        if elector is not None:
            await elector.stop()
        await backend.close()
        await http.aclose()


class Server(uvicorn.Server):
    """uvicorn's server, which stops every sandbox and hands the reaper's Lease over on shutdown.

    After a signal uvicorn re-raises it once `serve` returns, so a `finally` there may not run.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        backend: ServedBackend,
        elector: "Elector | None",
        metrics_server: uvicorn.Server | None = None,
    ) -> None:
        super().__init__(config)
        self.backend = backend
        self.elector = elector
        self.metrics_server = metrics_server

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.metrics_server is not None:
            self.metrics_server.should_exit = True
        if self.elector is not None:
            await self.elector.stop()
        await self.backend.close()
        await super().shutdown(sockets)
