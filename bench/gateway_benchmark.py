"""The gateway through the real SDK, each measure beside the same call straight to the agent.

    python -m bench.gateway_benchmark            # the run recorded in BENCHMARKS.md
    python -m bench.gateway_benchmark --smoke    # a few calls, 5 sandboxes: it works

One gateway (`--local`, plain HTTP) and, for the first two measures, one sandbox. The SDK
reaches that sandbox two ways: through the gateway (`E2B_SANDBOX_URL` is the gateway) and
straight to its agent (`sandbox_url` is the agent's own address, read from its command line,
as only local mode can), with the same access token. The difference is the proxy's cost.

- Commands: `commands.run("true")` each way, called in turn so noise on this shared machine
  lands on both; the ratio of the medians. A command spawns `bash -l` as the gateway's user,
  whose login profile may dominate, so `files.get_info(".")` (one unary call, no process) is
  measured the same way: the proxy's own cost per request.
- Files: a 64 MiB file written and read each way, nine times in turn, hashes checked; the
  median throughput through the gateway as a share of straight to the agent.
- Many sandboxes: 50 threads, each creating a sandbox, running a few commands, writing and
  reading a file and killing it, all at once; errors counted, wall time reported.
"""

import argparse
import hashlib
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from e2b import Sandbox

from tests.ports import free_port

MIB = 1024 * 1024
GOALS = {"command ratio": 1.3, "file share": 0.8}
KEY = "e2b_" + secrets.token_hex(20)


def _start() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    gateway = Path(sys.executable).with_name("workspace-sandbox-gateway")
    address = f"127.0.0.1:{port}"
    cmd = [str(gateway), "--local", "--address", address, "--api-key", KEY, "--log-level", "error"]
    process = subprocess.Popen(cmd)
    url = f"http://{address}"
    for _ in range(300):
        try:
            httpx.get(url + "/health", timeout=1)
            return process, url
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    sys.exit("the gateway did not answer")


def agent_option(sandbox_id: str, option: str) -> str:
    """What the gateway gave this sandbox's agent as `option`, from the agent's command line."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv]
        roots = [w for i, w in enumerate(words[1:]) if words[i] == "--root"]
        if roots and f"sandbox-{sandbox_id}-" in roots[0] and option in words:
            return words[words.index(option) + 1]
    sys.exit(f"no agent process for sandbox {sandbox_id} with {option}")


def _agent_url(sandbox_id: str) -> str:
    """The address the gateway gave this sandbox's agent."""
    return "http://" + agent_option(sandbox_id, "--address")


def _ms(times: list[float], q: int) -> float:
    return statistics.quantiles(times, n=100)[q - 1] * 1000


def _pairs(
    via: Callable[[], object], direct: Callable[[], object], calls: int
) -> tuple[list[float], list[float]]:
    """Seconds per call through the gateway and straight to the agent, called in turn."""
    gateway: list[float] = []
    agent: list[float] = []
    for _ in range(20):
        via()
        direct()
    for _ in range(calls):
        t = time.perf_counter()
        via()
        gateway.append(time.perf_counter() - t)
        t = time.perf_counter()
        direct()
        agent.append(time.perf_counter() - t)
    return gateway, agent


