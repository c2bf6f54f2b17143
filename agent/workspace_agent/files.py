"""GET and POST /files: streamed down and up, multipart and octet-stream."""

from connectrpc.code import Code

from workspace_agent.errors import AgentError
from workspace_agent.http import Receive, Scope, Send, respond_error
from workspace_agent.state import Agent


async def handle(agent: Agent, scope: Scope, receive: Receive, send: Send) -> None:
    del agent, receive
    await respond_error(send, AgentError(Code.UNIMPLEMENTED, f"{scope['method']} /files"))
