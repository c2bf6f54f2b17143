"""Crossplane composing with the real function: the install as a cluster has it, with the
function and provider-kubernetes installed by Crossplane's package manager and running beside it.

The route (docs/development.md, "The control-plane tier"):

- `deploy/` is applied unchanged; its Function and Provider name `ghcr.io/cozystack/...` and
  `xpkg.crossplane.io/crossplane-contrib/...`. ImageConfigs send those pulls to a local
  registry holding the packages built from this repository's `package/` and the provider's
  pinned `package/` (`packages.py`), so the package manager fetches, parses, checks and
  installs both as it installs a release: revisions, the function's input CRD, the
  provider's CRDs through ManagedResourceDefinitions and the default activation policy.
- Crossplane runs with `--package-runtime=External`, its supported mode for a runtime it does
  not manage (nothing here runs Deployments). The runtime's one duty toward Crossplane is to
  report where a function revision serves: `runtime_ready` does that, and is the only place
  the tier plays an absent component for Crossplane.
- The function is this repository's `workspace-sandbox serve` with mutual TLS: a server
  certificate from the plane's CA, and Crossplane's client certificate checked against it,
  exactly as in a cluster (where Crossplane's initializer issues both).
- provider-kubernetes runs out of cluster with the administrator's kubeconfig for its own
  objects; what it does in a sandbox's namespace is done with the credentials its
  ProviderConfigs give (`provider_identity`).
"""

import base64
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from tests.control_plane.cozystack import start_cozystack_api
from tests.control_plane.crossplane import XR_RULE, grant, start_crossplane, wait_xrd
from tests.control_plane.install import (
    PLATFORM_NAMESPACES,
    Installed,
    apply,
    install_crds,
    kubectl,
    wait_established,
)
from tests.control_plane.packages import PROVIDER_MODULE, image_configs, publish, start_registry
from tests.control_plane.server import ControlPlane, built, listening_port, poll
from tests.deploy.install import documents
from tests.ports import free_port
from tests.support import ROOT

FUNCTION = "function-workspace-sandbox"
PROVIDER = "provider-kubernetes"
PROVIDER_ACCOUNT = "provider-kubernetes"
"""The ServiceAccount `deploy/provider-kubernetes.yaml`'s DeploymentRuntimeConfig names."""
CREDENTIALS_SECRET = "provider-kubernetes-identity"  # noqa: S105  # a Secret's name
NAMESPACE = "crossplane-system"
SETTLE_SECONDS = 120.0
"""A package pulled, parsed and its revision active; CRDs established; measured in seconds."""
SERVE_SECONDS = 30.0
CROSSPLANE_ARGS = ("--circuit-breaker-burst=500",)
"""What docs/platform-guide.md asks of Crossplane for staged placements: with v2.3's default
burst (100 watch events), an isolated sandbox's creation opens its XR's watch circuit and
reaches Running in about 130 s instead of about 5 s."""


@dataclass(frozen=True)
class Composing:
    installed: Installed
    function: str
    """Where the function serves, `127.0.0.1:PORT`."""
    clusters: dict[str, ControlPlane] = field(default_factory=dict)
    """Tenant namespace -> the API server standing in for its ComputePlane's cluster, where
    provider-kubernetes places that tenant's plane sandboxes (`cozystack.plane_installed`)."""

    @property
    def plane(self) -> ControlPlane:
        return self.installed.plane


def until(what: str, check: Any, plane: ControlPlane, seconds: float = SETTLE_SECONDS) -> Any:
    """Poll `check()` until it returns something truthy, at most `seconds`."""
    got = poll(check, seconds, interval=0.5)
    assert got, f"timed out waiting for {what}\n{plane.logs()}"
    return got


def create(plane: ControlPlane, obj: Mapping[str, Any]) -> None:
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    plural = f"{str(obj['kind']).lower()}s"
    status, answer = plane.request("POST", f"/apis/{group}/{version}/{plural}", dict(obj))
    assert status in {201, 409}, answer


def serve_function(plane: ControlPlane) -> str:
    """`workspace-sandbox serve` with mTLS on a loopback port the kernel picks: its address."""
    certs = plane.certificates("function-certs")
    command = Path(sys.executable).with_name("workspace-sandbox")
    plane.run(FUNCTION, [command, "serve", "--address", "127.0.0.1:0", "--tls-certs-dir", certs])
    process = plane.processes[FUNCTION]
    port = until(
        "the function to listen",
        lambda: process.poll() is None and listening_port(process.pid),
        plane,
        SERVE_SECONDS,
    )
    return f"127.0.0.1:{port}"


