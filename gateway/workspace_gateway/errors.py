"""The gateway's one error: an HTTP status and a message, answered as E2B's `{code, message}`."""


class GatewayError(Exception):
    """Raised anywhere below the edge; the edge answers it as JSON, never as a traceback."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def body(self) -> dict[str, object]:
        return {"code": self.status, "message": self.message}


def not_found(sandbox_id: str) -> GatewayError:
    # 404 for anything not the caller's as well: the answer never says whether it exists.
    return GatewayError(404, f"sandbox {sandbox_id!r} not found")
