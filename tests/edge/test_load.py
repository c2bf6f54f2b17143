"""Load: tens of thousands of mixed calls from concurrent clients, every answer exact."""

import asyncio

import pytest

from bench.driver import cases, drive, server

pytestmark = pytest.mark.slow  # tens of thousands of calls

CALLS = 20_000
CONCURRENCY = 16
# Generous: the server's RSS after warm-up may grow this much over the run, no more.
RSS_GROWTH_LIMIT_KIB = 40 * 1024


def test_twenty_thousand_mixed_calls_are_all_answered_exactly() -> None:
    everyday = [c for c in cases() if c.name != "large"]
    large = next(c for c in cases() if c.name == "large")
    # Mostly everyday sandboxes, one large one in fifty calls.
    mix = everyday * 12 + [large]
    with server() as srv:
        asyncio.run(drive(srv.address, mix, 1_000, CONCURRENCY))  # warm-up: caches, allocator
        before = srv.rss_kib()
        run = asyncio.run(drive(srv.address, mix, CALLS, CONCURRENCY))
        after = srv.rss_kib()
    assert run.wrong == []
    assert run.calls == CALLS
    assert after - before < RSS_GROWTH_LIMIT_KIB, f"RSS grew {after - before} KiB"
    # The SDK stops the server with a 5 s grace period on SIGTERM.
    assert srv.process.returncode == 0
    assert srv.exit_after is not None
    assert srv.exit_after < 6
