"""The watch cache's memory: paged lists, views instead of objects, and a budget per object.

The watcher is driven here by a listing of our own that makes each page as it is asked for,
so that thousands of tenant-sized objects exist only a page at a time, as a paged API server
sends them; `test_watch_cache.py` drives it through the real client against the fake.
"""

import asyncio
import functools
import logging
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from workspace_gateway.backend import NewSandbox
from workspace_gateway.errors import GatewayError
from workspace_gateway.kubernetes.backend import KubernetesBackend
from workspace_gateway.kubernetes.cache import LIST_PAGE, Cache, Watcher
from workspace_gateway.kubernetes.calls import CALL_PAGE
from workspace_gateway.kubernetes.objects import (
    CACHED_LABELS,
    ENV_VARS,
    GROUP,
    ID_LABEL,
    MARK,
    PLURAL,
    POOL_TEMPLATE_LABEL,
    PREFIX,
    VERSION,
    Settings,
    agent_url,
    is_ready,
    manifest,
    mark,
    member_manifest,
    ours,
    refusal_of,
    sandbox_of,
)
from workspace_gateway.kubernetes.pools import made_at, stale
from workspace_gateway.kubernetes.view import MAX_CALLER_NOTES_BYTES, MAX_VIEW_BYTES, Projection

from tests.gateway import kube_fake
from tests.gateway.stand_in import BASE, SEED, eventually

LOOK_ALIKES = 3000
BLOAT = 200 * 1024
PROJECTION = Projection(CACHED_LABELS, PREFIX)
KEEP = functools.partial(ours, seed=SEED)


def look_alike(n: int, bloat: str, *, marked: bool = True) -> dict[str, Any]:
    """The gateway's sandbox that its tenant bloated with labels and 200 KiB of notes; or,
    not `marked`, a tenant's own look-alike of one, which is never cached at all."""
    name = f"{n:020d}"
    namespace = f"tenant-{n % 7}"
    notes = {f"example.com/n{i}": bloat[i : i + len(bloat) // 4] + name for i in range(4)}
    if marked:
        notes[MARK] = mark(SEED, namespace, name)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkspaceSandbox",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": str(n + 1),
            "uid": f"uid-{n}",
            "labels": {ID_LABEL: name, **{f"team.example/l{i}": "v" * 63 for i in range(20)}},
            # Distinct strings per object (not one shared), as the client's parse makes them.
            "annotations": notes,
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:x": name * 50}}],
        },
        "spec": {"image": "ubuntu-24.04", "power": "Running", "extra": "x" * 1000 + name},
        "status": {"phase": "Running", "endpoint": "10.0.0.1", "other": name * 100},
    }


class Pages:
    """A cluster-wide list that makes `count` objects, a page at a time, as asked for."""

    def __init__(self, count: int, make: Any, expire: set[str] | None = None) -> None:
        self.count = count
        self.make = make
        self.calls: list[dict[str, Any]] = []
        self.expire = expire or set()

    def __call__(self, **options: Any) -> dict[str, Any]:
        self.calls.append({k: v for k, v in options.items() if k != "_request_timeout"})
        start = int(options.get("_continue") or 0)
        if options.get("_continue") in self.expire:
            self.expire.discard(options["_continue"])
            raise ApiException(status=410, reason="Expired")
        end = min(self.count, start + (options.get("limit") or self.count))
        metadata: dict[str, Any] = {"resourceVersion": "99"}
        if end < self.count:
            metadata["continue"] = str(end)
        return {"metadata": metadata, "items": [self.make(n) for n in range(start, end)]}


def bloat() -> str:
    return "x" * BLOAT


async def listed(cache: Cache, pages: Pages) -> None:
    watcher = Watcher(pages, cache, asyncio.get_running_loop())
    await asyncio.to_thread(watcher._list)
    await eventually(cache.synced.is_set)


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


async def test_thousands_of_bloated_look_alikes_cost_the_cache_a_few_kib_each(traced: None) -> None:
    del traced
    text = bloat()
    pages = Pages(LOOK_ALIKES, lambda n: look_alike(n, text))
    cache = Cache(KEEP, PROJECTION)
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]

    await listed(cache, pages)

    retained, peak = tracemalloc.get_traced_memory()
    assert len(cache.objects) == LOOK_ALIKES
    per_object = (retained - before) / LOOK_ALIKES
    assert per_object < 4096, f"{per_object:.0f} bytes an object"
    # One page of tenant-sized objects at a time, never the whole list.
    assert peak - before < 4 * LIST_PAGE * (4 * BLOAT), f"peak {(peak - before) >> 20} MiB"
    view = cache.get(("tenant-1", f"{1:020d}"))
    assert view is not None
    assert view["metadata"]["labels"] == {ID_LABEL: f"{1:020d}"}
    assert view["metadata"]["annotations"] == {MARK: mark(SEED, "tenant-1", f"{1:020d}")}
    assert view["spec"] == {"image": "ubuntu-24.04", "power": "Running"}
    assert view["status"] == {"phase": "Running", "endpoint": "10.0.0.1"}


