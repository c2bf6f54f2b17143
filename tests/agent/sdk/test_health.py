"""The SDK's own health check: `is_running()` is `GET /health` answering 2xx."""

import pytest
from e2b import Sandbox

pytestmark = pytest.mark.e2e  # starts agents or gateways


def test_the_sdk_sees_a_running_sandbox(sandbox: Sandbox) -> None:
    assert sandbox.is_running()
