"""envd's `GET /metrics`: a sample of what the sandbox sees, for whoever holds the token."""

import os
from pathlib import Path

import pytest
from workspace_agent.metrics import (
    Sampler,
    Ticks,
    busy_percent,
    cpu_count,
    read_memory,
    read_ticks,
)

from tests.agent.sdk.agents import start, stop

pytestmark = pytest.mark.e2e  # starts agents or gateways

MEMINFO = """MemTotal:        4000000 kB
MemFree:          500000 kB
MemAvailable:    3000000 kB
Buffers:           10000 kB
Cached:          2000000 kB
"""


def fake_proc(folder: Path, *, stat: str, meminfo: str = MEMINFO) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stat").write_text(stat + "cpu0 1 2 3 4 5 6 7 8 0 0\nintr 1\n")
    (folder / "meminfo").write_text(meminfo)
    return folder


def test_cpu_use_is_the_busy_share_of_all_cores_between_two_readings(tmp_path: Path) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    before = read_ticks(fake_proc(tmp_path / "a", stat="cpu  100 0 50 800 50 0 0 0 30 0\n"))
    after = read_ticks(fake_proc(tmp_path / "b", stat="cpu  250 0 100 950 100 0 0 0 60 0\n"))
    assert before == Ticks(busy=150, total=1000)
    assert after == Ticks(busy=350, total=1400)
    assert busy_percent(before, after) == 50.0
    assert busy_percent(after, after) == 0.0


def test_memory_used_is_what_is_not_available(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, stat="cpu  1 0 0 1 0 0 0 0 0 0\n")
    assert read_memory(proc) == (4000000 * 1024, 1000000 * 1024, 2000000 * 1024)


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [("150000 100000\n", 2), ("50000 100000\n", 1), ("max 100000\n", None), (None, None)],
)
def test_the_cpu_count_is_lowered_to_the_cgroup_quota(
    tmp_path: Path, cpu_max: str | None, expected: int | None
) -> None:
    if cpu_max is not None:
        (tmp_path / "cpu.max").write_text(cpu_max)
    cores = len(os.sched_getaffinity(0))
    assert cpu_count(tmp_path) == (cores if expected is None else min(cores, expected))


async def test_a_first_sample_measures_over_a_short_window(tmp_path: Path) -> None:
    sampler = Sampler(tmp_path)
    first = await sampler.sample()
    second = await sampler.sample()
    for sample in (first, second):
        assert 0.0 <= sample["cpu_used_pct"] <= 100.0
        assert 0 < sample["mem_used"] < sample["mem_total"]
        assert 0 < sample["disk_used"] <= sample["disk_total"]
    stat = os.statvfs(tmp_path)
    assert first["disk_total"] == stat.f_blocks * stat.f_frsize


def test_the_agent_serves_a_sample_to_the_token_only(workspace: Path) -> None:
    agent = start(workspace)
    try:
        refused = agent.get("/metrics", headers={"X-Access-Token": "wrong"})
        assert refused.status_code == 401
        answer = agent.get("/metrics")
        assert answer.status_code == 200, answer.text
        sample = answer.json()
        assert set(sample) == {
            "ts",
            "cpu_count",
            "cpu_used_pct",
            "mem_total",
            "mem_used",
            "mem_cache",
            "mem_total_mib",
            "mem_used_mib",
            "disk_used",
            "disk_total",
        }
        total_kib = int(Path("/proc/meminfo").read_text().split()[1])
        assert sample["mem_total"] == total_kib * 1024
        assert sample["mem_total_mib"] == sample["mem_total"] // 2**20
        assert sample["cpu_count"] >= 1
        stat = os.statvfs(workspace)
        assert sample["disk_total"] == stat.f_blocks * stat.f_frsize
    finally:
        stop(agent)
