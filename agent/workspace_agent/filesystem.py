"""The Filesystem service: stat, list, mkdir, move, remove."""

from workspace_agent._proto.filesystem.filesystem_connect import Filesystem
from workspace_agent.state import Agent


class FilesystemService(Filesystem):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
