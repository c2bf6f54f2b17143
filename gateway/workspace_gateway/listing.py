"""`GET /v2/sandboxes`: its filters, its order and its pages; and the query's values."""

import base64
import binascii
import re
from datetime import datetime
from urllib.parse import parse_qsl, unquote

from workspace_gateway.backend import Sandbox, State
from workspace_gateway.errors import GatewayError
from workspace_gateway.reply import Reply
from workspace_gateway.sandbox_json import listed_json

DEFAULT_LIMIT = 100
MAX_LIMIT = 100


def metadata_filter(raw: str) -> dict[str, str]:
    """The `metadata` list filter, whose outer layer of quoting the query parser took off.

    The SDK quotes each key and value, urlencodes the pairs, and its HTTP client quotes the
    whole again: what is left here is the pairs, each part still quoted once.
    """
    try:
        return {
            unquote(k, errors="strict"): unquote(v, errors="strict")
            for k, v in parse_qsl(raw, keep_blank_values=True, strict_parsing=bool(raw))
        }
    except (ValueError, UnicodeDecodeError):
        raise GatewayError(400, f"metadata filter {raw!r} is not key=value pairs") from None


def _key(sandbox: Sandbox) -> tuple[int, str]:
    moment = sandbox.started_at
    return (int(moment.timestamp() * 1_000_000), sandbox.sandbox_id)


def page_token(sandbox: Sandbox) -> str:
    """Where the next page starts: after this sandbox, so deletions in between skip nothing."""
    micros, sandbox_id = _key(sandbox)
    return base64.urlsafe_b64encode(f"{micros}:{sandbox_id}".encode()).decode().rstrip("=")


def token_key(token: str) -> tuple[int, str]:
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        micros, sandbox_id = text.split(":", 1)
        if not re.fullmatch(r"[a-z0-9]+", sandbox_id):
            raise ValueError
        return int(micros), sandbox_id
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise GatewayError(400, "nextToken is not a token this gateway gave out") from None


def query_value(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


def started_after(text: str | None) -> datetime | None:
    """The `startedAfter` list filter: an RFC 3339 time with its offset, as the SDK sends it."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise GatewayError(
            400,
            f"startedAfter {text!r} is not an RFC 3339 time with an offset, such as "
            "2026-12-03T07:00:00Z (a + in the query is sent as %2B)",
        )
    return moment


def page(sandboxes: list[Sandbox], query: dict[str, list[str]]) -> Reply:
    """`GET /v2/sandboxes`: filter by metadata, state, template and start, order, then a page.

    `template` matches the template a sandbox was created from, by the name it was asked for
    (this gateway's templates have no separate IDs); `startedAfter` keeps the sandboxes started
    at or after that time.
    """
    wanted = metadata_filter(query_value(query, "metadata") or "")
    template = query_value(query, "template")
    since = started_after(query_value(query, "startedAfter"))
    states_text = query_value(query, "state")
    states = set(State) if not states_text else set()
    for name in (states_text or "").split(","):
        if name:
            try:
                states.add(State(name))
            except ValueError:
                raise GatewayError(400, f"state {name!r} is not running or paused") from None
    order = query_value(query, "order") or "desc"
    if order not in {"asc", "desc"}:
        raise GatewayError(400, "order must be asc or desc")
    limit = limit_of(query)
    chosen = sorted(
        (
            s
            for s in sandboxes
            if s.state in states
            and all(s.metadata.get(k) == v for k, v in wanted.items())
            and (not template or s.template == template)
            and (since is None or s.started_at >= since)
        ),
        key=_key,
        reverse=order == "desc",
    )
    token = query_value(query, "nextToken")
    if token:
        after = token_key(token)
        chosen = [s for s in chosen if (_key(s) < after if order == "desc" else _key(s) > after)]
    headers = (("x-next-token", page_token(chosen[limit - 1])),) if len(chosen) > limit else ()
    return Reply(200, [listed_json(s) for s in chosen[:limit]], headers)


def limit_of(query: dict[str, list[str]]) -> int:
    text = query_value(query, "limit")
    if text is None:
        return DEFAULT_LIMIT
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise GatewayError(400, f"limit must be from 1 to {MAX_LIMIT}")
    return int(text)


def unix_of(query: dict[str, list[str]], name: str) -> int | None:
    text = query_value(query, name)
    if text is None or text == "":
        return None
    if not text.isdigit():
        raise GatewayError(400, f"{name} must be a time in Unix seconds")
    return int(text)
