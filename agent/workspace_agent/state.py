"""What one agent knows: its settings, and what `/init` set since it started."""

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from workspace_agent.interpreting import Interpreter
from workspace_agent.users import Users


@dataclass
class Session:
    """Set by `/init` (the gateway's, before it hands the sandbox out); empty at start."""

    env: dict[str, str] = field(default_factory=dict)
    """Sandbox-wide environment for every command, below each request's own."""
    access_token: str | None = None
    workdir: Path | None = None
    """The default working directory, when `/init` named one; else the workspace root."""
    code_interpreter: bool = False
    """Whether `/init` asked for the code interpreter."""

    @property
    def initialised(self) -> bool:
        """Whether `/init` has set an access token; until then the agent serves no one."""
        return self.access_token is not None

    def token_matches(self, presented: str | None) -> bool:
        """Whether `presented` is the access token: never while there is none."""
        if self.access_token is None:
            return False
        return presented is not None and secrets.compare_digest(
            presented.encode(), self.access_token.encode()
        )


@dataclass
class Agent:
    root: Path
    """The workspace root: relative paths, the default cwd and HOME."""
    users: Users
    session: Session = field(default_factory=Session)
    remote_only: bool = False
    """Refuse every peer at an address of this machine (`--remote-only`, a VM's agent)."""
    interpreter: Interpreter = field(default_factory=Interpreter.absent)
    """The code interpreter it runs when `/init` asks (`--interpreter`)."""

    @property
    def workdir(self) -> Path:
        return self.session.workdir or self.root
