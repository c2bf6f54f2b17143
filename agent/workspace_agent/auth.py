"""`/init`, the access token and signed file URLs."""

from connectrpc.code import Code

from workspace_agent.errors import AgentError
from workspace_agent.http import Receive, Scope, Send, respond_error
from workspace_agent.state import Agent


async def init(agent: Agent, scope: Scope, receive: Receive, send: Send) -> None:
    del agent, scope, receive
    await respond_error(send, AgentError(Code.UNIMPLEMENTED, "/init"))
