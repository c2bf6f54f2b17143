"""RunFunction latency, throughput, memory and cold start, each beside the floor of the SDK.

    python -m bench.benchmark            # the full run recorded in BENCHMARKS.md
    python -m bench.benchmark --smoke    # a few hundred calls: it works, answers are right

The function (`workspace-sandbox serve`) and the floor (`bench.echo`, the same SDK answering a
precomputed response of the same size) each run as their own process; this process is the
client, over loopback gRPC. Every answer from the function is checked byte for byte against the
in-process render of the same request.
"""

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc

from bench.driver import RUN_FUNCTION, Case, cases, drive, server


def _serial(ours: str, floor: str, case: Case, calls: int) -> tuple[list[float], list[float]]:
    """Serial latency of both servers, call by call in turn.

    Alternating the two means both see the same moments of this shared machine: a burst of
    noise lands on both series instead of on whichever ran during it.
    """
    mine: list[float] = []
    base: list[float] = []
    with grpc.insecure_channel(ours) as a, grpc.insecure_channel(floor) as b:
        stubs = ((a.unary_unary(RUN_FUNCTION), mine), (b.unary_unary(RUN_FUNCTION), base))
        for stub, _ in stubs:
            for _ in range(50):
                stub(case.request, timeout=30)
        for _ in range(calls):
            for stub, times in stubs:
                t = time.perf_counter()
                stub(case.request, timeout=30)
                times.append(time.perf_counter() - t)
    return mine, base


def _pct(times: list[float], q: int) -> float:
    return statistics.quantiles(times, n=100)[q - 1] * 1000


def _row(name: str, ours: float, floor: float, unit: str = "ms") -> str:
    return f"| {name} | {ours:.3f} {unit} | {floor:.3f} {unit} | {ours / floor:.2f}x |"


def _cold_start(echo: Path | None) -> float:
    with server(echo=echo) as srv:
        return srv.ready_after


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a few hundred calls, no figures kept")
    parser.add_argument("--serial", type=int, default=3000)
    parser.add_argument("--throughput", type=int, default=20000)
    parser.add_argument("--soak", type=int, default=100000)
    args = parser.parse_args()
    if args.smoke:
        args.serial, args.throughput, args.soak = 100, 300, 300
    mix = {c.name: c for c in cases()}
    cores = os.cpu_count()
    machine = f"machine: {platform.machine()}, {cores} cores, Python {platform.python_version()}"
    lines = [
        machine,
        "",
        "| measure | function | floor | ratio |",
        "| --- | --- | --- | --- |",
    ]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("new", "steady", "large"):
            case = mix[name]
            answer = Path(tmp) / f"{name}.bin"
            answer.write_bytes(case.expected)
            with server() as ours, server(echo=answer) as floor:
                got = asyncio.run(drive(ours.address, [case], 200, 4))
                failures += got.wrong
                mine, base = _serial(ours.address, floor.address, case, args.serial)
            lines.append(_row(f"{name}: p50 serial", _pct(mine, 50), _pct(base, 50)))
            lines.append(_row(f"{name}: p99 serial", _pct(mine, 99), _pct(base, 99)))
        steady = mix["steady"]
        answer = Path(tmp) / "steady.bin"
        with server() as ours, server(echo=answer) as floor:
            for concurrency in (1, 8, 32):
                # Crossplane v2 calls v1; the floor answers v1 only as well.
                a = asyncio.run(
                    drive(ours.address, [steady], args.throughput, concurrency, beta=False)
                )
                b = asyncio.run(
                    drive(floor.address, [steady], args.throughput, concurrency, beta=False)
                )
                failures += a.wrong
                rate_a, rate_b = a.calls / a.seconds, b.calls / b.seconds
                lines.append(
                    f"| steady: calls/s at concurrency {concurrency} | {rate_a:.0f} | {rate_b:.0f} "
                    f"| {rate_a / rate_b:.2f}x |"
                )
            everyday = [c for c in mix.values() if c.name != "large"] * 12 + [mix["large"]]
            soak = asyncio.run(drive(ours.address, everyday, args.soak, 8))
            failures += soak.wrong
            rss_ours, rss_floor = ours.rss_kib() / 1024, floor.rss_kib() / 1024
        lines.append(
            f"| RSS after {args.soak} mixed calls | {rss_ours:.1f} MiB | {rss_floor:.1f} MiB "
            f"| {rss_ours / rss_floor:.2f}x |"
        )
        cold_ours, cold_floor = _cold_start(None), _cold_start(answer)
        lines.append(_row("cold start (exec to first answer)", cold_ours, cold_floor, "s"))
    print("\n".join(lines))
    if failures:
        print(f"\n{len(failures)} wrong answers, first: {failures[0]}")
        return 1
    print("\nevery answer matched the in-process render")
    return 0


if __name__ == "__main__":
    sys.exit(main())