def runtime_ready(
    plane: ControlPlane, kind: str, package: str, certs: Path, endpoint: str = ""
) -> None:
    """Play the package runtime Crossplane defers to (`--package-runtime=External`) for the
    active revision of `package`, as its Deployment runtime's hooks do: the server certificate
    the package serves with (`certs`) in the Secret the revision names, that Secret's name and,
    for a function, where it serves, in the revision's status, and RuntimeHealthy. Nothing else
    of Crossplane's is played."""
    api = k8s.CustomObjectsApi(plane.client())
    plural = f"{kind.lower()}revisions"

    def active() -> dict[str, Any] | None:
        listing = api.list_cluster_custom_object(
            "pkg.crossplane.io", "v1", plural, label_selector=f"pkg.crossplane.io/package={package}"
        )
        found = [r for r in listing["items"] if r["spec"].get("desiredState") == "Active"]
        return found[0] if found else None

    revision = until(f"an active {kind} revision of {package}", active, plane)
    # The name Crossplane gives a package's server Secret; with an external runtime it leaves
    # the revision's spec without one.
    secret = revision["spec"].get("tlsServerSecretName") or f"{package}-tls-server"
    data = {name: _b64((certs / name).read_bytes()) for name in ("tls.crt", "tls.key")}
    body = k8s.V1Secret(metadata=k8s.V1ObjectMeta(name=secret), data=data)
    k8s.CoreV1Api(plane.client()).create_namespaced_secret(NAMESPACE, body)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    healthy = {
        "type": "RuntimeHealthy", "status": "True", "reason": "HealthyPackageRevision",
        "lastTransitionTime": now, "message": "",
    }  # fmt: skip
    conditions = revision.get("status", {}).get("conditions", [])
    status: dict[str, Any] = {
        "conditions": [*(c for c in conditions if c["type"] != "RuntimeHealthy"), healthy],
        "tlsServerSecretName": secret,
    }
    if endpoint:
        status["endpoint"] = endpoint
    api.patch_cluster_custom_object_status(
        "pkg.crossplane.io", "v1", plural, revision["metadata"]["name"], {"status": status}
    )


def provider_identity(plane: ControlPlane) -> Path:
    """What a pod's injected identity would give provider-kubernetes, given as a Secret; the
    kubeconfig the provider itself runs with, as that same account.

    The shipped ClusterProviderConfigs say `InjectedIdentity`: the provider's pod's own
    ServiceAccount token, read through the in-cluster configuration, which a process outside a
    pod cannot have. The same account's token (TokenRequest, as the kubelet gets it) goes into a
    kubeconfig Secret and the configs are pointed at it, so everything the provider does is
    judged by the RBAC Crossplane's RBAC manager and `deploy/` grant it and by the shipped
    admission policies as that account's; this is the one change the tier makes to a shipped
    object.
    """
    kubeconfig = plane.account_kubeconfig(NAMESPACE, PROVIDER_ACCOUNT)
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    cluster["certificate-authority-data"] = _b64(
        Path(cluster.pop("certificate-authority")).read_bytes()
    )
    secret = k8s.V1Secret(
        metadata=k8s.V1ObjectMeta(name=CREDENTIALS_SECRET),
        string_data={"kubeconfig": yaml.safe_dump(config)},
    )
    k8s.CoreV1Api(plane.client()).create_namespaced_secret(NAMESPACE, secret)
    api = k8s.CustomObjectsApi(plane.client())
    listing = api.list_cluster_custom_object(
        "kubernetes.m.crossplane.io", "v1alpha1", "clusterproviderconfigs"
    )
    assert listing["items"], "deploy/ installed no ClusterProviderConfig"
    credentials = {
        "source": "Secret",
        "secretRef": {"namespace": NAMESPACE, "name": CREDENTIALS_SECRET, "key": "kubeconfig"},
    }
    for config_object in listing["items"]:
        api.patch_cluster_custom_object(
            "kubernetes.m.crossplane.io", "v1alpha1", "clusterproviderconfigs",
            config_object["metadata"]["name"], {"spec": {"credentials": credentials}},
        )  # fmt: skip
    return kubeconfig


def runtime_deployment(plane: ControlPlane, package: str, account: str) -> None:
    """The ServiceAccount and the Deployment the Deployment runtime makes for a provider's
    active revision, owned by it: nothing runs its pod (the process beside the plane stands in
    for it), but Crossplane's RBAC manager binds the provider's roles to the account the
    Deployment names, as in a cluster."""
    api = k8s.CustomObjectsApi(plane.client())
    revisions = api.list_cluster_custom_object(
        "pkg.crossplane.io", "v1", "providerrevisions",
        label_selector=f"pkg.crossplane.io/package={package}",
    )["items"]  # fmt: skip
    (revision,) = [r for r in revisions if r["spec"].get("desiredState") == "Active"]
    owner = {
        "apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision",
        "name": revision["metadata"]["name"], "uid": revision["metadata"]["uid"],
        "controller": True, "blockOwnerDeletion": True,
    }  # fmt: skip
    core = k8s.CoreV1Api(plane.client())
    body = {"metadata": {"name": account, "ownerReferences": [owner]}}
    core.create_namespaced_service_account(NAMESPACE, body)
    labels = {"pkg.crossplane.io/revision": revision["metadata"]["name"]}
    deployment = {
        "metadata": {"name": package, "ownerReferences": [owner]},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": account,
                    "containers": [{"name": "package-runtime", "image": revision["spec"]["image"]}],
                },
            },
        },
    }
    k8s.AppsV1Api(plane.client()).create_namespaced_deployment(NAMESPACE, deployment)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def provider_certs(plane: ControlPlane) -> Path:
    """The provider's webhook certificate, from the plane's CA."""
    return plane.certificates("provider-certs")


