"""A guard for tests that run commands through root's login shells.

Standard library and pytest only: the SDK tests import it under an older SDK's venv too.
"""

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# Root's login profile on this project's CI machines runs `pyenv rehash`, which waits up to 60 s
# for a lock file that a login shell killed at the wrong moment leaves behind. Tests run
# commands as root through `bash -l` (the SDK always does) and kill some of them, so a stale
# lock would stall every later root command for a minute. A rehash takes well under a second:
# a lock older than that is stale.
PYENV_LOCK = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "shims" / ".pyenv-shim"
STALE_AFTER = 5.0


def clear_stale_pyenv_lock() -> None:
    try:
        if time.time() - PYENV_LOCK.stat().st_mtime > STALE_AFTER:
            PYENV_LOCK.unlink()
    except FileNotFoundError:
        pass


@pytest.fixture(autouse=True)
def no_stale_pyenv_lock() -> Iterator[None]:
    clear_stale_pyenv_lock()
    yield
    clear_stale_pyenv_lock()
