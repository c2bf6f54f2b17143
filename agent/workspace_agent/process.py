"""The Process service: spawn, stream, signals, stdin, re-attach."""

from workspace_agent._proto.process.process_connect import Process
from workspace_agent.state import Agent


class ProcessService(Process):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    async def close(self) -> None:
        """Kill what is still running when the agent stops."""
