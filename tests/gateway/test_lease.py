"""Leader election for the reaper, through the real client against the fake API server.

Replicas are electors with their own clients; time is a clock the test moves, so a Lease
lapses without waiting for it. Every Lease written is checked against the shape of
`coordination.k8s.io/v1` and client-go's MicroTime.
"""

import asyncio
import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from workspace_gateway.backend import reap_forever
from workspace_gateway.kubernetes import lease
from workspace_gateway.kubernetes.backend import KubernetesBackend
from workspace_gateway.kubernetes.lease import Elector
from workspace_gateway.kubernetes.objects import (
    AUTO_PAUSE,
    END,
    ID_LABEL,
    MARK,
    PLURAL,
    STARTED,
    TEMPLATE,
    Settings,
    mark,
)

from tests.gateway import kube_fake
from tests.gateway.stand_in import SEED, eventually
from tests.ports import free_port

pytestmark = pytest.mark.e2e  # starts agents or gateways

NAMESPACE = "sandbox-gateway"
KEY = ("leases", NAMESPACE, lease.NAME)
GATEWAY = Path(sys.executable).with_name("workspace-sandbox-gateway")
PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{lease.NAME}"
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
INT32 = 2**31 - 1
SPEC = {
    "holderIdentity": str,
    "leaseDurationSeconds": int,
    "acquireTime": str,
    "renewTime": str,
    "leaseTransitions": int,
    "preferredHolder": str,
    "strategy": str,
}


def lease_problems(obj: dict[str, Any]) -> list[str]:
    """What a real API server would refuse, or client-go would not write, in a Lease."""
    problems = []
    if (obj.get("apiVersion"), obj.get("kind")) != ("coordination.k8s.io/v1", "Lease"):
        problems.append(f"apiVersion/kind {obj.get('apiVersion')}/{obj.get('kind')}")
    metadata, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    if metadata.get("name") != lease.NAME or metadata.get("namespace") != NAMESPACE:
        problems.append(f"metadata {metadata}")
    for name, value in spec.items():
        kind = SPEC.get(name)
        if kind is None or type(value) is not kind:
            problems.append(f"spec.{name}: {value!r}")
        elif kind is int and not 0 <= value <= INT32:
            problems.append(f"spec.{name} out of int32: {value}")
        elif name.endswith("Time") and not MICRO_TIME.fullmatch(value):
            problems.append(f"spec.{name} is not a MicroTime: {value!r}")
    if spec.get("leaseDurationSeconds", 1) <= 0:
        problems.append("spec.leaseDurationSeconds must be greater than 0")
    return problems


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime(2026, 5, 1, 12, 0, tzinfo=UTC))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self) -> datetime:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += timedelta(seconds=seconds)


@dataclass
class Fake:
    cluster: kube_fake.Cluster
    kubeconfig: Path
    clients: list[client.ApiClient] = field(default_factory=list)

    def api(self) -> client.ApiClient:
        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        self.clients.append(api)
        return api

    def elector(self, name: str, clock: Clock) -> Elector:
        return Elector(client.CoordinationV1Api(self.api()), NAMESPACE, name, clock)

    def spec(self) -> dict[str, Any]:
        return dict(self.cluster.objects[KEY]["spec"])


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[Fake]:
    with kube_fake.serve() as (cluster, url):
        world = Fake(cluster, kube_fake.kubeconfig(url, tmp_path))
        yield world
        for api in world.clients:
            api.close()
    leases = [o for o in cluster.written if o.get("kind") == "Lease"]
    for obj in leases:
        assert lease_problems(obj) == [], obj
    # Every write but the one creation is conditional on the resourceVersion read.
    assert len([o for o in leases if "resourceVersion" not in o["metadata"]]) <= 1


