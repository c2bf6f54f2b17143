"""The agent benchmark runs (a few commands, a small file read back intact); no timing asserted."""

import subprocess
import sys

from tests.support import ROOT


def test_the_agent_benchmark_smoke_run_works() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.agent_benchmark", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the file read back matched" in result.stdout
    for measure in ("commands.run('true'): p50", "MiB write through the SDK", "open fds before"):
        assert measure in result.stdout
