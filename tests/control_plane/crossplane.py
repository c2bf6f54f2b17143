"""Crossplane core v2.3.4 against the plane, out of cluster: its own binary, the plane's
administrator kubeconfig, no webhooks (nothing can reach a webhook server here; the Usages'
admission is what those would add), and a client certificate from the plane's CA for the
mutual TLS it speaks to functions.
"""

import shutil

from tests.control_plane.install import Installed, kubectl
from tests.control_plane.server import _ports, built, issue

XRD = "workspacesandboxes.sandbox.cozystack.io"
ESTABLISHED_SECONDS = 60


def start_crossplane(installed: Installed) -> None:
    plane = installed.plane
    pki = plane.root / "pki"
    certs = plane.root / "crossplane-client"
    certs.mkdir()
    crt, key = issue(pki, "crossplane-client", client=True)
    shutil.copy(pki / "ca.crt", certs / "ca.crt")
    shutil.copy(crt, certs / "tls.crt")
    shutil.copy(key, certs / "tls.key")
    metrics, health = _ports(2)
    plane.run(
        "crossplane",
        [
            built("crossplane") / "crossplane", "core", "start",
            "--webhook-enabled=false", "--namespace=crossplane-system",
            f"--cache-dir={plane.root / 'xpkg'}",
            f"--metrics-port={metrics}", f"--health-probe-port={health}",
        ],
        {"TLS_CLIENT_CERTS_DIR": str(certs)},
    )  # fmt: skip
    run = kubectl(
        plane, "wait", f"xrd/{XRD}", "--for=condition=Established",
        f"--timeout={ESTABLISHED_SECONDS}s", check=False,
    )  # fmt: skip
    assert run.returncode == 0, f"{run.stderr}\n{plane.logs()}"