def inflated(n: int, text: str) -> dict[str, Any]:
    """A sandbox whose 200 KiB are under the gateway's own prefix, which the view keeps."""
    obj = look_alike(n, text)
    notes = obj["metadata"]["annotations"]
    obj["metadata"]["annotations"] = {MARK: notes[MARK], f"{PREFIX}x": text[n % 7 :] + str(n)}
    return obj


async def test_thousands_of_unmarked_look_alikes_are_never_cached(traced: None) -> None:
    del traced
    text = bloat()
    cache = Cache(KEEP, PROJECTION)
    before = tracemalloc.get_traced_memory()[0]
    await listed(cache, Pages(LOOK_ALIKES, lambda n: look_alike(n, text, marked=False)))
    retained = tracemalloc.get_traced_memory()[0]
    assert cache.objects == {}
    assert cache.oversized == set()
    per_object = (retained - before) / LOOK_ALIKES
    assert per_object < 64, f"{per_object:.0f} bytes an object"


async def test_objects_over_budget_cost_the_cache_next_to_nothing(traced: None) -> None:
    del traced
    text = bloat()
    cache = Cache(KEEP, PROJECTION)
    before = tracemalloc.get_traced_memory()[0]
    logging.getLogger("workspace_gateway").disabled = True  # the log's records are not the cache
    try:
        await listed(cache, Pages(LOOK_ALIKES, lambda n: inflated(n, text)))
    finally:
        logging.getLogger("workspace_gateway").disabled = False
    retained = tracemalloc.get_traced_memory()[0]
    assert cache.objects == {}
    assert len(cache.oversized) == LOOK_ALIKES
    per_object = (retained - before) / LOOK_ALIKES
    assert per_object < 1024, f"{per_object:.0f} bytes an object"


async def test_an_object_over_budget_is_logged_once_and_cached_again_once_it_fits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = bloat()
    cache = Cache(KEEP, PROJECTION)
    key = ("tenant-1", f"{1:020d}")
    with caplog.at_level(logging.WARNING, logger="workspace_gateway"):
        await listed(cache, Pages(3, lambda n: inflated(n, text)))
        assert len(caplog.records) == 3
        for _ in range(3):  # its changes, and a list again: not logged again
            seen = cache.seen(inflated(1, text))
            assert seen is not None
            cache.apply("MODIFIED", seen)
        await listed(cache, Pages(3, lambda n: inflated(n, text)))
    assert [r.getMessage() for r in caplog.records] == [
        f"tenant-{n}/{n:020d}: larger than the gateway caches; not cached" for n in range(3)
    ]
    assert cache.get(key) is None

    seen = cache.seen(look_alike(1, ""))  # shrunk back under the budget: cached again
    assert seen is not None
    cache.apply("MODIFIED", seen)
    assert cache.get(key) is not None
    assert key not in cache.oversized


async def test_a_list_goes_by_pages_and_an_expired_continue_token_starts_it_again() -> None:
    pages = Pages(2 * LIST_PAGE + 5, lambda n: look_alike(n, ""), expire={str(LIST_PAGE)})
    cache = Cache(KEEP, PROJECTION)
    await listed(cache, pages)
    assert len(cache.objects) == 2 * LIST_PAGE + 5
    first = {"limit": LIST_PAGE}
    second, third = ({"limit": LIST_PAGE, "_continue": str(n * LIST_PAGE)} for n in (1, 2))
    assert pages.calls == [first, second, first, second, third]


async def test_the_watch_lists_by_pages_through_the_client(tmp_path: Path) -> None:
    with kube_fake.serve() as (cluster, url):
        for n in range(LIST_PAGE + 3):
            obj = look_alike(n, "")
            with cluster.lock:
                cluster.put((PLURAL, obj["metadata"]["namespace"], obj["metadata"]["name"]), obj)
        api = config.new_client_from_config(config_file=str(kube_fake.kubeconfig(url, tmp_path)))
        settings = Settings(templates={"base": BASE}, seed=SEED)
        backend = KubernetesBackend(client.CustomObjectsApi(api), settings, httpx.AsyncClient())
        try:
            assert await backend.ready()
            assert len(backend.cache.objects) == LIST_PAGE + 3
            assert [q.get("limit") for q in cluster.lists] == [str(LIST_PAGE)] * 2
            assert "continue" not in cluster.lists[0]
            assert cluster.lists[1]["continue"]
        finally:
            await backend.close()
            api.close()


def full_sandbox(**changes: Any) -> dict[str, Any]:
    """A sandbox as the API server has it: the gateway's writes, and everyone else's."""
    request = NewSandbox(template="base", timeout=300, metadata={"k": "v"}, env_vars={"A": "b"})
    obj = manifest(("team-a", "a" * 20), "base", BASE, request, datetime.now(UTC), seed=SEED)
    obj["metadata"] |= {"namespace": "team-a", "resourceVersion": "7", "generation": 3, "uid": "u"}
    obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
    obj["metadata"]["labels"]["app.kubernetes.io/part-of"] = "x"
    obj["spec"] |= {"crossplane": {"compositionRef": {"name": "c"}}, "network": {}}
    obj["status"] = {
        "phase": "Running",
        "endpoint": "10.1.2.3",
        "atProvider": {"x": "y"},
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Available", "lastTransitionTime": "t"},
            {
                "type": "Synced",
                "status": "False",
                "observedGeneration": 3,
                "message": 'pipeline step "sandbox" returned a fatal result: spec.image: no',
            },
            {"type": "Healthy", "status": "True"},
        ],
    }
    return obj | changes


