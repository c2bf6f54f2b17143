"""The SDK's own health check: `is_running()` is `GET /health` answering 2xx."""

from e2b import Sandbox


def test_the_sdk_sees_a_running_sandbox(sandbox: Sandbox) -> None:
    assert sandbox.is_running()
