"""`Idempotency-Key`: a retried create gets the sandbox the first one made, on both backends.

The SDK (2.63.0; 2.50.0 has no such option) sends `Sandbox.create(idempotency_key=...)` as
the header on every attempt of one create.
"""

import asyncio
import hashlib
import hmac
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import e2b
import pytest
from e2b import Sandbox
from workspace_gateway.backend import NewSandbox
from workspace_gateway.errors import GatewayError
from workspace_gateway.idempotency import Keyed, Locks, fingerprint, key_of, label_of, replayed
from workspace_gateway.kubernetes.objects import KEY_LABEL, PLURAL

from tests.gateway import kube_fake
from tests.gateway.sdk.gateways import (  # `gateway`: the fixture
    Gateway,
    gateway,  # noqa: F401
    point_sdk_at,
)
from tests.gateway.stand_in import serving

pytestmark = pytest.mark.e2e  # starts agents or gateways

SEED = b"s" * 32


@pytest.mark.parametrize("bad", ["", "UPPER", "with space", "x" * 256, "ünï"])
def test_a_key_the_sdk_would_refuse_is_a_400_naming_the_header(bad: str) -> None:
    with pytest.raises(GatewayError) as e:
        key_of(bad)
    assert e.value.status == 400
    assert "Idempotency-Key" in e.value.message
    assert key_of(None) is None
    assert key_of("a-" + "0" * 253) == "a-" + "0" * 253


def test_the_same_key_with_another_request_is_a_409_and_an_old_one_is_free() -> None:
    asked = NewSandbox("base", 300, metadata={"job": "1"}, idempotency_key="k")
    other = NewSandbox("base", 300, metadata={"job": "2"}, idempotency_key="k")
    made = Keyed(label_of(SEED, "a", "k"), fingerprint(SEED, "a", asked))
    again = Keyed(label_of(SEED, "a", "k"), fingerprint(SEED, "a", asked))
    now = datetime.now(UTC)
    assert replayed(made, again, now - timedelta(hours=23), now)
    assert not replayed(made, again, now - timedelta(hours=25), now)
    # Another namespace's key of the same text is another label.
    assert label_of(SEED, "b", "k") != made.label
    assert not replayed(made, Keyed(label_of(SEED, "b", "k"), again.fingerprint), now, now)
    with pytest.raises(GatewayError) as e:
        replayed(made, Keyed(made.label, fingerprint(SEED, "a", other)), now, now)
    assert e.value.status == 409
    # Env vars count, and are never readable from the fingerprint.
    secret = NewSandbox("base", 300, env_vars={"TOKEN": "hunter2"}, idempotency_key="k")
    assert fingerprint(SEED, "a", secret) != fingerprint(SEED, "a", asked)
    assert "hunter2" not in fingerprint(SEED, "a", secret)


async def test_retries_that_arrive_together_are_answered_one_after_the_other() -> None:
    locks, order = Locks(), []

    async def create(n: int) -> None:
        async with locks.hold("a", "k"):
            order.append(("in", n))
            await asyncio.sleep(0.01)
            order.append(("out", n))

    await asyncio.gather(create(1), create(2))
    assert order in (
        [("in", 1), ("out", 1), ("in", 2), ("out", 2)],
        [("in", 2), ("out", 2), ("in", 1), ("out", 1)],
    )
    assert locks._held == {}  # nothing kept once nobody waits


def retried_creates() -> tuple[Sandbox, Sandbox]:
    first = Sandbox.create(idempotency_key="job-42", metadata={"job": "42"})
    again = Sandbox.create(idempotency_key="job-42", metadata={"job": "42"})
    return first, again


def check_the_cycle(first: Sandbox, again: Sandbox) -> None:
    assert again.sandbox_id == first.sandbox_id
    assert again.commands.run("echo same").stdout == "same\n"
    with pytest.raises(e2b.SandboxException, match="409: this Idempotency-Key was sent"):
        Sandbox.create(idempotency_key="job-42", metadata={"job": "43"})
    other = Sandbox.create(idempotency_key="job-43", metadata={"job": "42"})
    assert other.sandbox_id != first.sandbox_id
    listed = Sandbox.list(query=e2b.SandboxQuery(metadata={"job": "42"})).next_items()
    assert sorted(s.sandbox_id for s in listed) == sorted([first.sandbox_id, other.sandbox_id])
    # A killed sandbox frees its key.
    assert first.kill() is True
    fresh = Sandbox.create(idempotency_key="job-42", metadata={"job": "42"})
    assert fresh.sandbox_id != first.sandbox_id
    fresh.kill()
    other.kill()


@pytest.fixture
def local(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811  # the fixture
    """The SDK pointed at `workspace-sandbox-gateway --local`, as tests/gateway/sdk does."""
    point_sdk_at(gateway, monkeypatch)


@pytest.mark.usefixtures("local")
def test_a_retried_create_gets_the_same_sandbox_locally() -> None:
    check_the_cycle(*retried_creates())


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[kube_fake.Cluster]:
    with serving(tmp_path, monkeypatch) as served:
        yield served


def test_a_retried_create_gets_the_same_sandbox_on_a_cluster(cluster: kube_fake.Cluster) -> None:
    first, again = retried_creates()
    stored = cluster.objects[PLURAL, "team-a", first.sandbox_id]["metadata"]
    # The key is found by a label that doesn't spell it.
    assert len(stored["labels"][KEY_LABEL]) == 40
    assert "job-42" not in str(stored)
    check_the_cycle(first, again)


def test_a_fingerprint_is_what_it_was_before_the_later_fields() -> None:
    """A retry across an upgrade still finds its sandbox: fields NewSandbox gained since
    (`restore`, `public_traffic`) leave the fingerprint alone at their defaults."""
    asked = NewSandbox(template="base", timeout=300)
    before = {
        "auto_pause": False,
        "env_vars": {},
        "idempotency_key": None,
        "metadata": {},
        "network": None,
        "template": "base",
        "timeout": 300,
    }
    text = json.dumps(["a", before], sort_keys=True, separators=(",", ":"))
    assert (
        fingerprint(SEED, "a", asked) == hmac.new(SEED, text.encode(), hashlib.sha256).hexdigest()
    )
    private = NewSandbox(template="base", timeout=300, public_traffic=False)
    assert fingerprint(SEED, "a", private) != fingerprint(SEED, "a", asked)
