"""A loopback port for a server a test (or a benchmark) starts: free now, and still free when the
server binds it.

Choosing a port by binding `:0` and closing the socket leaves a window in which the kernel may
hand the same port to anyone else: to another test's `bind(:0)`, or as the source port of one of
the thousands of loopback connections a run makes. The server then fails to bind, or a test
talks to the wrong one. So the port stays bound here, with `SO_REUSEADDR` and never listening:
the kernel skips it for every other `bind(:0)` and every outgoing connection, and a plain bind
of it fails, while a server that sets `SO_REUSEADDR` (uvicorn, gRPC, Go's listeners, QEMU's
forwards, `http.server`) binds and listens on it as if it were free. Only a server listening on
the port ends the reservation's use; closing the reservation is left to the process's end, as a
server may be started again on the same port.

Standard library only: the SDK tests import it under an older SDK's venv too.
"""

import socket
from collections import deque

HOST = "127.0.0.1"
HELD = 4096  # reservations kept at once, oldest first to go: a bound on open descriptors

_reserved: deque[socket.socket] = deque()


def free_port(host: str = HOST) -> int:
    """A port on `host` that no one else can take until this process ends."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    held = socket.socket(family, socket.SOCK_STREAM)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind((host, 0))
    if len(_reserved) == HELD:
        _reserved.popleft().close()
    _reserved.append(held)
    return int(held.getsockname()[1])


def closed_port(host: str = HOST) -> int:
    """A port nothing listens on, nor will: a connection to it is refused."""
    return free_port(host)
