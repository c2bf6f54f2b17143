"""Kubernetes tokens instead of API keys: TokenReview says who, SubjectAccessReview what they may.

The caller presents a ServiceAccount or OIDC token where the SDK puts its API key (`X-API-Key`,
which is all the SDK sends), or as `Authorization: Bearer`. It acts in its ServiceAccount's own
namespace, or in the namespace it names in `X-Sandbox-Namespace` (the SDK's `api_headers`);
a user that is no ServiceAccount must name one. Every call is then checked with a
SubjectAccessReview for the verb its route stands for on `workspacesandboxes` there, so a token
can do no more through the gateway than its holder could with `kubectl`.

Answers are cached briefly, so a burst of calls with one token costs one review; a revoked
token or binding stops working within the cache's time. Tokens the gateway has never seen
authenticated are reviewed on a budget of their own (`MAX_STRANGERS_IN_FLIGHT` at a time) and
refused ones are kept apart from accepted ones: a flood of made-up tokens neither queues ahead
of a known caller's review nor evicts its cached answer.
"""

import asyncio
import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from workspace_gateway.errors import GatewayError
from workspace_gateway.keys import NAMESPACE, NAMESPACE_HEADER, Principal

GROUP = "sandbox.cozystack.io"
RESOURCE = "workspacesandboxes"

SERVICE_ACCOUNT = re.compile(r"system:serviceaccount:(?P<ns>[^:]+):[^:]+")
# JWTs, and most webhook tokens: printable, no spaces, not absurdly long.
TOKEN = re.compile(r"[\x21-\x7e]{16,16384}")
CACHE_SECONDS = 10.0
CACHE_SIZE = 4096
MAX_IN_FLIGHT = 8
MAX_STRANGERS_IN_FLIGHT = 2
KNOWN_SECONDS = 3600.0  # a token seen authenticated this recently is reviewed as known

# What each route (as `Control.resolve` names it) asks of `workspacesandboxes`. Connect reads
# and extends, so it needs both; metrics only reads.
VERBS: dict[str, tuple[str, ...]] = {
    "POST /sandboxes": ("create",),
    "GET /v2/sandboxes": ("list",),
    "GET /sandboxes": ("list",),
    "POST /sandboxes/{id}/connect": ("get", "patch"),
    "GET /sandboxes/{id}": ("get",),
    "DELETE /sandboxes/{id}": ("delete",),
    "POST /sandboxes/{id}/timeout": ("patch",),
    "POST /sandboxes/{id}/pause": ("patch",),
    "GET /sandboxes/{id}/metrics": ("get",),
    # A snapshot is a change to the sandbox's spec (spec.snapshots); a restore a create.
    "POST /sandboxes/{id}/snapshots": ("patch",),
    "POST /sandboxes/{id}/fork": ("get", "patch", "create"),
    "GET /snapshots": ("list",),
    "DELETE /templates/{alias}": ("patch",),
    # Which templates exist: for whoever may list sandboxes.
    "GET /templates/aliases/{alias}": ("list",),
    "GET /templates": ("list",),
    "GET /templates/{alias}": ("list",),
    "GET /templates/{alias}/tags": ("list",),
}
"""The routes not offered (`not_offered.py`) need none: they answer 501 to any caller."""

# What a caller must be allowed to do on `workspacesandboxes` to be given a sandbox's access
# token when it reads one (create and connect need create, and get and patch, anyway).
ACT_VERB = "update"

K = TypeVar("K")
V = TypeVar("V")


class Cache(Generic[K, V]):
    """At most `size` answers, each for `seconds`; the oldest goes first when full."""

    def __init__(self, size: int, seconds: float, clock: Callable[[], float]) -> None:
        self.size = size
        self.seconds = seconds
        self.clock = clock
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> tuple[bool, V | None]:
        """(True, value) when a fresh answer is kept, else (False, None)."""
        found = self._items.get(key)
        if found is None:
            return False, None
        if self.clock() >= found[0]:
            del self._items[key]
            return False, None
        return True, found[1]

    def put(self, key: K, value: V) -> None:
        self._items.pop(key, None)
        self._items[key] = (self.clock() + self.seconds, value)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class User:
    """Who a TokenReview says the token's holder is, as a SubjectAccessReview needs it."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class TokenPrincipal(Principal):
    """A principal whose key ID is the reviewed username, with the rest of who it is."""

    user: User


def user_of(status: Any) -> User | None:
    """The reviewed user, or None unless authenticated (for one of `audiences`, if any)."""
    if status is None or not status.authenticated or status.user is None:
        return None
    info = status.user
    if not info.username:
        return None
    extra = tuple(sorted((k, tuple(v or ())) for k, v in (info.extra or {}).items()))
    return User(info.username, info.uid or "", tuple(info.groups or ()), extra)


def namespace_for(user: User, named: str | None) -> str:
    """The namespace a call acts in: the one named, else the ServiceAccount's own."""
    if named is not None:
        if not NAMESPACE.fullmatch(named):
            raise GatewayError(400, f"{NAMESPACE_HEADER} {named[:64]!r} is not a namespace name")
        return named
    account = SERVICE_ACCOUNT.fullmatch(user.username)
    if account is None:
        raise GatewayError(400, f"name the namespace to act in with the {NAMESPACE_HEADER} header")
    return account["ns"]


