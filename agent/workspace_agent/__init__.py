"""The in-sandbox agent: envd's protocol (files and processes) over one workspace root."""

__version__ = "0.1.0"

ENVD_VERSION = "0.5.7"
"""The envd release whose protocol this agent implements, as the SDK's version gates read it.

0.5.7 is the first with octet-stream uploads; close_stdin (0.5.2) and the server choosing the
default user (0.4.0) come before it. Raise it only with what the next gate asks for.
"""
