"""What the gateway exposes to Prometheus, on a listener of its own (`--metrics-address`).

Each gateway gets its own registry, not the library's process-wide default, so that tests and
several gateways in one process never share counters.
"""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Hand-out is meant to be about a second; a cold create is tens of seconds.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
POOL = ("namespace", "template")


class Metrics:
    """The warm pools' figures: members ready by temperature, hits, misses and latencies."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.pool_size = Gauge(
            "workspace_gateway_pool_members",
            "Pool members ready to hand out",
            (*POOL, "temperature"),
            registry=self.registry,
        )
        self.hits = Counter(
            "workspace_gateway_pool_hits",
            "Creates answered from a pool",
            POOL,
            registry=self.registry,
        )
        self.misses = Counter(
            "workspace_gateway_pool_misses",
            "Creates that found the pool empty and created cold",
            POOL,
            registry=self.registry,
        )
        self.handout_seconds = Histogram(
            "workspace_gateway_pool_handout_seconds",
            "From a create's arrival to its answer, by whether the pool had a member",
            (*POOL, "result"),
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.topup_seconds = Histogram(
            "workspace_gateway_pool_topup_seconds",
            "From making a pool member to its being ready to hand out",
            POOL,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def served(self, namespace: str, template: str, *, hit: bool, seconds: float) -> None:
        """One create answered: from the pool (`hit`) or cold."""
        (self.hits if hit else self.misses).labels(namespace, template).inc()
        result = "hit" if hit else "miss"
        self.handout_seconds.labels(namespace, template, result).observe(seconds)

    def topped_up(self, namespace: str, template: str, seconds: float) -> None:
        self.topup_seconds.labels(namespace, template).observe(seconds)

    def members(self, namespace: str, template: str, temperature: str, count: int) -> None:
        self.pool_size.labels(namespace, template, temperature).set(count)
