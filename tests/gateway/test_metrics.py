"""The gateway's Prometheus figures, read back in the exposition format Prometheus scrapes."""

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from workspace_gateway.metrics import Metrics


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_hits_misses_latencies_and_sizes_are_exposed_per_pool() -> None:
    metrics = Metrics()
    metrics.served("team-a", "base", hit=True, seconds=0.3)
    metrics.served("team-a", "base", hit=True, seconds=0.2)
    metrics.served("team-a", "base", hit=False, seconds=40)
    metrics.topped_up("team-a", "base", 35)
    metrics.members("team-a", "base", "suspended", 3)
    got = samples(metrics)
    pool = (("namespace", "team-a"), ("template", "base"))
    assert got["workspace_gateway_pool_hits_total", pool] == 2
    assert got["workspace_gateway_pool_misses_total", pool] == 1
    hits = tuple(sorted((*pool, ("result", "hit"))))
    assert got["workspace_gateway_pool_handout_seconds_count", hits] == 2
    assert got["workspace_gateway_pool_handout_seconds_sum", hits] == 0.5
    assert (
        got["workspace_gateway_pool_handout_seconds_bucket", tuple(sorted((*hits, ("le", "0.25"))))]
        == 1
    )
    assert got["workspace_gateway_pool_topup_seconds_count", pool] == 1
    members = tuple(sorted((*pool, ("temperature", "suspended"))))
    assert got["workspace_gateway_pool_members", members] == 3


def test_two_gateways_in_one_process_keep_their_own_figures() -> None:
    one, two = Metrics(), Metrics()
    one.served("team-a", "base", hit=True, seconds=0.1)
    pool = (("namespace", "team-a"), ("template", "base"))
    assert samples(one)["workspace_gateway_pool_hits_total", pool] == 1
    assert ("workspace_gateway_pool_hits_total", pool) not in samples(two)
