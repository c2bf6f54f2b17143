"""A long soak: `python -m bench.soak --calls 500000` drives the server and reports RSS over time.

Every answer is checked byte for byte against the in-process render; the run fails on the first
wrong answer, or when RSS grows more than --rss-growth-mib after warm-up.
"""

import argparse
import asyncio
import sys
import time

from bench.driver import cases, drive, server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rss-growth-mib", type=int, default=40)
    args = parser.parse_args()
    everyday = [c for c in cases() if c.name != "large"]
    mix = everyday * 12 + [c for c in cases() if c.name == "large"]
    with server() as srv:
        asyncio.run(drive(srv.address, mix, 2_000, args.concurrency))
        before, started = srv.rss_kib(), time.monotonic()
        print(f"warm: RSS {before / 1024:.1f} MiB")
        done, wrong = 0, 0
        while done < args.calls:
            chunk = min(10_000, args.calls - done)
            run = asyncio.run(drive(srv.address, mix, chunk, args.concurrency))
            done, wrong = done + run.calls, wrong + len(run.wrong)
            rate = run.calls / run.seconds
            rss = srv.rss_kib() / 1024
            print(f"{done:>9} calls  {rate:7.0f}/s  RSS {rss:7.1f} MiB  wrong {wrong}")
            if wrong:
                print(run.wrong[0])
                return 1
        growth = (srv.rss_kib() - before) / 1024
    minutes = (time.monotonic() - started) / 60
    stop = srv.exit_after or 0.0
    print(f"{done} calls in {minutes:.1f} min, RSS growth {growth:.1f} MiB, exit {stop:.2f}s")
    return 0 if growth < args.rss_growth_mib else 1


if __name__ == "__main__":
    sys.exit(main())
