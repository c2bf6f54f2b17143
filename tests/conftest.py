"""Suite-wide settings, and the guard that keeps the inner loop in-process.

`scripts/check --fast` runs every test not marked `e2e`, `slow` or a real-component tier, and
must stay fast: in a run that leaves `e2e` out (`-m 'not e2e ...'`), a test that starts an
agent, a gateway or an SDK's process fails, naming the process and the mark it needs. Every
process a test (or a fixture it asks for) starts is checked, whatever starts it: `subprocess`,
asyncio, or the local gateway's agents.
"""

import itertools
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import settings

# Autouse: root's login shells must not wait on a lock a killed one left (see there).
from tests.pyenv import no_stale_pyenv_lock  # noqa: F401

# Speed is measured by the benchmark, not by tests: on a loaded machine a 200 ms per-example
# deadline fails property tests that are correct.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

OUT_OF_LOOP = ("e2e", "slow", "boot", "pod", "control_plane")
# What the inner loop never starts: the project's servers (their executables, their modules
# under `-m`, or a script importing them), Node or Deno (the JS SDK and kernel), and the Python
# of an older SDK's venv.
EXECUTABLES = re.compile(r"(^|/)(workspace-sandbox-(agent|gateway)|node|deno)$|/sdk-venvs/")
MODULES = re.compile(r"workspace_(agent|gateway)(\.|$)")
IMPORTS = re.compile(r"^\s*(import|from) workspace_(agent|gateway)\b", re.M)


def server_in(args: Any) -> str | None:
    """What a command line starts, if it is a server the inner loop leaves out."""
    argv = [args] if isinstance(args, (str, bytes)) else list(args)
    words = [a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in argv]
    if not words:
        return None
    after_m = [b for a, b in itertools.pairwise(words) if a == "-m"]
    if (
        EXECUTABLES.search(words[0])
        or any(MODULES.match(m) for m in after_m)
        or any(IMPORTS.search(w) for w in words[1:])
    ):
        return " ".join(words)[:120]
    return None


@contextmanager
def in_process_only(item: pytest.Item) -> Iterator[None]:
    inner_loop = "not e2e" in item.config.option.markexpr
    if not inner_loop or any(item.get_closest_marker(name) for name in OUT_OF_LOOP):
        yield
        return
    started: list[str] = []
    original = subprocess.Popen.__init__

    def refuse(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        if (server := server_in(args)) is not None:
            started.append(server)
            pytest.fail(f"{item.nodeid} starts {server!r}: mark it e2e (or slow)", pytrace=False)
        original(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]
    if started:  # refused where a failure would have been caught: in a server's task
        pytest.fail(f"{item.nodeid} starts {started[0]!r}: mark it e2e (or slow)", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with in_process_only(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with in_process_only(item):
        return (yield)
