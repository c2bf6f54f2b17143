"""The code interpreter's `run_code`, through the gateway beside straight to the interpreter.

    python -m bench.interpreter_benchmark            # the run recorded in BENCHMARKS.md
    python -m bench.interpreter_benchmark --smoke    # a few calls: it works

One gateway (`--local`, plain HTTP) and one `code-interpreter-v1` sandbox. A run of `1 + 1` in
the default Python context is posted to `/execute` two ways, in turn, each on one persistent
connection: through the gateway (`E2b-Sandbox-Port: 49999` and the access token, as the SDK
sends it) and straight to the interpreter's loopback port; the ratio of the medians is the
gateway's cost. The same run in JavaScript (Deno's kernel) shows what its 50 ms wait for
outputs that trail `idle` costs (`kernels.DENO_SETTLE_SECONDS`), and the SDK's own `run_code`
what a caller sees: it opens a new connection for every call.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from e2b_code_interpreter import Sandbox

from bench.gateway_benchmark import KEY, _ms, _pairs, _start, agent_option

GOALS = {"python ratio": 1.3}


def _interpreter_port(sandbox_id: str) -> int:
    """The loopback port the gateway gave this sandbox's interpreter."""
    return int(agent_option(sandbox_id, "--interpreter").rsplit(":", 1)[1])


def _deno() -> str | None:
    """The folder of the test cache's Deno (`scripts/js-sdk install`), if it is there."""
    root = Path(__file__).resolve().parents[1]
    found = subprocess.run(
        [str(root / "scripts" / "js-sdk"), "path"], capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        return None
    return str(Path(found.stdout.strip()) / "node_modules" / "@deno" / "linux-x64-glibc")


def _run(client: httpx.Client, headers: dict[str, str], language: str | None) -> object:
    def once() -> object:
        answer = client.post(
            "/execute", json={"code": "1 + 1", "language": language}, headers=headers
        )
        lines = [json.loads(line) for line in answer.text.splitlines()]
        if not any(line.get("text") == "2" for line in lines):
            sys.exit(f"the run answered {answer.status_code}: {answer.text[:200]}")
        return lines

    return once


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="a few calls: it works")
    args = parser.parse_args()
    calls = 10 if args.smoke else 300
    process, url = _start()
    for name in [n for n in os.environ if n.startswith("E2B_")]:
        del os.environ[name]
    os.environ.update(E2B_API_KEY=KEY, E2B_API_URL=url, E2B_SANDBOX_URL=url)
    deno = _deno()
    envs = {"PATH": f"{deno}:/usr/local/bin:/usr/bin:/bin"} if deno else {}
    try:
        sandbox = Sandbox.create(envs=envs)
        port = _interpreter_port(sandbox.sandbox_id)
        routed = {
            "E2b-Sandbox-Id": sandbox.sandbox_id,
            "E2b-Sandbox-Port": "49999",
            "X-Access-Token": sandbox._envd_access_token or "",  # the SDK's own
        }
        with (
            httpx.Client(base_url=url, timeout=60) as via,
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as direct,
        ):
            python = _pairs(_run(via, routed, None), _run(direct, {}, None), calls)
            javascript = (
                _pairs(_run(via, routed, "js"), _run(direct, {}, "js"), max(calls // 10, 5))
                if deno
                else None
            )
        sdk = []
        for _ in range(calls):
            t = time.perf_counter()
            if sandbox.run_code("1 + 1").text != "2":
                sys.exit("the SDK's run answered another result")
            sdk.append(time.perf_counter() - t)
        sandbox.kill()
    finally:
        process.terminate()
        process.wait(30)

    print(
        f"# interpreter benchmark: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {calls} pairs"
    )
    print("| measure | through the gateway | straight to the interpreter | ratio | goal |")
    print("| --- | --- | --- | --- | --- |")
    ratio = statistics.median(python[0]) / statistics.median(python[1])
    rows = [("Python `1 + 1`", python, f"at most {GOALS['python ratio']}x")]
    if javascript is not None:
        rows.append(("JavaScript `1 + 1` (Deno)", javascript, ""))
    for name, (gateway, straight), goal in rows:
        for q, aim in ((50, goal), (90, "")):
            print(
                f"| {name}: p{q} | {_ms(gateway, q):.2f} ms | {_ms(straight, q):.2f} ms "
                f"| {_ms(gateway, q) / _ms(straight, q):.2f}x | {aim} |"
            )
    print(f"| the SDK's `run_code('1 + 1')`: p50 | {_ms(sdk, 50):.2f} ms | | | |")
    if args.smoke:
        print("smoke run: every run answered 2")
        return
    if ratio > GOALS["python ratio"]:
        sys.exit("goals missed: python ratio")


if __name__ == "__main__":
    main()
