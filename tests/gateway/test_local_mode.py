"""`--local` never loads the Kubernetes client: half the gateway's start-up was importing it."""

import subprocess
import sys
import textwrap


def test_the_local_mode_imports_no_kubernetes_client() -> None:
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path

        from workspace_gateway import main
        from workspace_gateway.app import build_app
        from workspace_gateway.keys import StaticKeys
        from workspace_gateway.local_backend import LocalBackend

        args = main.parser().parse_args(["--local", "--address", "127.0.0.1:8080"])
        assert args.local
        backend = LocalBackend(Path("workspace-sandbox-agent"), "nobody")
        build_app(backend, backend.http, keys=StaticKeys({}), domain=args.domain)
        loaded = sorted(m for m in sys.modules if m == "kubernetes" or ".kubernetes" in m
                        or m.startswith("kubernetes."))
        print(",".join(loaded))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == ""
