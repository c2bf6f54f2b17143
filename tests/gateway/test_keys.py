"""API keys: shaped for the SDK, stored only as hashes in Secrets, created, listed and revoked."""

import base64
import hashlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client, config
from workspace_gateway.app import build_app
from workspace_gateway.keys import (
    KEY,
    KeyRecord,
    Principal,
    StaticKeys,
    digest,
    match,
    new_key,
)
from workspace_gateway.kubernetes.secret_keys import SecretKeys

from tests.gateway import kube_fake
from tests.gateway.fakes import Sandboxes

pytestmark = pytest.mark.e2e  # starts agents or gateways

GATEWAY = Path(sys.executable).with_name("workspace-sandbox-gateway")
GATEWAY_NS = "sandbox-gateway"


def test_keys_have_the_shape_older_sdks_check() -> None:
    keys = {new_key() for _ in range(50)}
    assert len(keys) == 50
    assert all(re.fullmatch(r"e2b_[0-9a-f]{40}", k) for k in keys)


def test_a_key_matches_only_itself_whole() -> None:
    key = new_key()
    table = {digest(key): KeyRecord(digest(key)[:12], "a", "")}
    assert match(key, table) == Principal(digest(key)[:12], "a")
    for other in (key[:-1], key + "0", key.upper(), key[:-1] + "x", "", None, new_key()):
        assert match(other, table) is None


async def test_static_keys_bind_each_key_to_its_namespace() -> None:
    a, b = new_key(), new_key()
    keys = StaticKeys({a: "team-a", b: "team-b"})
    assert (await keys.principal(a)) == Principal(digest(a)[:12], "team-a")
    assert (await keys.principal(b)) == Principal(digest(b)[:12], "team-b")
    assert (await keys.principal(new_key())) is None


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[kube_fake.Cluster, Path]]:
    with kube_fake.serve() as (fake, url):
        yield fake, kube_fake.kubeconfig(url, tmp_path)


@pytest.fixture
def store(cluster: tuple[kube_fake.Cluster, Path]) -> Iterator[SecretKeys]:
    api = config.new_client_from_config(config_file=str(cluster[1]))
    yield SecretKeys(client.CoreV1Api(api), GATEWAY_NS, cache_seconds=0)
    api.close()


def test_a_key_is_stored_only_as_its_hash(
    cluster: tuple[kube_fake.Cluster, Path], store: SecretKeys
) -> None:
    key, record = store.create("team-a")
    assert KEY.fullmatch(key)
    (secret,) = cluster[0].resource("secrets")
    assert secret["metadata"]["namespace"] == GATEWAY_NS
    assert secret["metadata"]["name"] == f"e2b-key-{record.key_id}"
    assert secret["metadata"]["labels"]["sandbox.cozystack.io/gateway-api-key"] == "true"
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data == {
        "hash": hashlib.sha256(key.encode()).hexdigest(),
        "namespace": "team-a",
        "created": record.created,
    }
    assert key not in str(secret)
    assert key[4:] not in str(secret)


async def test_keys_round_trip_and_a_revoked_key_gets_401(store: SecretKeys) -> None:
    key_a, a = store.create("team-a")
    key_b, b = store.create("team-b")
    assert {(r.key_id, r.namespace) for r in store.list()} == {
        (a.key_id, "team-a"),
        (b.key_id, "team-b"),
    }
    async with httpx.AsyncClient() as upstream:
        app = build_app(Sandboxes(), upstream, keys=store, domain="sbx.example.com")
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://api.sbx.example.com"
        ) as http:
            assert (await http.get("/sandboxes", headers={"X-API-Key": key_a})).status_code == 200
            store.revoke(a.key_id)
            refused = await http.get("/sandboxes", headers={"X-API-Key": key_a})
            assert refused.status_code == 401
            assert refused.json()["code"] == 401
            assert (await http.get("/sandboxes", headers={"X-API-Key": key_b})).status_code == 200
    assert [r.key_id for r in store.list()] == [b.key_id]


async def test_lookups_are_cached_so_made_up_keys_cost_the_cluster_nothing(
    cluster: tuple[kube_fake.Cluster, Path],
) -> None:
    api = config.new_client_from_config(config_file=str(cluster[1]))
    store = SecretKeys(client.CoreV1Api(api), GATEWAY_NS, cache_seconds=60)
    key, _ = store.create("team-a")
    before = len(cluster[0].requests)
    for _ in range(20):
        assert await store.principal(new_key()) is None
    assert (await store.principal(key)) is not None
    assert await store.principal("not-a-key") is None
    assert len(cluster[0].requests) == before + 1
    api.close()


def test_secrets_that_are_not_well_formed_keys_are_ignored(
    cluster: tuple[kube_fake.Cluster, Path], store: SecretKeys
) -> None:
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    forged = {
        "metadata": {
            "name": "e2b-key-000000000000",  # not its hash's ID
            "namespace": GATEWAY_NS,
            "labels": {"sandbox.cozystack.io/gateway-api-key": "true"},
        },
        "data": {"hash": b64("1" * 64), "namespace": b64("team-a")},
    }
    cluster[0].put(("secrets", GATEWAY_NS, "e2b-key-000000000000"), forged)
    assert store.list() == []


def test_revoking_an_unknown_or_malformed_id_is_one_clear_error(store: SecretKeys) -> None:
    with pytest.raises(Exception, match="no key 0123456789ab"):
        store.revoke("0123456789ab")
    with pytest.raises(Exception, match="is not a key ID"):
        store.revoke("../secret")


def run(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [GATEWAY, "keys", "--kubeconfig", str(kubeconfig), "--gateway-namespace", GATEWAY_NS]
    return subprocess.run([*command, *args], capture_output=True, text=True, check=False)


def test_the_cli_creates_lists_and_revokes(cluster: tuple[kube_fake.Cluster, Path]) -> None:
    made = run(cluster[1], "create", "--namespace", "team-a")
    assert made.returncode == 0, made.stderr
    key = re.search(r"API key: +(e2b_[0-9a-f]{40})$", made.stdout, re.M)
    key_id = re.search(r"key ID: +([0-9a-f]{12})$", made.stdout, re.M)
    assert key and key_id
    assert key_id[1] == digest(key[1])[:12]
    listed = run(cluster[1], "list")
    assert listed.stdout.split()[:2] == [key_id[1], "team-a"]
    assert key[1] not in listed.stdout
    assert run(cluster[1], "revoke", key_id[1]).returncode == 0
    assert run(cluster[1], "list").stdout == ""
    again = run(cluster[1], "revoke", key_id[1])
    assert again.returncode == 1
    assert again.stderr == f"workspace-sandbox-gateway keys: no key {key_id[1]}\n"
    bad = run(cluster[1], "create", "--namespace", "Not_A_Namespace")
    assert bad.returncode == 1
    assert (
        bad.stderr == "workspace-sandbox-gateway keys: 'Not_A_Namespace' is not a namespace name\n"
    )
