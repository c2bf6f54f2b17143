"""API keys in a cluster: each one labelled Secret in the gateway's own namespace.

`kubectl` and RBAC on Secrets there govern who can mint keys, and the gateway needs only to
read them.
"""

import asyncio
import base64
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from workspace_gateway.errors import GatewayError
from workspace_gateway.keys import (
    ID_LENGTH,
    KEY,
    NAMESPACE,
    BoundKeys,
    KeyRecord,
    Principal,
    check_namespace,
    digest,
    key_id_of,
    match,
    new_key,
)

SECRET_PREFIX = "e2b-key-"  # noqa: S105  # a name, not a secret
LABEL = "sandbox.cozystack.io/gateway-api-key"
MANAGED_BY = {"app.kubernetes.io/managed-by": "workspace-sandbox-gateway"}
CACHE_SECONDS = 10.0


def _decode(data: Mapping[str, str] | None, field: str) -> str:
    try:
        return base64.b64decode((data or {}).get(field, "")).decode()
    except (ValueError, UnicodeDecodeError):
        return ""


def record_of(secret: Any) -> tuple[str, KeyRecord] | None:
    """A Secret's hash and record, or None for a Secret that is not a well-formed key."""
    name = secret.metadata.name or ""
    key_hash = _decode(secret.data, "hash")
    namespace = _decode(secret.data, "namespace")
    if (
        not name.startswith(SECRET_PREFIX)
        or not re.fullmatch(r"[0-9a-f]{64}", key_hash)
        or name != SECRET_PREFIX + key_id_of(key_hash)
        or not NAMESPACE.fullmatch(namespace)
    ):
        return None
    return key_hash, KeyRecord(key_id_of(key_hash), namespace, _decode(secret.data, "created"))


class SecretKeys(BoundKeys):
    """Keys as Secrets in the gateway's namespace, through the official client's CoreV1Api.

    Lookups read all key Secrets at most once per `cache_seconds`, whatever callers present,
    so a flood of made-up keys costs the API server nothing; a revoked key stops working
    within that time.
    """

    def __init__(self, core: Any, namespace: str, cache_seconds: float = CACHE_SECONDS) -> None:
        self.core = core
        self.namespace = namespace
        self.cache_seconds = cache_seconds
        self._table: dict[str, KeyRecord] = {}
        self._read_at = float("-inf")
        self._lock = asyncio.Lock()

    async def principal(
        self,
        given: str | None,
        namespace: str | None = None,  # noqa: ARG002  # a key acts in its own namespace only
    ) -> Principal | None:
        if given is None or not KEY.fullmatch(given):
            return None
        async with self._lock:
            loop = asyncio.get_running_loop()
            if loop.time() - self._read_at >= self.cache_seconds:
                self._table = await asyncio.to_thread(self._read)
                self._read_at = loop.time()
            table = self._table
        return match(given, table)

    def _read(self) -> dict[str, KeyRecord]:
        listed = self.core.list_namespaced_secret(self.namespace, label_selector=LABEL)
        return dict(r for r in map(record_of, listed.items) if r is not None)

    def create(self, namespace: str, now: datetime | None = None) -> tuple[str, KeyRecord]:
        """A new key for this namespace: the key (to show once) and its record."""
        check_namespace(namespace)
        key = new_key()
        key_hash = digest(key)
        created = (now or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
        record = KeyRecord(key_id_of(key_hash), namespace, created)
        data = {"hash": key_hash, "namespace": namespace, "created": created}
        secret = client.V1Secret(
            metadata=client.V1ObjectMeta(
                name=SECRET_PREFIX + record.key_id, labels={LABEL: "true", **MANAGED_BY}
            ),
            type="Opaque",
            data={k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        )
        self.core.create_namespaced_secret(self.namespace, secret)
        return key, record

    def list(self) -> list[KeyRecord]:
        return sorted(self._read().values(), key=lambda r: (r.namespace, r.created, r.key_id))

    def revoke(self, key_id: str) -> None:
        if not re.fullmatch(rf"[0-9a-f]{{{ID_LENGTH}}}", key_id):
            raise GatewayError(400, f"{key_id!r} is not a key ID ({ID_LENGTH} hex digits)")
        try:
            self.core.delete_namespaced_secret(SECRET_PREFIX + key_id, self.namespace)
        except ApiException as e:
            if e.status == 404:  # noqa: PLR2004  # HTTP Not Found
                raise GatewayError(404, f"no key {key_id}") from None
            raise
