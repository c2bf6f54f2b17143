"""The agent-sandbox kind: a Sandbox running the hardened pod, its workspace a claim beside it.

`workload.py` answers the `Workload` protocol, `claim_template.py` for an older Sandbox whose
claim came from its template; `sandbox.py` composes the Sandbox and keeps such templates.
"""
