"""Crossplane core v2.3.4 against the plane, out of cluster, as its Helm chart installs it: the
chart's ServiceAccount and RBAC (rendered from the pinned chart), its RBAC manager granting
Crossplane what each XRD and provider needs, `core init` then `core start` as that account. No
webhooks (nothing can reach a webhook server here; the Usages' admission is what those would
add), and a client certificate from the plane's CA for the mutual TLS it speaks to functions.
"""

import base64
import re
import socket
import subprocess
from collections.abc import Sequence

import yaml

from tests.control_plane.install import apply, kubectl
from tests.control_plane.server import ControlPlane, built, poll, source
from tests.ports import free_port

MODULE = "github.com/crossplane/crossplane/v2"
XRD = "workspacesandboxes.sandbox.cozystack.io"
NAMESPACE = "crossplane-system"
ACCOUNT = "crossplane"
ESTABLISHED_SECONDS = 60
AGGREGATED_SECONDS = 60
RBAC_MANAGER = "crossplane-rbac-manager"
WEBHOOK_CERTS = "crossplane-webhook"
XR_RULE = ("sandbox.cozystack.io", "workspacesandboxes")
CHART_SECRETS = {
    "POD_NAMESPACE": NAMESPACE,
    "POD_SERVICE_ACCOUNT": ACCOUNT,
    "TLS_CA_SECRET_NAME": "crossplane-root-ca",
    "TLS_CLIENT_SECRET_NAME": "crossplane-tls-client",
    "TLS_SERVER_SECRET_NAME": "crossplane-tls-server",
}
"""The chart's environment for the initializer (the Secrets it fills). Crossplane here speaks
to functions with a certificate from the plane's CA instead, which the function's server
certificate shares: the trust a cluster sets up with Crossplane's own CA."""
CHART_WEBHOOKS = {
    "WEBHOOK_SERVICE_NAME": "crossplane-webhooks",
    "WEBHOOK_SERVICE_NAMESPACE": NAMESPACE,
    "WEBHOOK_SERVICE_PORT": "9443",
}
CHART_TEMPLATES = (
    "serviceaccount.yaml",
    "clusterrole.yaml",
    "clusterrolebinding.yaml",
    "rbac-manager-allowed-provider-permissions.yaml",
)
CHART_VALUES = {
    ".Values.rbacManager.deploy": True,
    ".Values.serviceAccount.create": True,
    "not .Values.serviceAccount.create": False,
}
"""The chart's defaults, for the conditions the templates above ask."""


def chart(template: str) -> list[dict[str, object]]:
    """One of the chart's templates rendered with its defaults: the few Helm constructs these
    templates use, and a failure on any other, so a chart that grows one is noticed."""
    text = (
        source(MODULE) / "cluster" / "charts" / "crossplane" / "templates" / template
    ).read_text()
    text = text.replace('{{ template "crossplane.name" . }}', ACCOUNT)
    text = text.replace("{{ .Release.Namespace }}", NAMESPACE)
    text = re.sub(r"\n?\s*\{\{- include [^}]*\}\}", "", text)
    # Blocks of values the defaults leave empty (annotations, pull secrets).
    text = re.sub(r"\{\{- with [^}]*\}\}.*?\{\{-? end \}\}", "", text, flags=re.S)
    out, keep = [], [True]
    for piece in re.split(r"(\{\{-? (?:if [^}]*|else|end) ?\}\})", text):
        tag = re.fullmatch(r"\{\{-? (if (.*?)|else|end) ?\}\}", piece)
        if not tag:
            if all(keep):
                out.append(piece)
        elif tag.group(1) == "else":
            keep[-1] = not keep[-1]
        elif tag.group(1) == "end":
            keep.pop()
        else:
            keep.append(bool(CHART_VALUES[tag.group(2).strip()]))
    rendered = "".join(out)
    assert "{{" not in rendered, f"{template}: a Helm construct this renderer does not know"
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def install_identity(plane: ControlPlane) -> None:
    """The chart's ServiceAccount, ClusterRoles and binding for Crossplane."""
    docs = [doc for template in CHART_TEMPLATES for doc in chart(template)]
    manifests = plane.root / "crossplane-chart.yaml"
    manifests.write_text(yaml.safe_dump_all(docs))
    apply(plane, "-f", str(manifests))


def grant(plane: ControlPlane, *rules: tuple[str, str], bound: str = "") -> None:
    """Run Crossplane's RBAC manager (`crossplane rbac start`, as the administrator) until
    Crossplane's role has each (group, resource) of `rules` (the XRDs' kinds and the providers'
    that it grants) and, with `bound`, a provider's roles are bound to that ServiceAccount. It then stops: its metrics address is controller-runtime's default :8080,
    which no flag changes, and provider-kubernetes' is the same."""
    binary = built("crossplane") / "crossplane"
    plane.run(
        RBAC_MANAGER,
        [binary, "rbac", "start", f"--provider-clusterrole={ACCOUNT}:allowed-provider-permissions"],
        CHART_SECRETS,
    )
    try:
        for group, resource in rules:
            wait_aggregated(plane, group, resource)
        if bound:
            wait_bound(plane, bound)
    finally:
        plane.halt(RBAC_MANAGER)


