"""A pooled local gateway through the real SDK, its `/metrics` scraped on the second listener."""

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from e2b import Sandbox
from prometheus_client.parser import text_string_to_metric_families

from tests.ports import free_port

pytestmark = pytest.mark.e2e  # starts agents or gateways

GATEWAY = Path(sys.executable).with_name("workspace-sandbox-gateway")
KEY = "e2b_" + "cd" * 20


@dataclass
class Pooled:
    url: str
    metrics_url: str
    process: "subprocess.Popen[str]"


def scrape(url: str) -> dict[str, float]:
    """Every sample of the local pool, by name and (for the histogram) result."""
    text = httpx.get(url + "/metrics", timeout=5).text
    return {
        s.name + "".join(f"/{s.labels[k]}" for k in ("result", "le") if k in s.labels): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("namespace") == "local"
    }


def wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.fixture
def pooled(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pooled]:
    port, metrics_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            *(str(GATEWAY), "--local", "--address", f"127.0.0.1:{port}", "--api-key", KEY),
            *("--metrics-address", f"127.0.0.1:{metrics_port}", "--pool-size", "2"),
            *("--log-level", "info"),  # the audit log's level
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    gateway = Pooled(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}", process)

    def full() -> bool:
        try:
            got = scrape(gateway.metrics_url)
        except httpx.TransportError:
            return False
        return got.get("workspace_gateway_pool_members") == 2  # the size

    for name in [n for n in os.environ if n.startswith("E2B_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("E2B_API_KEY", KEY)
    monkeypatch.setenv("E2B_API_URL", gateway.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", gateway.url)
    try:
        wait_for(full, "the pool did not fill")
        yield gateway
    finally:
        process.terminate()
        process.wait(20)


def test_a_pool_hit_through_the_sdk_is_counted_audited_and_refilled(pooled: Pooled) -> None:
    sandbox = Sandbox.create(envs={"GREETING": "hello"}, metadata={"who": "me"}, timeout=120)
    try:
        assert sandbox.commands.run("echo $GREETING").stdout == "hello\n"
        assert sandbox.get_info().metadata == {"who": "me"}
        got = scrape(pooled.metrics_url)
        assert got["workspace_gateway_pool_hits_total"] == 1
        assert got.get("workspace_gateway_pool_misses_total", 0) == 0
        assert got["workspace_gateway_pool_handout_seconds_count/hit"] == 1
        # Taken members are replaced in the background.
        wait_for(
            lambda: scrape(pooled.metrics_url)["workspace_gateway_pool_members"] == 2,
            "the pool was not topped up",
        )
        assert scrape(pooled.metrics_url)["workspace_gateway_pool_topup_seconds_count"] == 3
    finally:
        sandbox.kill()
    # The figures are not on the public listener, with or without a key.
    for headers in ({}, {"X-API-Key": KEY}):
        public = httpx.get(pooled.url + "/metrics", headers=headers)
        assert public.status_code in {401, 404}
        assert "workspace_gateway_pool" not in public.text
    assert httpx.get(pooled.metrics_url + "/").status_code == 404
    pooled.process.terminate()
    out, _ = pooled.process.communicate(timeout=20)
    creates = [
        json.loads(line)
        for line in out.splitlines()
        if line.startswith("{") and '"POST /sandboxes"' in line
    ]
    assert [c["pool"] for c in creates] == ["hit"]
    assert creates[0]["durationMs"] > 0


def test_a_taken_metrics_address_is_one_line() -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        done = subprocess.run(
            [
                *(str(GATEWAY), "--local", "--address", f"127.0.0.1:{port}", "--api-key", KEY),
                *("--metrics-address", f"127.0.0.1:{busy}"),
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert done.returncode != 0
    assert "--metrics-address" in done.stderr
    assert "Traceback" not in done.stderr
