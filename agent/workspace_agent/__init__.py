"""The in-sandbox agent: envd's protocol (files and processes) over one workspace root."""

__version__ = "0.1.0"

ENVD_VERSION = "0.6.4"
"""The envd release whose protocol this agent implements, as the SDK's version gates read it.

0.6.4 is the last of the SDK's gates (e2b 2.63.0, `e2b/envd/versions.py`): watching a network
file system only when `allow_network_mounts` says so. Before it come watch events with their
entry (`include_entry`, 0.6.3), file metadata (`X-Metadata-*`, 0.6.2), octet-stream uploads
(0.5.7), close_stdin (0.5.2) and the server choosing the default user (0.4.0). Raise it only
with what the next gate asks for.
"""
