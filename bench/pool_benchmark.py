"""Create to first command: a warm pool's hit against a cold create and a bare connect, one run.

    python -m bench.pool_benchmark            # the run recorded in BENCHMARKS.md
    python -m bench.pool_benchmark --smoke    # three rounds: it works

Three local gateways (`--local`, plain HTTP), each with its `/metrics` listener: one with a pool
of one running member, one with a pool of one suspended member, one without a pool. Each round
measures, in turn, so that noise on this shared machine lands on every series:

- hit, running: `Sandbox.create()` then `commands.run("true")` on the running pool's gateway;
- hit, suspended: the same on the suspended pool's gateway;
- miss: the same on the gateway without a pool (a cold create);
- connect: `Sandbox.connect()` to a sandbox already running, then `commands.run("true")`: the
  floor, what any call that reaches a running sandbox costs.

Before each hit the benchmark waits, untimed, until the pool's gauge says its member is back, so
a hit never races the top-up; every created sandbox is killed, untimed. Each figure is from a
new SDK object, so each pays its own connection set-up, as a user's first create does. The goal
is a running hit's median within 2x of the connect's.
"""

import argparse
import os
import platform
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from e2b import Sandbox
from prometheus_client.parser import text_string_to_metric_families

from tests.ports import free_port

KEY = "e2b_" + secrets.token_hex(20)
GOAL = 2.0


@dataclass
class Gateway:
    url: str
    metrics_url: str
    process: "subprocess.Popen[bytes]"

    def members(self) -> float:
        text = httpx.get(self.metrics_url + "/metrics", timeout=5).text
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "workspace_gateway_pool_members"
        )


def _start(*pool: str) -> Gateway:
    port, metrics_port = free_port(), free_port()
    binary = Path(sys.executable).with_name("workspace-sandbox-gateway")
    address = f"127.0.0.1:{port}"
    command = [str(binary), "--local", "--address", address, "--api-key", KEY]
    command += ["--metrics-address", f"127.0.0.1:{metrics_port}", "--log-level", "error", *pool]
    gateway = Gateway(
        f"http://{address}", f"http://127.0.0.1:{metrics_port}", subprocess.Popen(command)
    )
    _wait(lambda: _answers(gateway.url + "/health"), "the gateway did not answer")
    return gateway


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).is_success
    except httpx.TransportError:
        return False


def _wait(check: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            sys.exit(what)
        time.sleep(0.02)


def _full(gateway: Gateway) -> Callable[[], bool]:
    return lambda: gateway.members() == 1


def _create_then_command(gateway: Gateway) -> float:
    """Seconds from `Sandbox.create()` to the first command's answer; the sandbox is killed."""
    t = time.perf_counter()
    sandbox = Sandbox.create(api_key=KEY, api_url=gateway.url, sandbox_url=gateway.url)
    done = sandbox.commands.run("true")
    seconds = time.perf_counter() - t
    if done.exit_code != 0:
        sys.exit(f"the first command failed: {done}")
    sandbox.kill()
    return seconds


def _connect_then_command(gateway: Gateway, sandbox_id: str) -> float:
    t = time.perf_counter()
    sandbox = Sandbox.connect(sandbox_id, api_key=KEY, api_url=gateway.url, sandbox_url=gateway.url)
    done = sandbox.commands.run("true")
    seconds = time.perf_counter() - t
    if done.exit_code != 0:
        sys.exit(f"the first command failed: {done}")
    return seconds


def _row(name: str, times: list[float], floor: float | None) -> str:
    ms = [t * 1000 for t in times]
    median = statistics.median(ms)
    ratio = f"{median / floor:.2f}x" if floor else ""
    runs = " ".join(f"{m:.0f}" for m in ms)
    return (
        f"| {name} | {median:.0f} ms | {min(ms):.0f} ms | {max(ms):.0f} ms "
        f"| {statistics.pstdev(ms):.0f} ms | {ratio} | {runs} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="three rounds: it works")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    rounds = 3 if args.smoke else args.rounds
    for name in [n for n in os.environ if n.startswith("E2B_")]:
        del os.environ[name]

    gateways = [
        _start("--pool-size", "1", "--pool-temperature", "running"),
        _start("--pool-size", "1", "--pool-temperature", "suspended"),
        _start(),
    ]
    running, suspended, cold = gateways
    series: dict[str, list[float]] = {"hit, running": [], "hit, suspended": [], "miss": []}
    series["connect"] = []
    try:
        target = Sandbox.create(timeout=3600, api_key=KEY, api_url=cold.url, sandbox_url=cold.url)
        for _ in range(rounds):
            for name, gateway in (("hit, running", running), ("hit, suspended", suspended)):
                _wait(_full(gateway), f"{name}: the pool was not topped up")
                series[name].append(_create_then_command(gateway))
            series["miss"].append(_create_then_command(cold))
            series["connect"].append(_connect_then_command(cold, target.sandbox_id))
        target.kill()
    finally:
        for gateway in gateways:
            gateway.process.terminate()
        for gateway in gateways:
            gateway.process.wait(30)

    floor = statistics.median(series["connect"]) * 1000
    print(
        f"# pool benchmark: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {rounds} rounds, create (or connect) to the "
        "first command's answer"
    )
    print("| measure | median | min | max | std dev | vs connect | each run (ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, times in series.items():
        print(_row(name, times, floor))
    ratio = statistics.median(series["hit, running"]) * 1000 / floor
    print(f"a running pool's hit is {ratio:.2f}x a bare connect (goal: at most {GOAL:.0f}x)")
    if args.smoke:
        print("smoke run: every hit, miss and connect answered its first command")
        return
    if ratio > GOAL:
        sys.exit("goal missed: a hit is more than 2x a bare connect")


if __name__ == "__main__":
    main()