def test_the_view_answers_every_question_the_gateway_asks_of_a_cached_object() -> None:
    settings = Settings(templates={"base": BASE}, seed=SEED)
    obj = full_sandbox()
    view = PROJECTION(obj)
    assert view is not None
    assert ours(view, SEED)
    assert sandbox_of(view, settings) == sandbox_of(obj, settings)
    assert agent_url(view, 49983) == agent_url(obj, 49983) == "http://10.1.2.3:49983"
    assert refusal_of(view) == refusal_of(obj) == "spec.image: no"
    assert view["metadata"]["annotations"][ENV_VARS] == obj["metadata"]["annotations"][ENV_VARS]
    assert view["metadata"]["generation"] == 3
    assert "crossplane" not in view["spec"]
    assert [c["type"] for c in view["status"]["conditions"]] == ["Ready", "Synced"]

    member = member_manifest(("team-a", "b" * 20), "base", BASE, datetime.now(UTC), seed=SEED)
    member["metadata"] |= {"namespace": "team-a", "resourceVersion": "8"}
    member["metadata"]["annotations"]["gateway.sandbox.cozystack.io/pool-ready"] = "true"
    seen = PROJECTION(member)
    assert seen is not None
    assert is_ready(seen)
    assert seen["metadata"]["labels"][POOL_TEMPLATE_LABEL] == "base"
    assert not stale(seen, BASE)
    epoch = datetime.fromtimestamp(0, UTC)
    assert made_at(seen, epoch) == made_at(member, epoch) != epoch


def test_the_largest_sandbox_a_create_accepts_is_cached_and_a_larger_one_is_refused() -> None:
    settings = Settings(templates={"base": BASE}, seed=SEED)
    # Env vars of a size the create just accepts, and long condition messages.
    size = MAX_CALLER_NOTES_BYTES * 3 // 4 - 400
    request = NewSandbox(template="base", timeout=300, metadata={}, env_vars={"A": "x" * size})
    obj = manifest(("team-a", "a" * 20), "base", BASE, request, datetime.now(UTC), seed=SEED)
    obj["metadata"] |= {"namespace": "team-a", "resourceVersion": "7"}
    obj["metadata"]["annotations"][f"{PREFIX}mark"] = "m" * 64  # room for notes of the gateway's
    obj["status"] = {
        "phase": "Running",
        "conditions": [{"type": t, "status": "False", "message": "m" * 10_000} for t in CONDITIONS],
    }
    view = PROJECTION(obj)
    assert view is not None
    assert sandbox_of(view, settings).namespace == "team-a"

    request = NewSandbox(template="base", timeout=300, metadata={}, env_vars={"A": "x" * 20_000})
    with pytest.raises(GatewayError) as refused:
        manifest(("team-a", "a" * 20), "base", BASE, request, datetime.now(UTC), seed=SEED)
    assert refused.value.status == 400
    assert refused.value.message.startswith("metadata and envVars are too large: ")
    assert refused.value.message.endswith(
        f"bytes once stored on the sandbox, at most {MAX_CALLER_NOTES_BYTES}"
    )
    assert MAX_VIEW_BYTES > MAX_CALLER_NOTES_BYTES


CONDITIONS = ("Ready", "Synced", "Ready", "Synced", "Ready")


async def test_a_call_s_list_goes_by_small_pages_and_keeps_only_the_gateway_s(
    tmp_path: Path,
) -> None:
    """`GET /v2/sandboxes` and `locate`'s fallback read the API server, a few objects at a time:
    a tenant's own objects may each be as large as etcd allows."""
    with kube_fake.serve() as (cluster, url):
        for n in range(2 * CALL_PAGE + 5):
            obj = look_alike(n * 7 + 1, "", marked=n % 2 == 0)  # all in tenant-1, half marked
            with cluster.lock:
                cluster.put((PLURAL, obj["metadata"]["namespace"], obj["metadata"]["name"]), obj)
        api = config.new_client_from_config(config_file=str(kube_fake.kubeconfig(url, tmp_path)))
        settings = Settings(templates={"base": BASE}, seed=SEED)
        backend = KubernetesBackend(client.CustomObjectsApi(api), settings, httpx.AsyncClient())
        try:
            listed = await backend.list("tenant-1")
            assert len(listed) == CALL_PAGE + 3
            assert [q.get("limit") for q in cluster.lists] == [str(CALL_PAGE)] * 3
            one = listed[0].sandbox_id
            assert [s.sandbox_id for s in await backend.locate(one)] == [one]
        finally:
            await backend.close()
            api.close()
