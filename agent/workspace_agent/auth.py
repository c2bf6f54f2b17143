"""`/init`, the access token and signed file URLs.

`/init` is the gateway's: the first call is taken on trust (the sandbox has just started and only
the gateway can reach it), and from then on only a caller presenting the current token may call
it again, to rotate the token or change the defaults. The first call must set a token: an agent
without one serves no one (`server.py`), and an `/init` that left it so would open nothing but
let anyone who came next set the token. A body is checked whole before anything changes, so a
bad field never leaves half the settings applied.

`/files` takes either the token in `X-Access-Token` or a signature made with it, so that a URL
can be handed to something that holds no token: `v1_` and the unpadded base64 of
sha256("<path>:<read|write>:<username>:<token>[:<expiration>]"), the SDK's `download_url` and
`upload_url`. As in envd, a token in the header that doesn't match is refused even when the URL
is also signed.
"""

import base64
import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from connectrpc.code import Code

from workspace_agent import paths
from workspace_agent.errors import AgentError
from workspace_agent.http import Receive, Scope, Send, header, number, respond, respond_error
from workspace_agent.state import Agent, Session

Operation = Literal["read", "write"]
MAX_INIT_BODY = 1 << 20


def signature(
    path: str, operation: Operation, username: str, token: str, expiration: int | None
) -> str:
    raw = f"{path}:{operation}:{username}:{token}"
    if expiration is not None:
        raw += f":{expiration}"
    digest = hashlib.sha256(raw.encode()).digest()
    return "v1_" + base64.b64encode(digest).rstrip(b"=").decode()


def authorize_files(
    session: Session, scope: Scope, params: dict[str, str], operation: Operation
) -> None:
    """Let a `/files` request through with the token or a valid, unexpired signature."""
    token = session.access_token
    if token is None:  # the app refuses every /files before /init; never open without a token
        raise AgentError(Code.UNAUTHENTICATED, "the sandbox's agent has not been initialised")
    presented = header(scope, "x-access-token")
    if presented is not None:  # present, even empty: it must match (the gateway's rule too)
        if session.token_matches(presented):
            return
        raise AgentError(Code.UNAUTHENTICATED, "the access token does not match")
    given = params.get("signature")
    if given is None:
        raise AgentError(Code.UNAUTHENTICATED, "missing access token or signature")
    expiration: int | None = None
    if "signature_expiration" in params:
        # ASCII digits only, as the gateway reads it: `int` also takes "+1", " 1" and "1_0".
        expiration = number(params["signature_expiration"])
        if expiration is None:
            raise AgentError(
                Code.UNAUTHENTICATED, "signature_expiration is not a whole number of seconds"
            )
    expected = signature(
        params.get("path", ""), operation, params.get("username", ""), token, expiration
    )
    if not secrets.compare_digest(expected.encode(), given.encode()):
        raise AgentError(Code.UNAUTHENTICATED, "invalid signature")
    if expiration is not None and expiration < time.time():
        raise AgentError(Code.UNAUTHENTICATED, "signature is already expired")


@dataclass(frozen=True)
class InitRequest:
    env: dict[str, str] | None
    access_token: str | None
    default_user: str | None
    default_workdir: str | None
    code_interpreter: bool | None = None
    """This project's own: whether the sandbox runs the code interpreter (`interpreting`)."""


def parse_init(body: bytes) -> InitRequest:
    """The fields of an `/init` body this agent uses, checked; others are ignored."""
    if not body.strip():
        return InitRequest(None, None, None, None)
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AgentError(Code.INVALID_ARGUMENT, f"the /init body is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise AgentError(Code.INVALID_ARGUMENT, "the /init body must be a JSON object")
    env = value.get("envVars")
    if env is not None and not (
        isinstance(env, dict) and all(isinstance(v, str) for v in env.values())
    ):
        raise AgentError(Code.INVALID_ARGUMENT, "envVars must be an object of strings")
    for name in ("accessToken", "defaultUser", "defaultWorkdir"):
        field = value.get(name)
        if field is not None and (not isinstance(field, str) or not field):
            raise AgentError(Code.INVALID_ARGUMENT, f"{name} must be a non-empty string")
    interpreter = value.get("codeInterpreter")
    if interpreter is not None and not isinstance(interpreter, bool):
        raise AgentError(Code.INVALID_ARGUMENT, "codeInterpreter must be true or false")
    return InitRequest(
        code_interpreter=interpreter,
        env=env,
        access_token=value.get("accessToken"),
        default_user=value.get("defaultUser"),
        default_workdir=value.get("defaultWorkdir"),
    )


def apply_init(agent: Agent, request: InitRequest) -> None:
    """Check every setting, then change them together."""
    try:
        user = agent.users.resolve(request.default_user)
    except AgentError as e:
        raise AgentError(Code.INVALID_ARGUMENT, f"defaultUser: {e.message}") from None
    if request.code_interpreter and (missing := agent.interpreter.missing) is not None:
        raise AgentError(
            Code.FAILED_PRECONDITION, f"codeInterpreter: this sandbox cannot run it: {missing}"
        )
    workdir = agent.session.workdir
    if request.default_workdir is not None:
        workdir = Path(paths.resolve(request.default_workdir, agent.workdir, user.home))
        if not os.path.isdir(workdir):
            raise AgentError(
                Code.INVALID_ARGUMENT, f"defaultWorkdir {str(workdir)!r} is not a directory"
            )
    if request.default_user is not None:
        agent.users.set_default(request.default_user)
    if request.env is not None:
        agent.session.env = dict(request.env)
    if request.access_token is not None:
        agent.session.access_token = request.access_token
    if request.code_interpreter is not None:
        agent.session.code_interpreter = request.code_interpreter
    agent.session.workdir = workdir


async def _read_body(receive: Receive, limit: int) -> bytes:
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise AgentError(Code.CANCELED, "the client went away")
        body += message.get("body", b"")
        if len(body) > limit:
            raise AgentError(Code.INVALID_ARGUMENT, f"the body is larger than {limit} bytes")
        if not message.get("more_body", False):
            return bytes(body)


async def init(agent: Agent, scope: Scope, receive: Receive, send: Send) -> None:
    first = not agent.session.initialised
    if not first and not agent.session.token_matches(header(scope, "x-access-token")):
        await respond_error(
            send, AgentError(Code.UNAUTHENTICATED, "invalid or missing access token")
        )
        return
    try:
        request = parse_init(await _read_body(receive, MAX_INIT_BODY))
        if first and request.access_token is None:
            raise AgentError(
                Code.INVALID_ARGUMENT,
                "accessToken is required: the agent has none yet, and serves no one without it",
            )
        apply_init(agent, request)
    except AgentError as e:
        await respond_error(send, e)
        return
    if agent.session.code_interpreter:
        await agent.interpreter.configure(agent.users.resolve(None), agent.session.env)
    else:
        await agent.interpreter.close()
    await respond(send, 204, headers=((b"cache-control", b"no-store"),))
