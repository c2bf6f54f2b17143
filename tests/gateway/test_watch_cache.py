"""The Kubernetes backend's watch cache, through the real client against the fake API server.

No platform runs here: objects are written straight into the fake, as another replica or the
platform would, and the backend must see them through its one watch.
"""

import copy
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config
from workspace_gateway.kubernetes.backend import KubernetesBackend
from workspace_gateway.kubernetes.cache import Allowance
from workspace_gateway.kubernetes.calls import FALLBACK_BURST, FALLBACK_PER_SECOND
from workspace_gateway.kubernetes.objects import (
    END,
    GROUP,
    ID_LABEL,
    MARK,
    PLURAL,
    VERSION,
    Settings,
    access_token,
    mark,
)

from tests.gateway import kube_fake
from tests.gateway.stand_in import BASE, SEED, eventually

pytestmark = pytest.mark.e2e  # starts agents or gateways

EVERYWHERE = f"/apis/{GROUP}/{VERSION}/{PLURAL}"


@dataclass
class Fixture:
    cluster: kube_fake.Cluster
    backend: KubernetesBackend

    def put(
        self,
        namespace: str,
        name: str,
        label: str | None = None,
        *,
        marked: bool = True,
        **status: Any,
    ) -> None:
        """An object of the gateway's as another replica makes it; `marked=False`, a tenant's."""
        obj = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "WorkspaceSandbox",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {ID_LABEL: label or name},
                "annotations": {MARK: mark(SEED, namespace, name)} if marked else {},
            },
            "spec": {"image": "ubuntu-24.04", "power": "Running"},
            "status": status,
        }
        with self.cluster.lock:
            self.cluster.put((PLURAL, namespace, name), obj)

    def lists(self) -> int:
        """Lists across all namespaces, watches aside."""
        every = sum(1 for m, p, _ in self.cluster.requests if (m, p) == ("GET", EVERYWHERE))
        return every - len(self.cluster.history.watches)


def watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sandbox-watch"]


@pytest.fixture
async def watched(tmp_path: Path) -> AsyncIterator[Fixture]:
    with kube_fake.serve() as (cluster, url):
        api = config.new_client_from_config(config_file=str(kube_fake.kubeconfig(url, tmp_path)))
        settings = Settings(templates={"base": BASE}, seed=SEED)
        backend = KubernetesBackend(client.CustomObjectsApi(api), settings, httpx.AsyncClient())
        try:
            yield Fixture(cluster, backend)
        finally:
            await backend.close()
            api.close()
        assert watch_threads() == []


A, B, C = "a" * 20, "b" * 20, "c" * 20


async def test_the_cache_follows_creates_updates_and_deletes(watched: Fixture) -> None:
    watched.put("team-a", A)
    watched.put("team-a", "d" * 20, label="someone-else")  # not the gateway's: never cached
    watched.put("team-a", "e" * 20, marked=False)  # a tenant's look-alike: never cached
    copied = copy.deepcopy(watched.cluster.objects[PLURAL, "team-a", A])
    copied["metadata"]["namespace"] = "team-b"  # a mark copied to another namespace
    with watched.cluster.lock:
        watched.cluster.put((PLURAL, "team-b", A), copied)
    watched.backend.start()
    cache = watched.backend.cache
    await eventually(cache.synced.is_set)
    assert [o["metadata"]["namespace"] for o in cache.named(A)] == ["team-a"]
    assert cache.named("d" * 20) == []
    assert cache.named("e" * 20) == []
    with watched.cluster.lock:
        watched.cluster.remove((PLURAL, "team-b", A))

    watched.put("team-b", B)
    await eventually(lambda: cache.get(("team-b", B)) is not None)
    watched.put("team-b", B, phase="Running")
    await eventually(lambda: (cache.get(("team-b", B)) or {})["status"] == {"phase": "Running"})
    with watched.cluster.lock:
        watched.cluster.remove((PLURAL, "team-a", A))
    await eventually(lambda: cache.get(("team-a", A)) is None)
    assert cache.named(A) == []
    assert watched.lists() == 1  # one list, then nothing but the watch


async def test_a_dropped_watch_resumes_where_it_was_and_a_410_lists_again(
    watched: Fixture,
) -> None:
    watched.put("team-a", A)
    watched.backend.start()
    cache, history = watched.backend.cache, watched.cluster.history
    await eventually(lambda: cache.get(("team-a", A)) is not None)
    assert watched.lists() == 1
    await eventually(lambda: len(history.watches) == 1)  # the watch after the list is open

    history.drop()  # the API server restarts: the watch resumes from its last version
    await eventually(lambda: len(history.watches) == 2)
    watched.put("team-a", B)
    await eventually(lambda: cache.get(("team-a", B)) is not None)
    first, second = (int(w["resourceVersion"]) for w in history.watches)
    assert second >= first
    assert watched.lists() == 1

    # Cut off for a while (its reconnections refused), it misses a sandbox going and another
    # coming, and the history it would resume from is compacted away: the 410 makes it list
    # again, and the list is the truth.
    history.refusing = True
    history.drop()
    await eventually(lambda: len(history.watches) >= 4)  # refused, and retried
    with watched.cluster.lock:
        watched.cluster.remove((PLURAL, "team-a", A))
    watched.put("team-b", C)
    history.compact()
    history.refusing = False
    await eventually(lambda: cache.get(("team-b", C)) is not None)
    assert cache.get(("team-a", A)) is None
    assert cache.get(("team-a", B)) is not None
    assert watched.lists() == 2