def start_provider(plane: ControlPlane, kubeconfig: Path) -> None:
    """provider-kubernetes v1.2.1 with its webhook's certificate. Its webhook (:9443) and
    metrics (:8080) addresses are fixed in its main package."""
    certs = plane.root / "provider-certs"
    health = free_port()
    plane.run(
        PROVIDER,
        [built("provider-kubernetes") / "provider", "--debug",
         f"--health-probe-bind-addr=127.0.0.1:{health}", "--poll=15s"],
        {"TLS_SERVER_CERTS_DIR": str(certs), "KUBECONFIG": str(kubeconfig)},
    )  # fmt: skip


def first_apply(plane: ControlPlane) -> None:
    """The first `kubectl apply -k deploy/` on a new cluster, as the platform guide runs it
    (and Argo CD's sync wave 0): the ClusterProviderConfigs wait for the provider's CRDs
    (wave 1), so they alone are refused, and everything else is applied.

    `--validate=ignore`, as the guide says: on a cluster serving Cozystack v1.6.1's API,
    kubectl checks an object whose kind is not served yet against the merged OpenAPI v2
    document, which it cannot parse (Cozystack's `core` and `sdn` definitions are named by Go
    import path, and their references don't resolve); it then reports a `SchemaError` about
    Cozystack's `Option` and skips every object after that one, the Provider among them, so
    the provider's CRDs never come and a second run fails the same way."""
    first = kubectl(
        plane, "apply", "--server-side", "--field-manager=argocd-controller", "--validate=ignore",
        "-k", str(ROOT / "deploy"), check=False,
    )  # fmt: skip
    assert first.returncode != 0, first.stdout
    refused = [line for line in first.stderr.splitlines() if "not found" in line]
    configs = [d for d in documents() if d["kind"] == "ClusterProviderConfig"]
    assert len(refused) == len(configs) == 3, first.stderr
    assert all('no matches for kind "ClusterProviderConfig"' in line for line in refused), (
        first.stderr
    )
    built_docs = kubectl(plane, "kustomize", str(ROOT / "deploy")).stdout
    wanted = {
        (d["kind"].lower(), d["metadata"]["name"])
        for d in yaml.safe_load_all(built_docs)
        if d and d["kind"] != "ClusterProviderConfig"
    }
    applied = set()
    for line in first.stdout.splitlines():
        resource, _, name = line.split()[0].partition("/")
        applied.add((resource.split(".")[0], name))
    assert applied == wanted, (sorted(wanted - applied), sorted(applied - wanted), first.stderr)


def start_composing(plane: ControlPlane) -> Composing:
    crds = install_crds(plane, skip=(PROVIDER_MODULE,))
    for namespace in PLATFORM_NAMESPACES:
        kubectl(plane, "create", "namespace", namespace)
    # Cozystack's own API (the ComputePlane kind), as the cluster has it before this install.
    start_cozystack_api(plane)
    registry = start_registry(plane)
    publish(plane, registry)
    start_crossplane(plane, runtime="External", webhooks=True, args=CROSSPLANE_ARGS)
    for config in image_configs(registry):
        create(plane, config)
    function = serve_function(plane)
    first_apply(plane)
    apply(plane, "-k", str(ROOT / "deploy" / "gateway"))
    runtime_ready(plane, "Function", FUNCTION, plane.root / "function-certs", function)
    runtime_ready(plane, "Provider", PROVIDER, provider_certs(plane))
    until(
        "provider-kubernetes' CRDs",
        lambda: (
            kubectl(
                plane, "get", "crd", "objects.kubernetes.m.crossplane.io", check=False
            ).returncode
            == 0
        ),
        plane,
    )
    wait_established(
        plane,
        ["objects.kubernetes.m.crossplane.io", "clusterproviderconfigs.kubernetes.m.crossplane.io"],
    )
    apply(plane, "-k", str(ROOT / "deploy"))
    # The RBAC manager's grants to Crossplane: the XRD's kind, and the provider's Objects.
    runtime_deployment(plane, PROVIDER, PROVIDER_ACCOUNT)
    grant(plane, XR_RULE, ("kubernetes.m.crossplane.io", "objects"), bound=PROVIDER_ACCOUNT)
    wait_xrd(plane)
    start_provider(plane, provider_identity(plane))
    return Composing(Installed(plane, crds), function)