def micro(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_one_of_two_replicas_leads_and_the_lease_says_which(fake: Fake) -> None:
    clock = Clock()
    one, two = fake.elector("one_1", clock), fake.elector("two_2", clock)
    assert one.attempt()
    assert not two.attempt()
    assert (one.leading(), two.leading()) == (True, False)
    started = micro(clock.now)
    assert fake.spec() == {
        "holderIdentity": "one_1",
        "leaseDurationSeconds": lease.LEASE_SECONDS,
        "acquireTime": started,
        "renewTime": started,
        "leaseTransitions": 0,
    }
    clock.advance(lease.RENEW_EVERY)
    assert one.attempt()  # a renewal keeps acquireTime and moves renewTime
    assert not two.attempt()
    assert fake.spec()["acquireTime"] == started
    assert fake.spec()["renewTime"] == micro(clock.now)
    assert fake.spec()["leaseTransitions"] == 0


def test_the_other_takes_over_once_the_lease_has_lapsed_and_not_before(fake: Fake) -> None:
    clock = Clock()
    one, two = fake.elector("one_1", clock), fake.elector("two_2", clock)
    assert one.attempt()
    assert not two.attempt()
    last_renewal = clock.now
    # `one` stops renewing (its pod hangs). Before the deadline it still leads; then not.
    clock.advance(lease.RENEW_DEADLINE - 0.001)
    assert one.leading()
    assert not two.attempt()
    clock.advance(0.001)
    assert not one.leading()
    # It stopped seconds before its Lease may be taken: room for clocks that drift apart.
    assert clock.now + timedelta(seconds=4) < last_renewal + timedelta(seconds=lease.LEASE_SECONDS)
    # Nobody leads for the rest of the term: the margin that keeps two from leading at once.
    clock.advance(lease.LEASE_SECONDS - lease.RENEW_DEADLINE - 0.001)
    assert not two.attempt()
    assert fake.spec()["holderIdentity"] == "one_1"
    clock.advance(0.001)
    assert clock.now == last_renewal + timedelta(seconds=lease.LEASE_SECONDS)
    assert two.attempt()
    assert fake.spec()["holderIdentity"] == "two_2"
    assert fake.spec()["leaseTransitions"] == 1
    assert fake.spec()["acquireTime"] == micro(clock.now)
    # The old leader comes back: it finds the Lease taken and does not lead.
    assert not one.attempt()
    assert (one.leading(), two.leading()) == (False, True)


def test_a_lease_seen_to_change_lately_is_not_taken_even_by_a_clock_far_ahead(
    fake: Fake,
) -> None:
    """renewTime alone would let a replica whose clock runs ahead take a live Lease."""
    clock, ahead = Clock(), Clock()
    ahead.advance(lease.LEASE_SECONDS * 4)
    one, fast = fake.elector("one_1", clock), fake.elector("fast_2", ahead)
    assert one.attempt()
    assert not fast.attempt()  # lapsed by renewTime on its clock, but it only just saw it
    ahead.advance(lease.LEASE_SECONDS - 1)
    assert not fast.attempt()
    ahead.advance(1)
    assert fast.attempt()  # unchanged for a whole term by its own watch: the holder is gone


def test_a_clean_release_hands_over_at_once(fake: Fake) -> None:
    clock = Clock()
    one, two = fake.elector("one_1", clock), fake.elector("two_2", clock)
    assert one.attempt()
    assert not two.attempt()
    one.release()
    assert not one.leading()
    assert fake.spec()["holderIdentity"] == ""
    assert fake.spec()["leaseDurationSeconds"] == 1
    assert two.attempt()  # no time has passed
    assert fake.spec()["holderIdentity"] == "two_2"
    assert fake.spec()["leaseTransitions"] == 1
    # Releasing what it no longer holds changes nothing.
    before = fake.cluster.objects[KEY]["metadata"]["resourceVersion"]
    one.release()
    assert fake.cluster.objects[KEY]["metadata"]["resourceVersion"] == before


class ReadTogether:
    """A replica's API whose reads in one race all return at one moment.

    The worst interleaving on purpose: every replica decides on the same Lease as all the
    others, so every one that may take it writes, and all writes but one must be refused.
    """

    def __init__(self, api: Any, race: "Race") -> None:
        self.api = api
        self.race = race

    def read_namespaced_lease(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.api.read_namespaced_lease(*args, **kwargs)
        finally:
            self.race.together.wait(timeout=30)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)


@dataclass
class Race:
    together: threading.Barrier = field(default_factory=lambda: threading.Barrier(1))

    def run(self, electors: list[Elector]) -> list[str]:
        """Every elector attempts at once, each in its own thread; the winners."""
        self.together = threading.Barrier(len(electors))
        start = threading.Barrier(len(electors))
        won: list[str] = []

        def attempt(elector: Elector) -> None:
            start.wait(timeout=30)
            if elector.attempt():
                won.append(elector.holder)

        threads = [threading.Thread(target=attempt, args=(e,)) for e in electors]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.together = threading.Barrier(1)  # a lone call between races waits for nobody
        return won


@pytest.mark.parametrize("lockstep", [False, True], ids=["free", "lockstep"])
def test_replicas_competing_at_the_same_moment_never_both_lead(fake: Fake, lockstep: bool) -> None:
    clock, race = Clock(), Race()
    electors = [fake.elector(f"replica-{i}_{i}", clock) for i in range(6)]
    if lockstep:
        for elector in electors:
            elector.api = ReadTogether(elector.api, race)

    def leaders() -> list[str]:
        found = [e.holder for e in electors if e.leading()]
        assert found == [fake.spec()["holderIdentity"]]
        return found

    assert race.run(electors) == leaders()  # all create it at once: one succeeds
    holders = leaders()
    for number in range(20):
        assert race.run(electors) == holders[-1:]  # within its term the holder keeps it
        leader = next(e for e in electors if e.holder == holders[-1])
        followers = [e for e in electors if e is not leader]
        if number % 2:  # the leader hands over; all race for the free Lease, itself too
            leader.release()
            assert race.run(electors) == leaders()
        else:  # the leader dies; the others see its last renewal, then race once it lapses
            assert race.run(followers) == []
            clock.advance(lease.LEASE_SECONDS)
            assert race.run(followers) == leaders()
            assert not leader.attempt()
            assert leader.holder not in leaders()
        holders += leaders()
    assert fake.spec()["leaseTransitions"] == 20  # a Lease released and taken again counts
    if lockstep:  # each round: a renewal, then a release and six writers or five writers
        writes = sum(1 for m, p, _ in fake.cluster.requests if (m, p) == ("PUT", PATH))
        assert writes == 10 * (1 + 1 + 6) + 10 * (1 + 5)
        creations = sum(1 for m, p, _ in fake.cluster.requests if m == "POST" and "leases" in p)
        assert creations == len(electors)


async def test_a_leader_that_cannot_reach_the_api_stops_leading_by_its_deadline(
    fake: Fake, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease, "RENEW_EVERY", 0.01)
    monkeypatch.setattr(lease, "RETRY_EVERY", 0.01)
    caplog.set_level(logging.INFO, "workspace_gateway.lease")
    clock = Clock()
    one = fake.elector("one_1", clock)
    nowhere = f"http://127.0.0.1:{free_port()}"  # a loopback port nothing listens on
    cut = client.ApiClient(client.Configuration(host=nowhere))
    fake.clients.append(cut)
    one.start()
    await eventually(one.leading)
    one.api = client.CoordinationV1Api(cut)  # the API server is gone
    clock.advance(lease.RENEW_DEADLINE - 1)
    await asyncio.sleep(0.2)  # renewals fail, but the deadline has not come
    assert one.leading()
    assert "could not be read or written" in caplog.text
    clock.advance(1)
    assert not one.leading()  # at once, whatever the renewal loop is doing
    await eventually(lambda: "no longer" in caplog.text)
    await one.stop()
    changes = [r.getMessage() for r in caplog.records if "reaps expired" in r.getMessage()]
    assert changes == [
        "this replica (one_1) now reaps expired sandboxes",
        "this replica (one_1) no longer reaps expired sandboxes",
    ]


async def test_two_gateways_on_one_cluster_delete_an_expired_sandbox_once(fake: Fake) -> None:
    sandbox_id = "a" * 20
    expired_sandbox(fake.cluster, sandbox_id)
    settings = Settings(templates={}, seed=SEED)
    gateways = []
    for name in ("one", "two"):
        backend = KubernetesBackend(
            client.CustomObjectsApi(fake.api()), settings, httpx.AsyncClient()
        )
        backend.REAP_EVERY = 0.02
        elector = Elector(client.CoordinationV1Api(fake.api()), NAMESPACE, name)
        elector.start()
        gateways.append(
            (backend, elector, asyncio.create_task(reap_forever(backend, elector.leading)))
        )
    await eventually(lambda: (PLURAL, "team-a", sandbox_id) not in fake.cluster.objects)
    await asyncio.sleep(0.3)  # time for a second DELETE, were there a second reaper
    for backend, elector, reaper in gateways:
        reaper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reaper
        await elector.stop()
        await backend.close()
    deletes = [p for m, p, _ in fake.cluster.requests if m == "DELETE"]
    assert deletes == [
        f"/apis/sandbox.cozystack.io/v1alpha1/namespaces/team-a/{PLURAL}/{sandbox_id}"
    ]
    assert fake.spec()["holderIdentity"] == ""  # the leader handed over on stopping


def test_the_fake_keeps_leases_as_the_api_server_does(fake: Fake) -> None:
    api = client.CoordinationV1Api(fake.api())
    with pytest.raises(ApiException) as missing:
        api.read_namespaced_lease(lease.NAME, NAMESPACE)
    assert missing.value.status == 404
    body = {"metadata": {"name": lease.NAME}, "spec": {"holderIdentity": "x"}}
    made = api.create_namespaced_lease(NAMESPACE, body)
    with pytest.raises(ApiException) as taken:
        api.create_namespaced_lease(NAMESPACE, body)
    assert taken.value.status == 409
    fresh = {
        **body,
        "metadata": {**body["metadata"], "resourceVersion": made.metadata.resource_version},
    }
    api.replace_namespaced_lease(lease.NAME, NAMESPACE, fresh)
    with pytest.raises(ApiException) as stale:
        api.replace_namespaced_lease(lease.NAME, NAMESPACE, fresh)
    assert stale.value.status == 409
    with pytest.raises(ApiException) as refused:
        api.delete_namespaced_lease(lease.NAME, NAMESPACE)
    assert refused.value.status == 405


def test_each_replica_names_itself_uniquely(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "gateway-7d9f-abcde")
    first, second = lease.identity(), lease.identity()
    assert first.startswith("gateway-7d9f-abcde_")
    assert second.startswith("gateway-7d9f-abcde_")
    assert first != second


def expired_sandbox(cluster: kube_fake.Cluster, sandbox_id: str) -> None:
    """A gateway-made WorkspaceSandbox in team-a whose end time has passed."""
    ended = datetime.now(UTC) - timedelta(seconds=5)
    notes = {
        TEMPLATE: "base",
        STARTED: (ended - timedelta(minutes=5)).isoformat(),
        END: ended.isoformat(),
        AUTO_PAUSE: "false",
        MARK: mark(SEED, "team-a", sandbox_id),
    }
    metadata = {"name": sandbox_id, "namespace": "team-a", "labels": {ID_LABEL: sandbox_id}}
    obj = {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {**metadata, "annotations": notes},
        "spec": {"power": "Running"},
    }
    cluster.put((PLURAL, "team-a", sandbox_id), obj)


async def test_a_leader_that_loses_the_lead_mid_round_deletes_no_more(fake: Fake) -> None:
    for sandbox_id in ("a" * 20, "b" * 20, "c" * 20):
        expired_sandbox(fake.cluster, sandbox_id)
    answers = iter([True])
    backend = KubernetesBackend(
        client.CustomObjectsApi(fake.api()),
        Settings(templates={}, seed=SEED),
        httpx.AsyncClient(),
    )
    await backend.reap(datetime.now(UTC), lambda: next(answers, False))
    await backend.close()
    deletes = [p for m, p, _ in fake.cluster.requests if m == "DELETE"]
    assert len(deletes) == 1
    assert sum(1 for key in fake.cluster.objects if key[0] == PLURAL) == 2


def test_the_gateway_process_takes_the_lease_and_hands_it_over_when_stopped(
    fake: Fake, tmp_path: Path
) -> None:
    (tmp_path / "templates.yaml").write_text("templates:\n  base:\n    image: ubuntu-24.04\n")
    (tmp_path / "seed").write_text("s" * 40)
    port = free_port()
    command = [
        *(str(GATEWAY), "--kubernetes", "--address", f"127.0.0.1:{port}"),
        *("--templates", str(tmp_path / "templates.yaml")),
        *("--token-seed-file", str(tmp_path / "seed")),
        *("--kubeconfig", str(fake.kubeconfig), "--gateway-namespace", NAMESPACE),
    ]
    env = {**os.environ, "POD_NAME": "gateway-6c9f-x2v7q"}
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while KEY not in fake.cluster.objects:
            assert process.poll() is None, "the gateway ended"
            assert time.monotonic() < deadline, "no Lease was written"
            time.sleep(0.05)
        holder = fake.spec()["holderIdentity"]
        assert re.fullmatch(r"gateway-6c9f-x2v7q_[0-9a-f]{8}", holder)
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert fake.spec()["holderIdentity"] == ""  # released: a successor need not wait
    assert err.count(f"this replica ({holder}) now reaps") == 1
    assert err.count(f"this replica ({holder}) no longer reaps") == 1
    assert "Traceback" not in err
