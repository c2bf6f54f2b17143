"""The agent through the real SDK, each measure beside its floor on this machine, in one run.

    python -m bench.agent_benchmark            # the run recorded in BENCHMARKS.md
    python -m bench.agent_benchmark --smoke    # a few commands and a small file: it works

- Commands: `Sandbox.commands.run("true")` (what an agent product pays for its smallest
  command: HTTP, Connect, spawning `bash -l -c true` as the sandbox's user, streaming its end)
  against spawning `bash -l -c true` directly, the two called in turn so that noise on this
  shared machine lands on both.
- Files: a 64 MiB file written and read through the SDK against copying it locally, hashes
  checked.
- Leaks: the agent's RSS and open file descriptors after a warm-up and after 1,000 more
  commands.

The agent runs as its own process, as root with `nobody` as its default user, as in a VM: each
command pays for switching to its user. The floor spawns the same `bash -l` as the same user,
with the environment and working directory the agent gives it (root's own profile would make
both sides slow and the ratio meaningless). Not as root, both run as this user.
"""

import argparse
import hashlib
import os
import platform
import pwd
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from e2b import ConnectionConfig, Sandbox

from tests.ports import free_port

MIB = 1024 * 1024
GOALS = {"command ratio": 3.0, "write MiB/s": 100.0, "read MiB/s": 100.0}


USER = pwd.getpwnam("nobody") if os.geteuid() == 0 else pwd.getpwuid(os.geteuid())
# What the agent gives a command (launch.py): its PATH, the user, the workspace as home and cwd.
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASH = ["/bin/bash", "-l", "-c", "true"]


TOKEN = secrets.token_hex(32)


