"""What a sandbox namespace costs: each SandboxNamespace preset beside its Namespace preset.

    python -m bench.placement_benchmark            # the run recorded in BENCHMARKS.md
    python -m bench.placement_benchmark --smoke    # 50 calls per case: it works

Pairs of presets with the same runtime: `standard` (KubeVirt VM in the tenant's namespace)
against `isolated` (the same VM in a namespace of its own), `kata` against `isolated-kata`.
Each with two specs: `bare` (nothing but the preset) and `everyday` (a CIDR allow-list and a
snapshot). For each, in one run:

- reconcile rounds from creation to Ready: render, then what a healthy cluster reports for
  what was applied (`tests.cluster.applied`), again and again until the XR is ready; and the
  resources composed in each round, which shows the stages;
- composed resources per sandbox once settled: what Crossplane applies and watches (for the
  SandboxNamespace placement, provider-kubernetes Objects and Usages), and the objects that end
  up in the cluster (those, plus the objects each Object wraps);
- RunFunction time per call, in process through `function.fn.FunctionRunner`, from the
  request's bytes to the response's bytes, on the first call (nothing observed) and on a settled
  sandbox (everything observed and ready, as Crossplane asks every minute): p50 and p99, the two
  presets of a pair called in turn so that noise on this shared machine lands on both;
- request and response bytes of each.

Every answer is checked against the in-process render of the same state: the same resources,
no FATAL result, and, once settled, a ready XR.
"""

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.fn import FunctionRunner
from function.render import Rendered, render
from tests.cluster import applied
from tests.support import NOW, PLATFORM, owned, request, workspace, xr

PAIRS = (("standard", "isolated"), ("kata", "isolated-kata"))
SPECS: dict[str, dict[str, Any]] = {
    "bare": {},
    "everyday": {
        "network": {"egress": "Allowlist", "allow": [{"cidr": "198.41.0.0/24", "ports": [443]}]},
        "snapshots": [{"name": "nightly"}],
    },
}
MAX_ROUNDS = 20


@dataclass(frozen=True)
class Life:
    """One sandbox from creation to Ready in the simulated cluster."""

    rounds: int
    calls: int
    """RunFunction calls: a round whose new names are looked up first takes two."""
    sizes: tuple[int, ...]
    """Resources composed in each round."""
    settled: Rendered
    observed: dict[str, Any]


def _life(spec: dict[str, Any]) -> Life:
    observed: dict[str, Any] = {}
    sizes = []
    calls = 0
    for rounds in range(1, MAX_ROUNDS + 1):
        out = render(workspace(spec), PLATFORM, owned(observed), NOW)
        calls += 1
        if out.requirements:
            # Crossplane fetches what the function requires (here: no object of those names
            # exists) and calls again in the same reconcile, before it applies anything.
            found: dict[str, list[Any]] = {k: [] for k in out.requirements}
            out = render(workspace(spec), PLATFORM, owned(observed), NOW, found)
            calls += 1
        sizes.append(len(out.resources))
        observed = applied(out)
        if out.composite_ready:
            return Life(rounds, calls, tuple(sizes), out, observed)
    sys.exit(f"{spec}: not ready after {MAX_ROUNDS} rounds")


def _in_cluster(out: Rendered) -> tuple[int, int]:
    """Composed resources, and the objects they put in the cluster (an Object's wrapped one too).

    An Object that patches an existing object (disk growth) adds none; none is composed here.
    """
    wrapped = sum(1 for m in out.resources.values() if m["kind"] == "Object")
    return len(out.resources), len(out.resources) + wrapped


def _call(runner: FunctionRunner, raw: bytes) -> tuple[float, fnv1.RunFunctionResponse, int]:
    """Seconds from request bytes to response bytes, the response, and its size."""
    t = time.perf_counter()
    req = fnv1.RunFunctionRequest()
    req.ParseFromString(raw)
    rsp = asyncio.run(runner.RunFunction(req, None))
    size = len(rsp.SerializeToString())
    return time.perf_counter() - t, rsp, size


def _check(rsp: fnv1.RunFunctionResponse, want: Rendered, what: str) -> list[str]:
    wrong = []
    if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
        wrong.append(f"{what}: a FATAL result")
    if sorted(rsp.desired.resources) != sorted(want.resources):
        wrong.append(f"{what}: resources differ from the in-process render")
    ready = rsp.desired.composite.ready == fnv1.READY_TRUE
    if ready != want.composite_ready:
        wrong.append(f"{what}: XR ready {ready}, render says {want.composite_ready}")
    return wrong


def _pct(times: list[float], q: int) -> float:
    return statistics.quantiles(times, n=100)[q - 1] * 1000


def _timed(
    runner: FunctionRunner, pair: dict[str, bytes], calls: int
) -> dict[str, tuple[list[float], int]]:
    """Each preset's request, called in turn, call by call, after 20 warm-up calls each."""
    times: dict[str, list[float]] = {name: [] for name in pair}
    sizes = {}
    for raw in pair.values():
        for _ in range(20):
            _call(runner, raw)
    for _ in range(calls):
        for name, raw in pair.items():
            seconds, _, sizes[name] = _call(runner, raw)
            times[name].append(seconds)
    return {name: (times[name], sizes[name]) for name in pair}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="50 calls per case, no figures kept")
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    calls = 50 if args.smoke else args.calls
    runner = FunctionRunner(clock=lambda: NOW)
    print(
        f"# placement benchmark: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {calls} calls per case, in process"
    )
    objects = [
        (
            "| preset | spec | rounds to Ready | RunFunction calls | resources per round "
            "| composed | in the cluster |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    timing = [
        "| preset | spec | call | p50 | p99 | request bytes | response bytes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    wrong: list[str] = []
    for pair in PAIRS:
        for spec_name, spec in SPECS.items():
            firsts, steadies = {}, {}
            for preset in pair:
                full = {"preset": preset, **spec}
                life = _life(full)
                composed, cluster = _in_cluster(life.settled)
                per_round = " -> ".join(str(n) for n in life.sizes)
                objects.append(
                    f"| {preset} | {spec_name} | {life.rounds} | {life.calls} | {per_round} "
                    f"| {composed} "
                    f"| {cluster} |"
                )
                composite = xr(full)
                first = request(composite).SerializeToString()
                steady = request(composite, life.observed).SerializeToString()
                first_want = render(workspace(full), PLATFORM, {}, NOW)
                for raw, want, what in (
                    (first, first_want, "first"),
                    (steady, life.settled, "settled"),
                ):
                    _, rsp, _ = _call(runner, raw)
                    wrong += _check(rsp, want, f"{preset} {spec_name} {what}")
                firsts[preset], steadies[preset] = first, steady
            for what, reqs in (("first", firsts), ("settled", steadies)):
                for preset, (times, size) in _timed(runner, reqs, calls).items():
                    timing.append(
                        f"| {preset} | {spec_name} | {what} | {_pct(times, 50):.3f} ms "
                        f"| {_pct(times, 99):.3f} ms | {len(reqs[preset])} | {size} |"
                    )
    print("\n".join(objects))
    print()
    print("\n".join(timing))
    if wrong:
        print(f"\n{len(wrong)} wrong answers, first: {wrong[0]}")
        return 1
    print("\nevery answer matched the in-process render")
    return 0


if __name__ == "__main__":
    sys.exit(main())
