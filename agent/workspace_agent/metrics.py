"""envd's `GET /metrics`: one sample of the sandbox's CPU, memory and workspace disk.

What the sandbox itself sees, as envd reads it: `/proc/stat` and `/proc/meminfo` are the guest
kernel's in a VM and a Kata pod, and gVisor's own in a gVisor pod. The CPU count is the cores
this process may run on, lowered to the cgroup's `cpu.max` quota where one is set. CPU use is
the busy share of all cores since the previous sample, or over a tenth of a second for the
first; memory used is `MemTotal - MemAvailable`, the page cache `Cached`; the disk is the
filesystem of the workspace root.
"""

import asyncio
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CGROUP = Path("/sys/fs/cgroup")
FIRST_WINDOW = 0.1
"""Seconds between the two readings of a first sample."""


@dataclass(frozen=True)
class Ticks:
    busy: int
    total: int


def read_ticks(proc: Path = PROC) -> Ticks:
    """All cores' time from `/proc/stat`'s first line; idle and iowait are the idle part."""
    fields = (proc / "stat").read_text().splitlines()[0].split()
    assert fields[0] == "cpu", fields[0]  # noqa: S101  # the kernel's documented format
    values = [int(v) for v in fields[1:]]
    # user nice system idle iowait irq softirq steal; guest time is counted in user already.
    total = sum(values[:8])
    idle = values[3] + values[4]
    return Ticks(total - idle, total)


def busy_percent(before: Ticks, after: Ticks) -> float:
    elapsed = after.total - before.total
    if elapsed <= 0:
        return 0.0
    return round(100.0 * (after.busy - before.busy) / elapsed, 2)


def read_memory(proc: Path = PROC) -> tuple[int, int, int]:
    """Total, used and cached bytes from `/proc/meminfo`."""
    kib = {}
    for line in (proc / "meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        kib[name] = int(rest.split()[0])
    total = kib["MemTotal"] * 1024
    available = kib.get("MemAvailable", kib["MemFree"]) * 1024
    return total, total - available, kib.get("Cached", 0) * 1024


def cpu_count(cgroup: Path = CGROUP) -> int:
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()
    except (OSError, ValueError):
        return cores
    if quota == "max":
        return cores
    return max(1, min(cores, math.ceil(int(quota) / int(period))))


def read_disk(root: Path) -> tuple[int, int]:
    """Total and used bytes of the filesystem holding `root`."""
    stat = os.statvfs(root)
    return stat.f_blocks * stat.f_frsize, (stat.f_blocks - stat.f_bfree) * stat.f_frsize


class Sampler:
    """Samples for one agent; CPU use is measured from one sample to the next."""

    def __init__(self, root: Path, proc: Path = PROC, cgroup: Path = CGROUP) -> None:
        self.root, self.proc, self.cgroup = root, proc, cgroup
        self._last: Ticks | None = None

    async def sample(self) -> dict[str, int | float]:
        before = self._last
        if before is None:
            before = read_ticks(self.proc)
            await asyncio.sleep(FIRST_WINDOW)
        now = read_ticks(self.proc)
        self._last = now
        mem_total, mem_used, mem_cache = read_memory(self.proc)
        disk_total, disk_used = read_disk(self.root)
        return {
            "ts": int(time.time()),
            "cpu_count": cpu_count(self.cgroup),
            "cpu_used_pct": busy_percent(before, now),
            "mem_total": mem_total,
            "mem_used": mem_used,
            "mem_cache": mem_cache,
            "mem_total_mib": mem_total // 2**20,
            "mem_used_mib": mem_used // 2**20,
            "disk_used": disk_used,
            "disk_total": disk_total,
        }