def start_crossplane(
    plane: ControlPlane, *, runtime: str = "", webhooks: bool = False, args: Sequence[str] = ()
) -> None:
    """The chart's identity, `crossplane core init` (the chart's init container: the core CRDs, the package lock, the
    default runtime config and activation policy) and `crossplane core start` as Crossplane's
    account, with the package runtime `runtime` if given. What the RBAC manager grants is
    granted by `grant` once the kinds exist. With `webhooks`, Crossplane's webhook server and
    its Usage controllers run, and the API server reaches the webhook (`serve_webhooks`).
    `args` go to `core start` after the chart's (as the chart's `args` value adds them)."""
    install_identity(plane)
    binary = built("crossplane") / "crossplane"
    own = plane.account_kubeconfig(NAMESPACE, ACCOUNT)
    wait_aggregated(plane)
    certs = plane.certificates("crossplane-client", client=True)
    crds = source(MODULE) / "cluster" / "crds"
    enabled = f"--webhook-enabled={'true' if webhooks else 'false'}"
    init = subprocess.run(
        [str(binary), "core", "init", enabled, "--activation=*"],
        # Its flag for the CRDs' folder is spelled --cr-ds-path; the chart sets the variable.
        env={"KUBECONFIG": str(own), "CRDS_PATH": str(crds),
             "WEBHOOK_CONFIGS_PATH": str(source(MODULE) / "cluster" / "webhookconfigurations"),
             **CHART_SECRETS, **CHART_WEBHOOKS},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr[-3000:]
    # The package cache (the chart's emptyDir): without it every pull fails to parse, the cache's
    # write closing the pipe the parser reads.
    (plane.root / "xpkg").mkdir()
    metrics, health = free_port(), free_port()
    argv: list[object] = [
        binary, "core", "start", enabled, f"--namespace={NAMESPACE}",
        f"--cache-dir={plane.root / 'xpkg'}",
        f"--metrics-port={metrics}", f"--health-probe-port={health}",
    ]  # fmt: skip
    if runtime:
        argv.append(f"--package-runtime={runtime}")
    argv += args
    env = {"KUBECONFIG": str(own), "TLS_CLIENT_CERTS_DIR": str(certs), **CHART_SECRETS}
    if webhooks:
        port = serve_webhooks(plane)
        argv.append(f"--webhook-port={port}")
        env["TLS_SERVER_CERTS_DIR"] = str(plane.root / WEBHOOK_CERTS)
    plane.run("crossplane", argv, env)
    if webhooks:
        wait_serving(plane, port)


def serve_webhooks(plane: ControlPlane) -> int:
    """Where Crossplane's webhook will serve, and the API server sent there.

    `core init` writes Crossplane's ValidatingWebhookConfiguration (the Usages' guard against
    deleting what is in use) for the chart's Service, whose ClusterIP nothing routes here; the
    configuration is pointed at the process's loopback address instead, with a serving
    certificate from the plane's CA. The one change the tier makes to what Crossplane writes."""
    plane.certificates(WEBHOOK_CERTS)
    port = free_port()
    bundle = base64.b64encode(plane.ca.read_bytes()).decode()
    path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    status, listing = plane.request("GET", path)
    assert status == 200, listing
    ours = [c for c in listing["items"] if c["metadata"]["name"].startswith("crossplane")]
    assert ours, "core init wrote no webhook configuration"
    for config in ours:
        for hook in config["webhooks"]:
            where = hook["clientConfig"]["service"].get("path", "")
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{where}", "caBundle": bundle}
        status, answer = plane.request("PUT", f"{path}/{config['metadata']['name']}", config)
        assert status == 200, answer
    return port


def wait_serving(plane: ControlPlane, port: int) -> None:
    def serving() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    assert poll(serving, AGGREGATED_SECONDS), (
        f"Crossplane's webhook never served on {port}\n{plane.logs()}"
    )


def wait_aggregated(plane: ControlPlane, group: str = "", resource: str = "") -> None:
    """Crossplane's ClusterRole filled by the aggregation controller: with the chart's rules,
    or with a rule for `resource` in `group` (one the RBAC manager grants)."""
    path = f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{ACCOUNT}"

    def filled() -> bool:
        status, role = plane.request("GET", path)
        rules = (role.get("rules") or []) if status == 200 else []
        if not resource:
            return bool(rules)
        return any(
            group in r.get("apiGroups", []) and resource in r.get("resources", []) for r in rules
        )

    assert poll(filled, AGGREGATED_SECONDS), (
        f"Crossplane's ClusterRole lacks {group}/{resource}\n{plane.logs()}"
    )


def wait_bound(plane: ControlPlane, account: str) -> None:
    """A provider's roles bound by the RBAC manager to `account`."""
    subject = {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}

    def bound() -> bool:
        _, listing = plane.request("GET", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings")
        return any(
            b["metadata"]["name"].startswith("crossplane:provider:")
            and subject in (b.get("subjects") or [])
            for b in listing.get("items", [])
        )

    assert poll(bound, AGGREGATED_SECONDS), f"no provider roles bound to {account}\n{plane.logs()}"


def wait_xrd(plane: ControlPlane) -> None:
    """The XRD established: Crossplane serves WorkspaceSandbox as a CRD."""
    run = kubectl(
        plane, "wait", f"xrd/{XRD}", "--for=condition=Established",
        f"--timeout={ESTABLISHED_SECONDS}s", check=False,
    )  # fmt: skip
    assert run.returncode == 0, f"{run.stderr}\n{plane.logs()}"
