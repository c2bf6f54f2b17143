"""A rendered pod's start under runc and runsc, beside the agent's own start, in one run.

    sudo .venv/bin/python -m bench.pod_benchmark            # the figures
    sudo .venv/bin/python -m bench.pod_benchmark --smoke    # one round: it works

- Container start to the agent's first `/health`: the `gvisor` preset's pod as the function
  renders it (the image's own launcher), `runc run --detach` or `runsc run --detach` on its
  bundle in a network namespace of its own, then `/health` polled every 10 ms at the pod's
  address. The goal: the agent answers within 1 s of its container's start.
- The same with the agent delivered: from the pod's start (its init container copying the
  bundle into an emptyDir, to completion) to the first `/health`.
- The agent's own start, the floor: the same launcher in the same image's root, by `chroot` as
  the pod's user on loopback, no runtime and no namespace.

Each round runs every measure once, the runtimes in turn, so noise on a shared machine lands on
all. Needs root and the images `scripts/test-images sandbox` and `runsc` build (the pod tier's;
docs/development.md, "The pod tier").
"""

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.boot import pod_host
from tests.boot.pod_render import pods
from tests.placements import settled
from tests.support import AGENT_PLATFORM, PLATFORM

GOAL_SECONDS = 1.0
HEALTH_SECONDS = 30
FLOOR_ADDRESS = "127.0.0.1"


def _pod_start(runtime: str, images: pod_host.Images, *, delivered: bool) -> float:
    """Seconds to the first /health: from the container's run, or with `delivered` from the
    pod's (its init container first)."""
    ((hostname, spec),) = pods(settled("gvisor", AGENT_PLATFORM if delivered else PLATFORM))
    with tempfile.TemporaryDirectory(prefix="pod-bench-") as tmp:
        workspace = Path(tmp, "workspace")
        workspace.mkdir()
        with pod_host.Netns.made() as netns:
            pod = pod_host.RunningPod(
                runtime, images, spec, hostname, Path(tmp, "pod"), netns, workspace
            )
            try:
                began = time.monotonic()
                pod.start()
                to_health = pod.started_to_healthy()
                return time.monotonic() - began if delivered else to_health
            finally:
                pod.close()


def _agent_alone(images: pod_host.Images, port: int) -> float:
    """Seconds from exec to the first /health of the image's launcher, chrooted, no runtime."""
    root = images.sandbox / "root"
    url = f"http://{FLOOR_ADDRESS}:{port}/health"
    began = time.monotonic()
    process = subprocess.Popen(
        [
            _tool("chroot"), "--userspec=1000:1000", root, "/usr/local/bin/workspace-sandbox-agent",
            "--address", f"{FLOOR_ADDRESS}:{port}", "--root", "/workspace",
            "--log-level", "warning",
        ],
        env={"HOME": "/workspace", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    try:
        deadline = began + HEALTH_SECONDS
        with httpx.Client(timeout=1) as client:
            while time.monotonic() < deadline:
                try:
                    client.get(url)
                    return time.monotonic() - began
                except httpx.TransportError:
                    time.sleep(0.01)
        raise RuntimeError("the agent alone did not answer")
    finally:
        process.terminate()
        process.wait(10)


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"pod benchmark: needs {name}")
    return found


def _version(*command: str | Path) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()[0]


def _row(name: str, seconds: list[float], goal: str = "") -> str:
    return (
        f"| {name} | {statistics.median(seconds) * 1000:.0f} ms | {min(seconds) * 1000:.0f} ms "
        f"| {max(seconds) * 1000:.0f} ms | {goal} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="one round: it works")
    args = parser.parse_args()
    rounds = 1 if args.smoke else 5
    images = pod_host.Images(
        sandbox=pod_host.built("sandbox"), runsc=pod_host.built("runsc") / "runsc"
    )
    found: dict[str, list[float]] = {}
    measures: list[tuple[str, Callable[[], float]]] = [
        ("the agent alone (chroot, no runtime)", lambda: _agent_alone(images, 49983)),
    ]
    for runtime in pod_host.RUNTIMES:
        measures += [
            (
                f"{runtime}: container start to first /health",
                lambda r=runtime: _pod_start(r, images, delivered=False),
            ),
            (
                f"{runtime}: pod start to first /health, agent delivered (init container)",
                lambda r=runtime: _pod_start(r, images, delivered=True),
            ),
        ]
    with pod_host.egress():
        for _ in range(rounds):
            for name, measure in measures:
                found.setdefault(name, []).append(measure())

    print(
        f"# pod benchmark: {platform.machine()}, {os.cpu_count()} CPUs, {rounds} rounds, "
        f"{_version(images.runsc, '--version')}, {_version(_tool('runc'), '--version')}"
    )
    print("| measure | median | min | max | goal |")
    print("| --- | --- | --- | --- | --- |")
    for name, seconds in found.items():
        goal = (
            f"within {GOAL_SECONDS:.0f} s"
            if name.endswith("container start to first /health")
            else ""
        )
        print(_row(name, seconds, goal))
    if args.smoke:
        print("smoke run: every pod's agent answered")


if __name__ == "__main__":
    main()
