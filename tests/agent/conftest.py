"""The agent's fixtures, from `tests/agent/sdk/agents.py`: the SDK tests there run under an
older SDK's venv too."""

from tests.agent.sdk.agents import agent, pod_agent, pod_sandbox, sandbox, workspace

__all__ = ["agent", "pod_agent", "pod_sandbox", "sandbox", "workspace"]
