"""`--metrics-address`: Prometheus' exposition of the gateway's figures, on a listener of its own.

Never on the public listener: the figures name every tenant's namespace and pool sizes, which
one tenant must not read about another. The metrics listener is plain HTTP with no key, meant
for a cluster-internal address that only Prometheus reaches.
"""

import contextlib
import socket
from collections.abc import Iterator

import uvicorn
from prometheus_client import make_asgi_app

from workspace_gateway import http_protocol
from workspace_gateway.asgi import ASGIApp, Receive, Scope, Send, respond_json
from workspace_gateway.metrics import Metrics


def build_metrics_app(metrics: Metrics) -> ASGIApp:
    """`GET /metrics`, the exposition format; every other path is 404."""
    exposition = make_asgi_app(registry=metrics.registry)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/metrics":
            await respond_json(send, 404, {"code": 404, "message": "only /metrics is served"})
            return
        await exposition(scope, receive, send)

    return app


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound now so that a taken address fails at start, in one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class MetricsServer(uvicorn.Server):
    """uvicorn, minus its signal handling.

    The public listener's server owns the signals and stops this one, so two servers in one
    process never fight over SIGTERM.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def metrics_server(metrics: Metrics, log_level: str) -> MetricsServer:
    config = uvicorn.Config(
        build_metrics_app(metrics),
        http=http_protocol.bounded(),
        lifespan="off",
        log_level=log_level,
        access_log=log_level == "debug",
        server_header=False,
    )
    return MetricsServer(config)
