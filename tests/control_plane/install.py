"""The install on a real API server: the upstream CRDs, then deploy/ and deploy/gateway/ with
server-side apply, as the shipped Argo CD Applications sync them (`ServerSideApply=true`).

The CRDs of the components the tier runs come from their pinned sources (Crossplane's
`cluster/crds`, provider-kubernetes's `package/crds`, agent-sandbox's `k8s/crds`); those of the
components it does not run (KubeVirt, CDI, the snapshot controller, Cilium, cert-manager) from
`schemas/upstream/`, so their objects are stored and validated by the real server.
"""

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.control_plane.server import ControlPlane, built, source
from tests.support import ROOT

UPSTREAM = ROOT / "schemas" / "upstream"
VENDORED_CRDS = ("kubevirt", "cdi", "external-snapshotter", "cilium", "cert-manager")
SOURCED_CRDS = {
    "github.com/crossplane/crossplane/v2": "cluster/crds/*.yaml",
    # The namespaced kinds only: the legacy cluster-scoped ones convert through the provider's
    # webhook, which Crossplane's package manager wires up when it installs the package.
    "github.com/crossplane-contrib/provider-kubernetes": "package/crds/kubernetes.m.*.yaml",
    "sigs.k8s.io/agent-sandbox": "k8s/crds/*.yaml",
}
FIELD_MANAGER = "argocd-controller"
"""The manager Argo CD's server-side apply writes as."""
ESTABLISHED_SECONDS = 60
PLATFORM_NAMESPACES = ("crossplane-system", "cozy-public")
"""Namespaces a Cozystack cluster with Crossplane has before this install: Crossplane's own,
and the one the image catalog's DataVolumes live in."""


@dataclass(frozen=True)
class Installed:
    plane: ControlPlane
    crds: tuple[str, ...]
    """The names of the CRDs installed before the project's own manifests."""


def kubectl(
    plane: ControlPlane, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """The pinned kubectl against the plane, as the administrator."""
    argv = [str(built("kubernetes") / "kubectl"), "--kubeconfig", str(plane.kubeconfig)]
    argv += ["--cache-dir", str(plane.root / "kubectl-cache"), *args]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if check and run.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {run.stderr.strip() or run.stdout}")
    return run


def apply(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl apply --server-side` with Argo CD's field manager."""
    return kubectl(plane, "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", *args)


def crd_files(skip: tuple[str, ...] = ()) -> list[Path]:
    files = []
    for folder in VENDORED_CRDS:
        files += sorted((UPSTREAM / folder).rglob("*.yaml"))
    for module, under in SOURCED_CRDS.items():
        if module not in skip:
            files += sorted(source(module).glob(under))
    return [
        f for f in files if yaml.safe_load(f.read_text()).get("kind") == "CustomResourceDefinition"
    ]


def install_crds(plane: ControlPlane, skip: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The upstream CRDs, but those of the pinned modules in `skip` (a package installs them)."""
    files = crd_files(skip)
    names = [yaml.safe_load(path.read_text())["metadata"]["name"] for path in files]
    apply(plane, *(arg for path in files for arg in ("-f", str(path))))
    wait_established(plane, names)
    return tuple(names)


def wait_established(plane: ControlPlane, names: list[str]) -> None:
    kubectl(
        plane, "wait", "--for=condition=Established", f"--timeout={ESTABLISHED_SECONDS}s",
        *(f"crd/{n}" for n in names),
    )  # fmt: skip


def install(plane: ControlPlane) -> Installed:
    crds = install_crds(plane)
    for namespace in PLATFORM_NAMESPACES:
        kubectl(plane, "create", "namespace", namespace)
    apply(plane, "-k", str(ROOT / "deploy"))
    apply(plane, "-k", str(ROOT / "deploy" / "gateway"))
    # A policy takes effect once the API server's informers have its binding; give them the
    # time a real install's next request would have.
    time.sleep(2)
    return Installed(plane, crds)
