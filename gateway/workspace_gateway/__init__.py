"""The sandbox gateway: E2B's control API, and a streaming proxy to each sandbox's agent."""

__version__ = "0.1.0"
