"""What a test needs of the machine (a mount, a device): failing in CI, which has it."""

import os

import pytest


def unavailable(message: str) -> None:
    """What the test needs is not here: a failure in CI, which has it, a skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
