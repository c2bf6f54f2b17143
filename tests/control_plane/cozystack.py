"""Cozystack's aggregated API server against the plane: `apps.cozystack.io` served as on a
Cozystack cluster, so a ComputePlane is a real object of a real server.

`cozystack-api` v1.6.1 (built by `scripts/cluster-tools`) serves each tenant kind an
ApplicationDefinition describes, and stores every one as a Flux HelmRelease. It runs as its
chart installs it: its own ServiceAccount with the chart's RBAC, delegated authentication and
authorization, registered with the API server's aggregation layer by the chart's APIService.
The CRDs it reads come from the same pinned release: the ApplicationDefinition and
WorkloadMonitor kinds, and the Flux v2.8.0 CRDs Cozystack installs. The ComputePlane's
ApplicationDefinition is the one vendored in `schemas/upstream/` (ComputePlane is on
Cozystack's main branch only; no release defines it yet).

What a Cozystack cluster does next is absent here: Flux's helm-controller installing the
HelmRelease's chart, and Kamaji writing the plane's admin kubeconfig. `plane_installed` plays
both in one helper, pointing the kubeconfig at another real API server.
"""

import base64
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.control_plane.install import UPSTREAM, apply, kubectl, wait_established
from tests.control_plane.server import ControlPlane, built, listening_port, poll, source
from tests.ports import free_port

MODULE = "github.com/cozystack/cozystack"
NAMESPACE = "cozy-system"
ACCOUNT = "cozystack-api"
SERVICE = "cozystack-api"
GROUP = "apps.cozystack.io"
CHART = "packages/system/cozystack-api/templates"
CHART_RBAC = ("sa.yaml", "rbac.yaml", "rbac-bind.yaml", "auth-delegator.yaml", "auth-reader.yaml")
"""The chart's templates for the server's identity; plain manifests, but for `sa.yaml`'s
namespace."""
CRDS = (
    "packages/system/application-definition-crd/definition/cozystack.io_applicationdefinitions.yaml",
    "packages/system/cozystack-controller/definitions/cozystack.io_workloadmonitors.yaml",
    "packages/system/cozystack-controller/definitions/cozystack.io_workloads.yaml",
)
FLUX = "internal/fluxinstall/manifests/fluxcd.yaml"
"""The Flux release Cozystack v1.6.1 installs (v2.8.0), as one manifest; its CRDs are taken."""
DEFINITIONS = ("computeplane.yaml",)
AVAILABLE_SECONDS = 60.0
START_ATTEMPTS = 4


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _crds(root: Path) -> list[dict[str, Any]]:
    found = [d for rel in CRDS for d in _documents(root / rel)]
    found += [d for d in _documents(root / FLUX) if d["kind"] == "CustomResourceDefinition"]
    assert all(d["kind"] == "CustomResourceDefinition" for d in found)
    return found


def _chart(root: Path) -> list[dict[str, Any]]:
    out = []
    for template in CHART_RBAC:
        text = (root / CHART / template).read_text()
        text = text.replace("{{ .Release.Namespace }}", NAMESPACE)
        assert "{{" not in text, f"{template} grew templating this tier does not render"
        out += [d for d in yaml.safe_load_all(text) if d]
    return out


def _write(plane: ControlPlane, name: str, documents: list[dict[str, Any]]) -> Path:
    path = plane.root / name
    path.write_text(yaml.safe_dump_all(documents))
    return path