def _files(
    via: Sandbox, direct: Sandbox, scratch: Path, size: int, rounds: int
) -> dict[str, float]:
    source = scratch / "source.bin"
    with source.open("wb") as f:
        for _ in range(size // MIB):
            f.write(os.urandom(MIB))
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    seconds: dict[str, list[float]] = {}
    for _ in range(rounds):
        for way, sbx in (("agent", direct), ("gateway", via)):
            t = time.perf_counter()
            with source.open("rb") as f:
                sbx.files.write(f"bench/{way}.bin", f)
            seconds.setdefault(f"write {way}", []).append(time.perf_counter() - t)
            t = time.perf_counter()
            h = hashlib.sha256()
            for chunk in sbx.files.read(f"bench/{way}.bin", format="stream"):
                h.update(chunk)
            seconds.setdefault(f"read {way}", []).append(time.perf_counter() - t)
            if h.hexdigest() != digest:
                sys.exit(f"the file read back {way} differs from the file written")
    return {name: size / MIB / statistics.median(times) for name, times in seconds.items()}


def _one_sandbox(n: int) -> None:
    sbx = Sandbox.create()
    try:
        for i in range(3):
            done = sbx.commands.run(f"echo {n}-{i}")
            if done.stdout != f"{n}-{i}\n":
                msg = f"sandbox {n} answered {done.stdout!r}"
                raise AssertionError(msg)
        sbx.files.write("note.txt", f"sandbox {n}")
        if sbx.files.read("note.txt") != f"sandbox {n}":
            msg = f"sandbox {n} read back another file"
            raise AssertionError(msg)
    finally:
        sbx.kill()


def _many(count: int) -> tuple[float, list[str]]:
    errors: list[str] = []

    def run(n: int) -> None:
        try:
            _one_sandbox(n)
        except Exception as e:  # every failure is counted and reported
            errors.append(f"{type(e).__name__}: {e}"[:300])
            if len(errors) == 1:
                traceback.print_exc()

    t = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        list(pool.map(run, range(count)))
    return time.perf_counter() - t, errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="a few calls: it works")
    args = parser.parse_args()
    calls, size, rounds, count = (20, 4 * MIB, 1, 5) if args.smoke else (500, 64 * MIB, 9, 50)

    process, url = _start()
    for name in [n for n in os.environ if n.startswith("E2B_")]:
        del os.environ[name]
    os.environ.update(E2B_API_KEY=KEY, E2B_API_URL=url, E2B_SANDBOX_URL=url)
    try:
        with tempfile.TemporaryDirectory(prefix="gateway-bench-") as scratch:
            via = Sandbox.create()
            direct = Sandbox.connect(via.sandbox_id, sandbox_url=_agent_url(via.sandbox_id))
            gateway, agent = _pairs(
                lambda: via.commands.run("true"), lambda: direct.commands.run("true"), calls
            )
            stat = _pairs(
                lambda: via.files.get_info("."), lambda: direct.files.get_info("."), calls
            )
            files = _files(via, direct, Path(scratch), size, rounds)
            via.kill()
        wall, errors = _many(count)
    finally:
        process.terminate()
        process.wait(30)

    print(
        f"# gateway benchmark: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {calls} command pairs, {size // MIB} MiB file "
        f"(median of {rounds}), "
        f"{count} sandboxes at once"
    )
    print("| measure | through the gateway | straight to the agent | ratio | goal |")
    print("| --- | --- | --- | --- | --- |")
    ratio = statistics.median(gateway) / statistics.median(agent)
    print(
        f"| commands.run('true'): p50 | {_ms(gateway, 50):.2f} ms | {_ms(agent, 50):.2f} ms "
        f"| {ratio:.2f}x | at most {GOALS['command ratio']}x |"
    )
    print(
        f"| commands.run('true'): p90 | {_ms(gateway, 90):.2f} ms | {_ms(agent, 90):.2f} ms "
        f"| {_ms(gateway, 90) / _ms(agent, 90):.2f}x | |"
    )
    print(
        f"| files.get_info('.'): p50 | {_ms(stat[0], 50):.2f} ms | {_ms(stat[1], 50):.2f} ms "
        f"| {statistics.median(stat[0]) / statistics.median(stat[1]):.2f}x | (the proxy alone) |"
    )
    shares = {}
    for way in ("write", "read"):
        ours, floor = files[f"{way} gateway"], files[f"{way} agent"]
        shares[way] = ours / floor
        print(
            f"| {size // MIB} MiB {way} | {ours:.0f} MiB/s | {floor:.0f} MiB/s "
            f"| {shares[way]:.0%} | at least {GOALS['file share']:.0%} |"
        )
    print(
        f"| {count} sandboxes at once: create, 3 commands, a file, kill | {wall:.1f} s wall, "
        f"{len(errors)} errors | | | no errors |"
    )
    for error in sorted(set(errors)):
        print(f"error: {error}")
    if args.smoke:
        if errors:
            sys.exit("smoke run: some sandboxes failed")
        print("smoke run: every command answered and every file read back matched")
        return
    missed = [
        name
        for name, ok in (
            ("command ratio", ratio <= GOALS["command ratio"]),
            ("write share", shares["write"] >= GOALS["file share"]),
            ("read share", shares["read"] >= GOALS["file share"]),
            ("no errors", not errors),
        )
        if not ok
    ]
    if missed:
        sys.exit(f"goals missed: {', '.join(missed)}")


if __name__ == "__main__":
    main()
