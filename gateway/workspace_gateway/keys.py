"""API keys: `e2b_<40 hex>`, each bound to one tenant namespace, kept only as a SHA-256 hash.

A key is shown once, when it is made. What is stored is its hash, the namespace it acts in and
when it was made; the key ID (the hash's first 12 hex digits) names it in logs and on the
command line and tells nothing about the key itself.

In a cluster each key is one labelled Secret in the gateway's own namespace
(`kubernetes.secret_keys`).
"""

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from workspace_gateway.errors import GatewayError

KEY = re.compile(r"e2b_[0-9a-f]{40}")
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
ID_LENGTH = 12
NAMESPACE_HEADER = "x-sandbox-namespace"
"""Where a caller whose credential spans namespaces names the one it acts in."""


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key (by ID, never the key) and the namespace it acts in."""

    key_id: str
    namespace: str


@dataclass(frozen=True)
class KeyRecord:
    key_id: str
    namespace: str
    created: str


def new_key() -> str:
    return f"e2b_{secrets.token_hex(20)}"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_id_of(key_digest: str) -> str:
    return key_digest[:ID_LENGTH]


def check_namespace(namespace: str) -> str:
    if not NAMESPACE.fullmatch(namespace):
        raise GatewayError(400, f"{namespace!r} is not a namespace name")
    return namespace


def match(given: str | None, table: Mapping[str, KeyRecord]) -> Principal | None:
    """The principal of a presented key, looked up by ID and compared in constant time.

    `table` maps each key's hash to its record. Keys not of the shape are refused unhashed.
    """
    if given is None or not KEY.fullmatch(given):
        return None
    wanted = digest(given)
    found = None
    for stored, record in table.items():
        if hmac.compare_digest(stored, wanted):
            found = Principal(record.key_id, record.namespace)
    return found


class Keys(Protocol):
    """How callers are known: API keys here, Kubernetes tokens in `kubernetes.tokens`."""

    async def principal(self, given: str | None, namespace: str | None = None) -> Principal | None:
        """Who presents `given`; `namespace` is one the caller names, which a key ignores."""

    async def authorize(self, principal: Principal, route: str) -> None:
        """Raise 403 unless the principal may call this route (`Control.resolve`'s name)."""

    async def acts(self, principal: Principal) -> bool:
        """Whether the principal may act on its namespace's sandboxes, not only read them.

        Only such a caller is given a sandbox's access token when it reads one.
        """


class BoundKeys:
    """A key may do anything with sandboxes in the one namespace it is bound to."""

    async def authorize(self, principal: Principal, route: str) -> None:
        pass

    async def acts(self, principal: Principal) -> bool:  # noqa: ARG002  # any key may
        return True


class StaticKeys(BoundKeys):
    """The keys of `--local`: fixed at start, in memory."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        """`keys` maps each key to its namespace."""
        self.table = {digest(k): KeyRecord(key_id_of(digest(k)), ns, "") for k, ns in keys.items()}

    async def principal(
        self,
        given: str | None,
        namespace: str | None = None,  # noqa: ARG002  # a key acts in its own namespace only
    ) -> Principal | None:
        return match(given, self.table)