def start_cozystack_api(plane: ControlPlane) -> None:
    """cozystack-api serving `apps.cozystack.io` through the plane's aggregation layer."""
    root = source(MODULE)
    crds = _crds(root)
    apply(plane, "-f", str(_write(plane, "cozystack-crds.yaml", crds)))
    wait_established(plane, [d["metadata"]["name"] for d in crds])
    definitions = [UPSTREAM / "cozystack" / "applicationdefinitions" / d for d in DEFINITIONS]
    apply(plane, *(arg for d in definitions for arg in ("-f", str(d))))
    kubectl(plane, "create", "namespace", NAMESPACE)
    apply(plane, "-f", str(_write(plane, "cozystack-api-rbac.yaml", _chart(root))))
    kubeconfig = plane.account_kubeconfig(NAMESPACE, ACCOUNT)
    # The name the aggregation layer checks the server's certificate against: its Service's.
    certs = plane.certificates("cozystack-api-certs", hosts=(f"{SERVICE}.{NAMESPACE}.svc",))
    for attempt in range(START_ATTEMPTS):
        port = free_port()
        name = f"cozystack-api-{attempt}"
        plane.run(name, [
            built("cozystack-api") / "cozystack-api",
            "--kubeconfig", kubeconfig,
            "--authentication-kubeconfig", kubeconfig,
            "--authorization-kubeconfig", kubeconfig,
            "--bind-address", "127.0.0.1", "--secure-port", str(port),
            "--tls-cert-file", certs / "tls.crt", "--tls-private-key-file", certs / "tls.key",
        ], {"KUBECONFIG": str(kubeconfig)})  # fmt: skip
        if _serving(plane.processes[name], port):
            break
        log = (plane.root / f"{name}.log").read_text(errors="replace")
        plane.halt(name)
        if "address already in use" not in log:
            raise AssertionError(f"cozystack-api did not start:\n{log[-4000:]}")
    else:
        raise AssertionError(f"cozystack-api did not start:\n{plane.logs()}")
    _register(plane, port)


def _serving(process: subprocess.Popen[bytes], port: int) -> bool:
    """Whether the server listens on `port`; False if it ended first (a port taken meanwhile)."""
    listening = poll(lambda: process.poll() is not None or listening_port(process.pid) == port, 30)
    return bool(listening) and process.poll() is None


def _register(plane: ControlPlane, port: int) -> None:
    """The chart's Service and APIService. Nothing routes a ClusterIP here, so the Service is
    an ExternalName one naming loopback, which the aggregation layer dials as it is; the
    APIService trusts the plane's CA where the chart has cert-manager inject its own."""
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "localhost",
                 "ports": [{"port": port, "targetPort": port}]},
    }  # fmt: skip
    ca = base64.b64encode(plane.ca.read_bytes()).decode()
    api_service = {
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": f"v1alpha1.{GROUP}"},
        "spec": {
            "group": GROUP, "version": "v1alpha1", "groupPriorityMinimum": 1000,
            "versionPriority": 15, "caBundle": ca,
            "service": {"name": SERVICE, "namespace": NAMESPACE, "port": port},
        },
    }  # fmt: skip
    apply(plane, "-f", str(_write(plane, "cozystack-api-service.yaml", [service, api_service])))

    def available() -> bool:
        _, got = plane.request(
            "GET", f"/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.{GROUP}"
        )
        conditions = (got.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

    assert poll(available, AVAILABLE_SECONDS), f"{GROUP} never became available\n{plane.logs()}"


def plane_installed(
    host: ControlPlane, namespace: str, name: str, *, inside: ControlPlane, secret: str, key: str
) -> None:
    """Play what installs a ComputePlane on Cozystack, absent here: Flux's helm-controller
    reporting the plane's HelmRelease installed (its Ready condition, which cozystack-api
    reports as the ComputePlane's), and Kamaji writing the plane's admin kubeconfig Secret,
    which points at `inside`, another real API server standing in for the plane's cluster."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path = f"/apis/helm.toolkit.fluxcd.io/v2/namespaces/{namespace}/helmreleases/{name}"
    status, release = host.request("GET", path)
    assert status == 200, release
    ready = {
        "type": "Ready", "status": "True", "reason": "InstallSucceeded",
        "message": "Helm install succeeded", "lastTransitionTime": now,
        "observedGeneration": release["metadata"].get("generation", 1),
    }  # fmt: skip
    body = {
        **release,
        "status": {"conditions": [ready], "observedGeneration": ready["observedGeneration"]},
    }
    status, answer = host.request("PUT", f"{path}/status", body)
    assert status == 200, answer
    config = yaml.safe_load(inside.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    cluster["certificate-authority-data"] = base64.b64encode(
        Path(cluster.pop("certificate-authority")).read_bytes()
    ).decode()
    data = {key: base64.b64encode(yaml.safe_dump(config).encode()).decode()}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret}, "data": data}
    status, answer = host.request("POST", f"/api/v1/namespaces/{namespace}/secrets", body)
    assert status in {201, 409}, answer


def computeplane(host: ControlPlane, namespace: str, name: str) -> Mapping[str, Any]:
    status, got = host.request(
        "GET", f"/apis/{GROUP}/v1alpha1/namespaces/{namespace}/computeplanes/{name}"
    )
    assert status == 200, got
    return got