async def test_locate_answers_from_the_cache_and_bounds_the_lists_a_miss_costs(
    watched: Fixture,
) -> None:
    watched.put("team-a", A, phase="Running")
    watched.backend.start()
    await eventually(watched.backend.cache.synced.is_set)
    await eventually(lambda: len(watched.cluster.history.watches) == 1)  # the list's, then its
    before = len(watched.cluster.requests)
    for _ in range(20):
        found = await watched.backend.locate(A)
        assert [s.namespace for s in found] == ["team-a"]
    assert len(watched.cluster.requests) == before

    # Another replica's sandbox the watch has not told of yet: one direct list finds it.
    hidden = {
        "metadata": {
            "name": B,
            "namespace": "team-b",
            "labels": {ID_LABEL: B},
            "annotations": {MARK: mark(SEED, "team-b", B)},
        },
        "spec": {"power": "Running"},
        "resourceVersion": "1",
    }
    with watched.cluster.lock:
        watched.cluster.objects[PLURAL, "team-b", B] = hidden
    (found_b,) = await watched.backend.locate(B)
    assert found_b.access_token == access_token(SEED, "team-b", B)
    assert len(watched.cluster.requests) == before + 1

    # A flood of made-up IDs: never more lists than the allowance holds.
    began = time.monotonic()
    for n in range(200):
        assert await watched.backend.locate(f"{n:020d}") == ()
    allowed = FALLBACK_BURST + FALLBACK_PER_SECOND * (time.monotonic() - began) + 1
    made = len(watched.cluster.requests) - before - 1
    assert 1 <= made <= allowed
    assert made < 200


async def test_close_stops_the_watch_thread_even_on_a_silent_stream(watched: Fixture) -> None:
    watched.backend.start()
    await eventually(lambda: len(watched.cluster.history.watches) == 1)
    thread = watched.backend.watcher.thread if watched.backend.watcher else None
    assert thread is not None
    assert thread.is_alive()
    began = time.monotonic()
    await watched.backend.close()
    assert time.monotonic() - began < 2
    assert not thread.is_alive()
    assert watch_threads() == []
    watched.backend.start()  # closed for good: nothing starts again
    assert watch_threads() == []


def test_the_allowance_refills_at_its_rate_and_holds_no_more_than_its_burst() -> None:
    allowance = Allowance(rate=2, burst=3, now=0)
    assert [allowance.take(0) for _ in range(4)] == [True, True, True, False]
    assert allowance.take(0.4) is False
    assert allowance.take(0.5) is True
    assert [allowance.take(100) for _ in range(4)] == [True, True, True, False]


async def test_the_reaper_reads_the_cache_and_spares_a_sandbox_extended_meanwhile(
    watched: Fixture,
) -> None:
    """A round lists nothing; a delete on a stale view is refused 409 and the sandbox kept."""
    ended = datetime.now(UTC) - timedelta(seconds=5)
    for name in ("a" * 20, "b" * 20):
        watched.put("team-a", name)
        watched.cluster.update(
            (PLURAL, "team-a", name),
            lambda o: o["metadata"]["annotations"].update({END: ended.isoformat()}),
        )
    await watched.backend.locate("a" * 20)  # starts the watch
    await eventually(lambda: len(watched.backend.cache.objects) == 2)
    assert all(END in o["metadata"]["annotations"] for o in watched.backend.cache.objects.values())
    stale = copy.deepcopy(watched.backend.cache.objects["team-a", "b" * 20])
    # Another replica extends b; this replica's cache has not seen it yet.
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    watched.cluster.update(
        (PLURAL, "team-a", "b" * 20), lambda o: o["metadata"]["annotations"].update({END: later})
    )
    await eventually(lambda: watched.backend.cache.objects["team-a", "b" * 20] != stale)
    watched.backend.cache.objects["team-a", "b" * 20] = stale
    lists = watched.lists()

    await watched.backend.reap(datetime.now(UTC))

    assert watched.lists() == lists
    assert (PLURAL, "team-a", "a" * 20) not in watched.cluster.objects
    assert watched.cluster.objects[PLURAL, "team-a", "b" * 20]["metadata"]["annotations"] == {
        END: later,
        MARK: mark(SEED, "team-a", "b" * 20),
    }
    deletes = [p for m, p, _ in watched.cluster.requests if m == "DELETE"]
    assert sorted(deletes) == [
        f"/apis/{GROUP}/{VERSION}/namespaces/team-a/{PLURAL}/{name}"
        for name in ("a" * 20, "b" * 20)
    ]


async def test_the_backend_is_ready_once_the_watch_has_listed(watched: Fixture) -> None:
    assert watched.backend.watcher is None
    assert await watched.backend.ready() is True  # the first probe starts the watch
    assert watched.backend.watcher is not None
    assert watched.lists() == 1
