"""One error type for every surface: a Connect code and a message.

RPCs raise it as a `ConnectError`; the HTTP routes answer it as envd does, JSON
`{"code": <HTTP status>, "message": ...}`, which the SDK maps to its exceptions.
"""

from connectrpc.code import Code
from connectrpc.errors import ConnectError

# Connect's own table (connectrpc's `_error_to_http_status`) for the HTTP routes, but for envd's
# answer to a full disk; tests/agent/test_upstream_protocol.py holds it to both.
HTTP_STATUS = {
    Code.CANCELED: 499,
    Code.UNKNOWN: 500,
    Code.INVALID_ARGUMENT: 400,
    Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.PERMISSION_DENIED: 403,
    # envd's answer for a full disk on /files (agent/spec/upstream/envd.yaml, NotEnoughDiskSpace)
    Code.RESOURCE_EXHAUSTED: 507,
    Code.FAILED_PRECONDITION: 400,
    Code.ABORTED: 409,
    Code.OUT_OF_RANGE: 400,
    Code.UNIMPLEMENTED: 501,
    Code.INTERNAL: 500,
    Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500,
    Code.UNAUTHENTICATED: 401,
}


class AgentError(ConnectError):
    """A request the agent refuses, with the code the SDK turns into the right exception."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(code, message)

    @property
    def status(self) -> int:
        return HTTP_STATUS[self.code]
