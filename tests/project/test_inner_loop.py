"""The inner loop stays in-process: the guard in tests/conftest.py fails a test that starts a
server unless it is marked out of the loop, and `scripts/check --fast` leaves out exactly those
marks."""

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from tests.conftest import OUT_OF_LOOP, in_process_only, server_in
from tests.support import ROOT

AGENT = "/venv/bin/workspace-sandbox-agent"


@pytest.mark.parametrize(
    "argv",
    [
        [AGENT, "--address", "127.0.0.1:1"],
        ["/venv/bin/workspace-sandbox-gateway", "--local"],
        [sys.executable, "-m", "workspace_gateway.main", "--local"],
        [sys.executable, "-c", "import os\nfrom workspace_agent.main import main\nmain()"],
        ["node", "cycle.mjs"],
        ["/usr/bin/deno", "jupyter"],
        ["/venv/sdk-venvs/e2b-2.50.0-agent/bin/python", "-m", "pytest"],
    ],
)
def test_a_server_is_told_apart(argv: list[str]) -> None:
    assert server_in(argv) is not None


@pytest.mark.parametrize(
    "argv",
    [
        ["ln", "-s", "/x", "/run/systemd/system/workspace-sandbox-agent.service"],
        ["bash", "-l", "-c", "echo workspace_agent"],
        [sys.executable, "-c", "print('workspace_gateway')"],
        "true",
        [],
    ],
)
def test_other_commands_are_not(argv: list[str] | str) -> None:
    assert server_in(argv) is None


def item(markexpr: str, *marks: str) -> SimpleNamespace:
    return SimpleNamespace(
        nodeid="tests/x.py::test_x",
        config=SimpleNamespace(option=SimpleNamespace(markexpr=markexpr)),
        get_closest_marker=lambda name: name if name in marks else None,
    )


FAST = "not e2e and not slow"


class Spawned(Exception):  # noqa: N818  # what happened, not an error
    """The command reached the spawn (a stand-in for it: no process starts here)."""


def spawned(_self: object, args: object, *_: object, **__: object) -> None:
    raise Spawned(args)


@contextmanager
def stand_in_spawn() -> Iterator[None]:
    """`Popen` as the guard finds it, standing in for the real one (and for the guard this run
    has around each test): reaching it raises `Spawned`. Within the test, so that the guard's
    own patching around each phase neither undoes it nor is undone by it."""
    around = subprocess.Popen.__init__
    subprocess.Popen.__init__ = spawned  # type: ignore[assignment]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = around  # type: ignore[method-assign]


def start_an_agent() -> None:
    subprocess.run([AGENT, "--help"], check=False)


def test_an_unmarked_test_starting_a_server_fails_in_the_inner_loop() -> None:
    with (
        pytest.raises(pytest.fail.Exception, match=r"tests/x.py::test_x starts .*mark it e2e"),
        stand_in_spawn(),
        in_process_only(item(FAST)),  # type: ignore[arg-type]
    ):
        start_an_agent()


def test_a_refusal_caught_where_it_was_raised_still_fails_the_test() -> None:
    with pytest.raises(pytest.fail.Exception, match="mark it e2e"):  # the order is the point
        with in_process_only(item(FAST)):  # type: ignore[arg-type]
            try:
                start_an_agent()
            except BaseException:  # noqa: S110  # as a server's task might
                pass


@pytest.mark.parametrize("mark", OUT_OF_LOOP)
def test_a_marked_test_may_start_one(mark: str) -> None:
    with stand_in_spawn(), in_process_only(item(FAST, mark)), pytest.raises(Spawned):  # type: ignore[arg-type]
        start_an_agent()


def test_outside_the_inner_loop_nothing_is_refused() -> None:
    with stand_in_spawn(), in_process_only(item("")), pytest.raises(Spawned):  # type: ignore[arg-type]
        start_an_agent()


def test_the_fast_check_leaves_out_exactly_the_marks_the_guard_allows() -> None:
    script = (ROOT / "scripts" / "check").read_text()
    (expression,) = re.findall(r"-m '([^']+)'", script)
    assert sorted(re.findall(r"not (\w+)", expression)) == sorted(OUT_OF_LOOP)
