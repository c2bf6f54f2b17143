"""Each benchmark's smoke run works and checks its own answers; no timing asserted.

The function's run checks every answer against the in-process render; the agent's and the
gateway's read every file back and compare hashes, and count the errors of the sandboxes they
run at once. The pool benchmark checks that every create and connect answered its first command.
The placement benchmark checks every answer against the in-process render, and its rounds and
object counts, which are exact, are pinned as BENCHMARKS.md reports them.
"""

import subprocess
import sys

import pytest

from tests.support import ROOT

pytestmark = pytest.mark.slow  # each benchmark's smoke run

SMOKE = {
    "bench.benchmark": (
        "every answer matched the in-process render",
        "steady: p50 serial",
        "calls/s at concurrency 8",
        "RSS after",
        "cold start",
    ),
    "bench.agent_benchmark": (
        "the file read back matched",
        "commands.run('true'): p50",
        "MiB write through the SDK",
        "open fds before",
    ),
    "bench.gateway_benchmark": (
        "every file read back matched",
        "5 sandboxes at once: create, 3 commands, a file, kill",
        ", 0 errors |",
        "commands.run('true'): p50",
        "MiB write |",
        "MiB read |",
    ),
    "bench.preview_benchmark": (
        "smoke run: every page and every echo came back whole",
        "| HTTP GET of 2 KiB: p50 |",
        "| WebSocket round trip of 64 bytes: p50 |",
    ),
    "bench.interpreter_benchmark": (
        "smoke run: every run answered 2",
        "| Python `1 + 1`: p50 |",
        "| JavaScript `1 + 1` (Deno): p50 |",
        "| the SDK's `run_code('1 + 1')`: p50 |",
    ),
    "bench.pool_benchmark": (
        "smoke run: every hit, miss and connect answered its first command",
        "| hit, running |",
        "| hit, suspended |",
        "| miss |",
        "| connect |",
        "a running pool's hit is",
    ),
    "bench.placement_benchmark": (
        "every answer matched the in-process render",
        "| isolated | bare | 4 | 7 | 1 -> 6 -> 11 -> 11 | 11 | 19 |",
        "| standard | bare | 2 | 3 | 5 -> 5 | 5 | 5 |",
        "| isolated-kata | everyday | settled |",
        "| kata | everyday | first |",
    ),
}


@pytest.mark.parametrize("module", SMOKE)
def test_the_smoke_run_works_and_checks_its_answers(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", module, "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for line in SMOKE[module]:
        assert line in result.stdout, line
