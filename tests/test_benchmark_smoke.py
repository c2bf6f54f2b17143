"""The benchmark runs (a few hundred calls) and every answer in it is right; no timing asserted."""

import subprocess
import sys

from tests.support import ROOT


def test_the_benchmark_smoke_run_works_and_answers_correctly() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.benchmark", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every answer matched the in-process render" in result.stdout
    for measure in ("steady: p50 serial", "calls/s at concurrency 8", "RSS after", "cold start"):
        assert measure in result.stdout
