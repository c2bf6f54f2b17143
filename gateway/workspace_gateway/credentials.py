"""The data plane's authority: a sandbox's access token, or a signature made with it.

The gateway derives every sandbox's token, so it checks the credential itself before a byte
reaches the sandbox; the agent checks it again. An agent that restarted holds no token until
the gateway's `/init` gives it back, and must never be reachable meanwhile by anyone who merely
knows the sandbox's ID (which is in every host name, TLS SNI, signed URL and log line).

The rules are envd's (`internal/api/auth.go`): every path needs `X-Access-Token`, except
`GET /files` and `POST /files`, which take either the token or a signed URL (the SDK's
`download_url` and `upload_url`): `v1_` and the unpadded base64 of
sha256("<path>:<read|write>:<username>:<token>[:<expiration>]"), unexpired if it names an
expiration. A token in the header that doesn't match is refused even when the URL is signed.
"""

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping
from typing import Literal

Operation = Literal["read", "write"]
FILES = "/files"
_OPERATIONS: Mapping[str, Operation] = {"GET": "read", "POST": "write"}
MAX_EXPIRATION_DIGITS = 18


def signature(
    path: str, operation: Operation, username: str, token: str, expiration: int | None
) -> str:
    """What the SDK's `get_signature` makes.

    The agent has a twin (`workspace_agent.auth`): the two distributions share no code, and the
    tests hold each to the SDK's signed URLs.
    """
    raw = f"{path}:{operation}:{username}:{token}"
    if expiration is not None:
        raw += f":{expiration}"
    digest = hashlib.sha256(raw.encode()).digest()
    return "v1_" + base64.b64encode(digest).rstrip(b"=").decode()


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def _expiration(text: str | None) -> tuple[bool, int | None]:
    """(well formed, value): absent is well formed; only plain ASCII digits are a number."""
    if text is None:
        return True, None
    if not text or len(text) > MAX_EXPIRATION_DIGITS or not (text.isascii() and text.isdigit()):
        return False, None
    return True, int(text)


def authenticates(
    token: str,
    *,
    method: str,
    path: str,
    access_token: str | None,
    query: Mapping[str, str],
    clock: Callable[[], float] = time.time,
) -> bool:
    """Whether a request carries this sandbox's credential.

    `token` is the sandbox's; `access_token` is the request's `X-Access-Token`, `query` its
    parameters (the first value of each), `path` its path as the agent will route it.
    """
    if access_token is not None:
        return _same(access_token, token)
    operation = _OPERATIONS.get(method) if path == FILES else None
    given = query.get("signature")
    if operation is None or given is None:
        return False
    ok, expiration = _expiration(query.get("signature_expiration"))
    if not ok or (expiration is not None and expiration < clock()):
        return False
    expected = signature(
        query.get("path", ""), operation, query.get("username", ""), token, expiration
    )
    return _same(given, expected)


TRAFFIC = b"e2b-traffic-access-token"
CONTEXTS = re.compile(r"/health|/contexts(/[0-9a-f]{1,64}(/restart)?)?")
"""The code interpreter's routes (port 49999) that run no code: the ones the traffic token
opens. Every other path, `/execute` first, takes the access token."""


def traffic_token(token: str) -> str:
    """A sandbox's traffic access token, derived from its access token, which it never opens.

    It opens the previews of a sandbox created with `network.allowPublicTraffic: false`, as on
    E2B. The code interpreter SDK sends it (`E2B-Traffic-Access-Token`) on every call to port
    49999, and the access token only on `/execute`; so it opens the interpreter's contexts
    (list, create, restart, remove) too, and nothing that runs code, reads files or starts
    commands.
    """
    return hmac.new(token.encode(), TRAFFIC, hashlib.sha256).hexdigest()


def opens_previews(token: str, traffic: str | None) -> bool:
    """Whether a preview of a private sandbox carries its traffic token."""
    return traffic is not None and _same(traffic, traffic_token(token))


def opens_interpreter(
    token: str, *, path: str, access_token: str | None, traffic: str | None
) -> bool:
    """Whether a request to port 49999 carries what its path needs of this sandbox's tokens."""
    if access_token is not None:
        return _same(access_token, token)
    opens = CONTEXTS.fullmatch(path) is not None
    return opens and traffic is not None and _same(traffic, traffic_token(token))
