"""The one place that speaks `/health` and `/init` to a sandbox's agent, for both backends.

An agent answers `/health` as soon as it serves, with its envd version and whether it holds
its token (`INITIALIZED`); it takes `/init` (the caller's token, env vars and folder) once
started, and again after a restart, when it has forgotten them.
"""

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from workspace_gateway.backend import INITIALIZED
from workspace_gateway.errors import GatewayError

HEALTH_SECONDS = 2.0  # one `/health` call
INIT_SECONDS = 10.0  # one `/init` call
DEFAULT_VERSION = "0.1.0"  # what an agent that names no envd version speaks


@dataclass(frozen=True)
class Health:
    version: str
    """Its envd version (`x-envd-version`)."""
    initialized: bool
    """Whether it holds its token: False after a restart, until `/init` again."""


def _health_of(answer: httpx.Response) -> Health:
    version = str(answer.headers.get("x-envd-version", DEFAULT_VERSION))
    return Health(version, answer.headers.get(INITIALIZED) != "false")


async def health(
    http: httpx.AsyncClient, url: str, seconds: float = HEALTH_SECONDS
) -> Health | None:
    """What the agent at `url` says of itself within `seconds`; None while it is down."""
    try:
        answer = await http.get(url + "/health", timeout=seconds)
    except httpx.TransportError:
        return None
    return _health_of(answer) if answer.is_success else None


async def initialized(http: httpx.AsyncClient, url: str) -> bool:
    """Whether a running agent still holds its token; 502 when it does not answer at all."""
    try:
        answer = await http.get(url + "/health", timeout=HEALTH_SECONDS)
    except httpx.TransportError as e:
        raise GatewayError(502, f"the sandbox's agent did not answer: {e!r}") from None
    return _health_of(answer).initialized


async def wait_healthy(
    http: httpx.AsyncClient,
    url: str,
    seconds: float,
    exited: Callable[[], int | None],
    *,
    every: float = 0.05,
    each: float = 1.0,
) -> Health:
    """The agent's health once it answers, asked every `every` seconds for `seconds` at most.

    Each `/health` call may take `each` seconds. `exited` is its process's exit code, None
    while it runs: a dead agent is not waited for. A cluster's wait also follows the
    platform's view of the sandbox, so it asks `health` itself between the watch's events
    (`kubernetes.calls`).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        if (code := exited()) is not None:
            raise GatewayError(500, f"the sandbox's agent exited with {code}")
        found = await health(http, url, each)
        if found is not None:
            return found
        await asyncio.sleep(every)
    raise GatewayError(504, f"the sandbox's agent did not answer within {seconds:.0f} s")


@dataclass(frozen=True)
class Init:
    """What `/init` gives an agent: its caller's token, env vars and folder."""

    access_token: str
    env_vars: Mapping[str, str]
    workdir: str
    code_interpreter: bool


async def init(
    http: httpx.AsyncClient, url: str, settings: Init, *, present_token: bool = True
) -> None:
    """`/init` the agent; 500 when it refuses.

    With `present_token` the token also goes in `X-Access-Token`, which an agent that already
    holds it asks for (a retried create finds its sandbox initialised); the local mode's
    agents are always fresh when it calls.
    """
    body = {
        "envVars": dict(settings.env_vars),
        "accessToken": settings.access_token,
        "defaultWorkdir": settings.workdir,
        "timestamp": datetime.now(UTC).isoformat(),
        "codeInterpreter": settings.code_interpreter,
    }
    headers = {"X-Access-Token": settings.access_token} if present_token else {}
    answer = await http.post(url + "/init", json=body, headers=headers, timeout=INIT_SECONDS)
    if answer.status_code != 204:  # noqa: PLR2004  # HTTP No Content
        raise GatewayError(500, f"the sandbox's agent refused /init: {answer.text[:200]}")
