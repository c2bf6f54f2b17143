"""The fixtures of `tests/agent/sdk/agents.py`, for the tests in this folder (also when it runs
alone, under an older SDK's venv)."""

from tests.agent.sdk.agents import (
    agent,
    pod_agent,
    pod_sandbox,
    sandbox,
    workspace,
)
from tests.pyenv import no_stale_pyenv_lock

__all__ = ["agent", "no_stale_pyenv_lock", "pod_agent", "pod_sandbox", "sandbox", "workspace"]
