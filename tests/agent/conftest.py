"""The agent's fixtures live beside the SDK tests, which also run under an older SDK's venv."""

from tests.agent.sdk.conftest import agent, pod_agent, pod_sandbox, sandbox, workspace

__all__ = ["agent", "pod_agent", "pod_sandbox", "sandbox", "workspace"]