def review_spec(user: User, namespace: str, verb: str) -> client.V1SubjectAccessReviewSpec:
    return client.V1SubjectAccessReviewSpec(
        user=user.username,
        uid=user.uid or None,
        groups=list(user.groups) or None,
        extra={k: list(v) for k, v in user.extra} or None,
        resource_attributes=client.V1ResourceAttributes(
            group=GROUP, resource=RESOURCE, namespace=namespace, verb=verb
        ),
    )


class TokenReviews:
    """Principals from Kubernetes tokens.

    `authn` and `authz` are the client's `AuthenticationV1Api` and `AuthorizationV1Api`.
    """

    def __init__(
        self,
        authn: Any,
        authz: Any,
        *,
        audiences: tuple[str, ...] = (),
        cache_seconds: float = CACHE_SECONDS,
        cache_size: int = CACHE_SIZE,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.authn = authn
        self.authz = authz
        self.audiences = audiences
        tick = clock or (lambda: asyncio.get_running_loop().time())
        self.users: Cache[str, User] = Cache(cache_size, cache_seconds, tick)
        self.refused: Cache[str, None] = Cache(cache_size, cache_seconds, tick)
        self.known: Cache[str, None] = Cache(cache_size, KNOWN_SECONDS, tick)
        self.grants: Cache[tuple[User, str, str], bool] = Cache(cache_size, cache_seconds, tick)
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._strangers = asyncio.Semaphore(MAX_STRANGERS_IN_FLIGHT)

    async def principal(self, given: str | None, namespace: str | None = None) -> Principal | None:
        if given is None or not TOKEN.fullmatch(given):
            return None
        user = await self.user(given)
        if user is None:
            return None
        return TokenPrincipal(user.username, namespace_for(user, namespace), user)

    async def user(self, token: str) -> User | None:
        key = hashlib.sha256(token.encode()).hexdigest()  # the token itself is never kept
        cached, user = self.users.get(key)
        if cached:
            return user
        if self.refused.get(key)[0]:
            return None
        seen, _ = self.known.get(key)
        review = client.V1TokenReview(
            spec=client.V1TokenReviewSpec(token=token, audiences=list(self.audiences) or None)
        )
        budget = self._in_flight if seen else self._strangers
        answer = await self._call(self.authn.create_token_review, review, budget)
        user = user_of(answer.status)
        if user is not None and self.audiences:
            granted = set(answer.status.audiences or ())
            user = user if granted & set(self.audiences) else None
        if user is None:
            self.refused.put(key, None)
        else:
            self.users.put(key, user)
            self.known.put(key, None)
        return user

    async def authorize(self, principal: Principal, route: str) -> None:
        """Raise 403 unless the principal may do every verb of this route in its namespace."""
        if not isinstance(principal, TokenPrincipal):
            raise GatewayError(403, "this call was not authenticated by a token review")
        user = principal.user
        for verb in VERBS.get(route, ()):
            if not await self.allowed(user, principal.namespace, verb):
                raise GatewayError(
                    403,
                    f"{user.username} may not {verb} {RESOURCE} in namespace "
                    f"{principal.namespace!r}",
                )

    async def acts(self, principal: Principal) -> bool:
        """Whether it may `update` the namespace's sandboxes: Cozystack's view roles may not.

        A read-only role (`cozy:tenant:view`, aggregated into every tenant role) must not be
        handed a token that runs commands as root in the sandbox and reads its env vars.
        """
        if not isinstance(principal, TokenPrincipal):
            return False
        return await self.allowed(principal.user, principal.namespace, ACT_VERB)

    async def allowed(self, user: User, namespace: str, verb: str) -> bool:
        key = (user, namespace, verb)
        known, allowed = self.grants.get(key)
        if not known:
            review = client.V1SubjectAccessReview(spec=review_spec(user, namespace, verb))
            answer = await self._call(self.authz.create_subject_access_review, review)
            allowed = bool(answer.status and answer.status.allowed)
            self.grants.put(key, allowed)
        return bool(allowed)

    async def _call(
        self, method: Callable[[Any], Any], body: Any, budget: asyncio.Semaphore | None = None
    ) -> Any:
        async with budget or self._in_flight:
            try:
                return await asyncio.to_thread(method, body)
            except ApiException as e:
                if e.status in {401, 403}:
                    raise GatewayError(500, "the gateway may not review tokens") from None
                raise GatewayError(502, "the cluster did not answer a review") from None
            except Exception:
                raise GatewayError(502, "the cluster could not be reached") from None