def _start(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    agent = Path(sys.executable).with_name("workspace-sandbox-agent")
    cmd = [
        str(agent),
        "--address",
        f"127.0.0.1:{port}",
        "--root",
        str(root),
        "--user",
        USER.pw_name,
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen(cmd)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == httpx.codes.NO_CONTENT:
                # As the gateway does: the agent serves no one until /init gives it a token.
                init = httpx.post(url + "/init", json={"accessToken": TOKEN}, timeout=5)
                if init.status_code != httpx.codes.NO_CONTENT:
                    sys.exit(f"the agent refused /init: {init.text}")
                return process, url
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    sys.exit("the agent did not answer /health")


def _holding_token(created: Sandbox) -> Sandbox:
    """The SDK's debug-mode sandbox, holding the token as a create through the gateway does."""
    return Sandbox(
        sandbox_id=created.sandbox_id,
        sandbox_domain=created.sandbox_domain,
        envd_version=created._envd_version,  # what create passes
        envd_access_token=TOKEN,
        traffic_access_token=None,
        connection_config=ConnectionConfig(extra_sandbox_headers={"X-Access-Token": TOKEN}),
    )


def _ms(times: list[float], q: int) -> float:
    return statistics.quantiles(times, n=100)[q - 1] * 1000


def _bash(root: Path) -> None:
    env = {"PATH": PATH, "HOME": str(root), "USER": USER.pw_name, "LOGNAME": USER.pw_name}
    as_user = {}
    if os.geteuid() == 0:
        as_user = {"user": USER.pw_uid, "group": USER.pw_gid, "extra_groups": []}
    subprocess.run(BASH, env=env, cwd=root, check=True, **as_user)


def _commands(sbx: Sandbox, root: Path, calls: int) -> tuple[list[float], list[float]]:
    ours: list[float] = []
    floor: list[float] = []
    for _ in range(20):
        sbx.commands.run("true")
        _bash(root)
    for _ in range(calls):
        t = time.perf_counter()
        sbx.commands.run("true")
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        _bash(root)
        floor.append(time.perf_counter() - t)
    return ours, floor


def _files(sbx: Sandbox, scratch: Path, size: int) -> dict[str, float]:
    source = scratch / "source.bin"
    with source.open("wb") as f:
        for _ in range(size // MIB):
            f.write(os.urandom(MIB))
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    out: dict[str, float] = {}

    t = time.perf_counter()
    shutil.copyfile(source, scratch / "copy.bin")
    out["local copy MiB/s"] = size / MIB / (time.perf_counter() - t)

    t = time.perf_counter()
    with source.open("rb") as f:
        sbx.files.write("bench/big.bin", f)
    out["write MiB/s"] = size / MIB / (time.perf_counter() - t)

    t = time.perf_counter()
    h = hashlib.sha256()
    for chunk in sbx.files.read("bench/big.bin", format="stream"):
        h.update(chunk)
    out["read MiB/s"] = size / MIB / (time.perf_counter() - t)
    if h.hexdigest() != digest:
        sys.exit("the file read back differs from the file written")
    return out


def _usage(pid: int) -> tuple[float, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return rss / 1024, len(os.listdir(f"/proc/{pid}/fd"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="a few calls: it works")
    args = parser.parse_args()
    calls, size, soak = (20, 4 * MIB, 50) if args.smoke else (500, 64 * MIB, 1000)

    with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
        root, scratch = Path(tmp, "workspace"), Path(tmp, "scratch")
        root.mkdir()
        scratch.mkdir()
        Path(tmp).chmod(0o755)
        os.chown(root, USER.pw_uid, USER.pw_gid)
        process, url = _start(root)
        os.environ.update(E2B_DEBUG="true", E2B_SANDBOX_URL=url)
        try:
            sbx = _holding_token(Sandbox.create())
            ours, floor = _commands(sbx, root, calls)
            files = _files(sbx, scratch, size)
            before = _usage(process.pid)
            for _ in range(soak):
                sbx.commands.run("true")
            after = _usage(process.pid)
        finally:
            process.terminate()
            process.wait(10)

    print(
        f"# agent benchmark: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {calls} command pairs, {size // MIB} MiB file"
    )
    print("| measure | agent | floor | ratio | goal |")
    print("| --- | --- | --- | --- | --- |")
    ratio = statistics.median(ours) / statistics.median(floor)
    print(
        f"| commands.run('true'): p50 | {_ms(ours, 50):.2f} ms | {_ms(floor, 50):.2f} ms "
        f"| {ratio:.2f}x | at most {GOALS['command ratio']:.0f}x |"
    )
    print(
        f"| commands.run('true'): p90 | {_ms(ours, 90):.2f} ms | {_ms(floor, 90):.2f} ms "
        f"| {_ms(ours, 90) / _ms(floor, 90):.2f}x | |"
    )
    local = files["local copy MiB/s"]
    for way in ("write", "read"):
        got = files[f"{way} MiB/s"]
        print(
            f"| {size // MIB} MiB {way} through the SDK | {got:.0f} MiB/s | {local:.0f} MiB/s "
            f"| {got / local:.2f}x | at least {GOALS[f'{way} MiB/s']:.0f} MiB/s |"
        )
    print(
        f"| agent RSS before / after {soak} commands | {before[0]:.1f} MiB | {after[0]:.1f} MiB "
        f"| {after[0] - before[0]:+.1f} MiB | flat |"
    )
    print(
        f"| agent open fds before / after {soak} commands | {before[1]} | {after[1]} "
        f"| {after[1] - before[1]:+d} | flat |"
    )
    if args.smoke:
        print("smoke run: every command answered and the file read back matched")
        return
    missed = [
        name
        for name, ok in (
            ("command ratio", ratio <= GOALS["command ratio"]),
            ("write MiB/s", files["write MiB/s"] >= GOALS["write MiB/s"]),
            ("read MiB/s", files["read MiB/s"] >= GOALS["read MiB/s"]),
            ("fds flat", after[1] <= before[1] + 2),
        )
        if not ok
    ]
    if missed:
        sys.exit(f"goals missed: {', '.join(missed)}")


if __name__ == "__main__":
    main()
