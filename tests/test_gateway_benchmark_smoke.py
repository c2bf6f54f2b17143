"""The gateway benchmark runs (a few commands, a small file, 5 sandboxes at once); no timing asserted."""

import subprocess
import sys

from tests.support import ROOT


def test_the_gateway_benchmark_smoke_run_works() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.gateway_benchmark", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every file read back matched" in result.stdout
    assert "5 sandboxes at once: create, 3 commands, a file, kill" in result.stdout
    assert ", 0 errors |" in result.stdout
    for measure in ("commands.run('true'): p50", "MiB write |", "MiB read |"):
        assert measure in result.stdout
