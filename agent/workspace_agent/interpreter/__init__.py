"""The code interpreter: E2B's Jupyter-backed `run_code` API on port 49999, in the sandbox.

The agent starts it as the sandbox's user (`supervisor`), when it is given `--interpreter`
and once `/init` has given it the sandbox's variables. It needs the agent's `interpreter`
extra (`jupyter_client`, `ipykernel`); JavaScript and TypeScript need Deno on PATH.
"""
