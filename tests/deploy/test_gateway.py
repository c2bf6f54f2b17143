"""The gateway's install in deploy/gateway/: schemas, the kustomization, RBAC against the code."""

import ast
import copy
import importlib
import inspect
import os
import pkgutil
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes.client.api
import pytest
import yaml
from workspace_gateway.kubernetes import cluster

from tests.deploy.install import identity, kustomize, needs_kubectl
from tests.render.pod_security import restricted_violations
from tests.schemas import validate
from tests.support import PLATFORM, ROOT, load_stream

DEPLOY = ROOT / "deploy" / "gateway"
KUSTOMIZATION = DEPLOY / "kustomization.yaml"
MANIFESTS = sorted(p for p in DEPLOY.glob("*.yaml") if p != KUSTOMIZATION)
GATEWAY_CODE = ROOT / "gateway" / "workspace_gateway"
ARGOCD = ROOT / "deploy" / "argocd"
# The SDK pings every 50 s on a quiet stream; anything that cuts an idle stream must wait longer.
SDK_KEEPALIVE_SECONDS = 50
REAPER_LEASE = "workspace-sandbox-gateway-reaper"
POOL_LIMITS = "sandbox-gateway-pools"


@cache
def documents() -> tuple[dict[str, Any], ...]:
    return tuple(doc for path in MANIFESTS for doc in load_stream(path))


def find(kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = (d for d in documents() if d["kind"] == kind and name in (None, d["metadata"]["name"]))
    return doc


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = find("Deployment", "sandbox-gateway")["spec"]["template"]["spec"]
    return spec


def container() -> dict[str, Any]:
    (only,) = pod_spec()["containers"]
    return dict(only)


def flag(name: str) -> str:
    args = container()["args"]
    assert args.count(name) == 1, f"{name} given {args.count(name)} times"
    return str(args[args.index(name) + 1])


# --------------------------------------------------------------------------- schemas and build


@pytest.mark.parametrize("doc", documents(), ids=lambda d: "/".join(identity(d)[1:]))
def test_every_object_validates_against_its_upstream_schema(doc: dict[str, Any]) -> None:
    assert validate(doc) == []


@pytest.mark.parametrize(
    ("kind", "path", "value", "want"),
    [
        pytest.param(
            "Deployment",
            ("spec", "template", "spec", "containers", 0, "securityContext", "privileged"),
            "no",
            "spec.template.spec.containers[0].securityContext.privileged: 'no' is not of type 'boolean'",
            id="deployment-built-in-schema",
        ),
        pytest.param(
            "Ingress",
            ("spec", "rules", 0, "http", "paths", 0, "pathType"),
            None,
            "spec.rules[0].http.paths[0]: 'pathType' is a required property",
            id="ingress-built-in-schema",
        ),
        pytest.param(
            "Certificate",
            ("spec", "secretTemplate"),
            "tls",
            "spec.secretTemplate: 'tls' is not of type 'object'",
            id="certificate-crd",
        ),
        pytest.param(
            "Issuer",
            ("spec", "acme", "solvers", 0, "dns01", "cloudflare", "apiTokenSecretRef", "name"),
            None,
            "spec.acme.solvers[0].dns01.cloudflare.apiTokenSecretRef: 'name' is a required property",
            id="issuer-crd",
        ),
        pytest.param(
            "CiliumNetworkPolicy",
            ("spec", "egress", 0, "toPorts", 0, "ports", 0, "protocol"),
            "HTTP",
            "spec.egress[0].toPorts[0].ports[0].protocol: 'HTTP' is not one of",
            id="cilium-crd",
        ),
    ],
)
def test_the_schemas_refuse_a_broken_object(
    kind: str, path: tuple[str | int, ...], value: Any, want: str
) -> None:
    """The validation above can fail: one wrong field in each family of schema is caught."""
    doc = copy.deepcopy(find(kind))
    parent: Any = doc
    for step in path[:-1]:
        parent = parent[step]
    if value is None:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    errors = validate(doc)
    assert any(e.startswith(want) for e in errors), errors


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    assert sorted(listed) == [p.name for p in MANIFESTS]


@needs_kubectl
def test_kustomization_builds_to_the_manifests() -> None:
    _, built = kustomize(DEPLOY)
    assert sorted(built, key=identity) == sorted(documents(), key=identity)


def test_every_namespaced_object_is_in_the_gateway_namespace() -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    namespaces = {
        d["kind"]: d["metadata"].get("namespace")
        for d in documents()
        if d["kind"] not in cluster_scoped
    }
    assert set(namespaces.values()) == {PLATFORM.gateway.namespace}
    assert find("Namespace")["metadata"]["name"] == PLATFORM.gateway.namespace
    # Off-cluster, `keys` and `--kubernetes` default to the install's namespace too.
    assert cluster.DEFAULT_NAMESPACE == PLATFORM.gateway.namespace


# --------------------------------------------------------------------------- the pods


def test_pods_carry_what_the_sandboxes_let_in() -> None:
    """Sandboxes admit only pods in SandboxPlatform gateway's namespace with its labels."""
    deployment = find("Deployment", "sandbox-gateway")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert PLATFORM.gateway.pod_labels.items() <= labels.items()
    assert deployment["metadata"]["namespace"] == PLATFORM.gateway.namespace
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert flag("--agent-port") == str(PLATFORM.gateway.agent_port)


def test_two_replicas_on_different_nodes_and_a_disruption_budget() -> None:
    deployment = find("Deployment", "sandbox-gateway")
    assert deployment["spec"]["replicas"] == 2
    selector = deployment["spec"]["selector"]
    by_node = [
        c
        for c in pod_spec()["topologySpreadConstraints"]
        if c["topologyKey"] == "kubernetes.io/hostname"
    ]
    assert by_node == [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": selector,
        }
    ]
    pdb = find("PodDisruptionBudget", "sandbox-gateway")
    assert pdb["spec"] == {"minAvailable": 1, "selector": selector}
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_pod_security_restricted_holds() -> None:
    assert restricted_violations(pod_spec()) == []
    labels = find("Namespace")["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"


@pytest.mark.parametrize(
    ("change", "control"),
    [
        ({"allowPrivilegeEscalation": True}, "Privilege Escalation"),
        ({"capabilities": {"drop": ["NET_RAW"]}}, "Capabilities"),
        ({"runAsNonRoot": False}, "Running as Non-root"),
        ({"runAsUser": 0}, "Running as Non-root user"),
        ({"seccompProfile": {"type": "Unconfined"}}, "Seccomp"),
    ],
)
def test_the_pod_security_check_catches_a_weakened_container(
    change: dict[str, Any], control: str
) -> None:
    spec = copy.deepcopy(pod_spec())
    spec["containers"][0]["securityContext"] |= change
    assert any(v.startswith(control) for v in restricted_violations(spec))


def test_container_is_locked_down_beyond_restricted() -> None:
    """What restricted allows but the gateway doesn't need: a writable root, root's uid."""
    context = container()["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    # Numeric, or the kubelet can't check runAsNonRoot against an image's user name.
    assert pod_spec()["securityContext"]["runAsUser"] > 0
    assert container()["image"].startswith("ghcr.io/cozystack/workspace-sandbox-gateway:v")
    # Ready by the one route without a key (tests/gateway/test_control.py); alive by its socket.
    assert container()["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container()["livenessProbe"]["tcpSocket"] == {"port": "http"}
    env = {e["name"]: e for e in container()["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    resources = container()["resources"]
    assert {"cpu", "memory"} <= resources["requests"].keys()
    assert "memory" in resources["limits"]


def test_the_flags_are_the_gateways_and_point_at_mounted_files() -> None:
    """Parsed by the gateway's own parser: a renamed flag fails here, not at rollout."""
    from workspace_gateway.main import parser  # noqa: PLC0415

    args = parser().parse_args(container()["args"])
    assert args.kubernetes
    assert not args.local
    mounts = {m["name"]: Path(m["mountPath"]) for m in container()["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    assert args.templates.parent == mounts["templates"]
    assert volumes["templates"]["configMap"]["name"] == find("ConfigMap")["metadata"]["name"]
    assert args.templates.name in find("ConfigMap")["data"]
    seed = volumes["token-seed"]["secret"]
    assert args.token_seed_file == mounts["token-seed"] / seed["items"][0]["path"]
    assert seed["secretName"] == "sandbox-gateway-token-seed"
    assert pod_spec()["serviceAccountName"] == find("ServiceAccount")["metadata"]["name"]


def test_the_shipped_templates_load(tmp_path: Path) -> None:
    from workspace_gateway.kubernetes import templates  # noqa: PLC0415

    (name,) = find("ConfigMap")["data"]
    path = tmp_path / name
    path.write_text(find("ConfigMap")["data"][name])
    shipped = templates.load(path)
    assert {"base", "isolated"} <= set(shipped)
    # Each names what the shipped SandboxPlatform offers.
    for template in shipped.values():
        assert template.image in PLATFORM.images
        assert template.preset is None or template.preset in PLATFORM.presets
    assert shipped["isolated"].preset == "isolated-kata"
    # The code interpreter runs in the reference pod image, never on a VM's agent disk.
    interpreter = shipped["code-interpreter-v1"]
    assert interpreter.interpreter
    assert PLATFORM.presets[interpreter.preset or ""].runtime in {"gvisor", "kata"}
    assert PLATFORM.presets["isolated-kata"].placement == "SandboxNamespace"


def test_ports_agree() -> None:
    """Service targetPort = container port = --address port = the policy's ingress port."""
    port, metrics = container()["ports"]
    assert (port["name"], metrics["name"]) == ("http", "metrics")
    (service_port,) = find("Service")["spec"]["ports"]  # the metrics port is not a Service's
    assert service_port["targetPort"] == port["containerPort"]
    assert flag("--address").rpartition(":")[2] == str(port["containerPort"])
    assert flag("--metrics-address").rpartition(":")[2] == str(metrics["containerPort"])
    public, scraping = find("CiliumNetworkPolicy")["spec"]["ingress"]
    assert public["toPorts"] == [
        {"ports": [{"port": str(port["containerPort"]), "protocol": "TCP"}]}
    ]
    assert scraping["toPorts"] == [
        {"ports": [{"port": str(metrics["containerPort"]), "protocol": "TCP"}]}
    ]
    assert (
        find("Service")["spec"]["selector"] == find("Deployment")["spec"]["selector"]["matchLabels"]
    )
    backends = [
        path["backend"]["service"]
        for rule in find("Ingress")["spec"]["rules"]
        for path in rule["http"]["paths"]
    ]
    assert backends == [{"name": "sandbox-gateway", "port": {"name": service_port["name"]}}] * 2


# --------------------------------------------------------------------------- network policy


def test_the_policy_selects_the_gateway_pods() -> None:
    policy = find("CiliumNetworkPolicy")
    assert policy["spec"]["endpointSelector"] == {"matchLabels": PLATFORM.gateway.pod_labels}


def test_only_the_ingress_controller_comes_in_and_monitoring_only_for_metrics() -> None:
    rule, scraping = find("CiliumNetworkPolicy")["spec"]["ingress"]
    assert rule.keys() == scraping.keys() == {"fromEndpoints", "toPorts"}
    assert scraping["fromEndpoints"] == [
        {"matchLabels": {"io.kubernetes.pod.namespace": "cozy-monitoring"}}
    ]
    assert scraping["toPorts"][0]["ports"] == [{"port": "9090", "protocol": "TCP"}]
    (peer,) = rule["fromEndpoints"]
    assert peer == {
        "matchLabels": {
            "io.kubernetes.pod.namespace": "tenant-root",
            "app.kubernetes.io/name": "ingress-nginx",
            "app.kubernetes.io/component": "controller",
        }
    }


def test_out_only_to_agents_the_api_server_and_dns() -> None:
    agents, api_server, dns = find("CiliumNetworkPolicy")["spec"]["egress"]
    assert agents == {
        "toEndpoints": [
            {
                "matchExpressions": [
                    {"key": "io.kubernetes.pod.namespace", "operator": "Exists"},
                    {"key": "sandbox.cozystack.io/workspace", "operator": "Exists"},
                ]
            }
        ],
        # The agent's port and the previews': each sandbox's own ingress says which answer.
        "toPorts": [{"ports": [{"port": "1", "endPort": 65535, "protocol": "TCP"}]}],
    }
    assert api_server == {"toEntities": ["kube-apiserver"]}
    assert dns == {
        "toEndpoints": [
            {"matchLabels": {"io.kubernetes.pod.namespace": "kube-system", "k8s-app": "kube-dns"}}
        ],
        "toPorts": [
            {"ports": [{"port": "53", "protocol": "UDP"}, {"port": "53", "protocol": "TCP"}]}
        ],
    }
    assert "egressDeny" not in find("CiliumNetworkPolicy")["spec"]


def test_sandboxes_carry_the_label_the_policy_reaches() -> None:
    """The egress rule finds agents by the label every sandbox's guard selects them by."""
    guard = next(load_stream(ROOT / "deploy" / "cilium-guard.yaml").__iter__())
    selector = guard["spec"]["endpointSelector"]["matchExpressions"]
    assert {"key": "sandbox.cozystack.io/workspace", "operator": "Exists"} in selector


# --------------------------------------------------------------------------- TLS and routing


def test_ingress_and_certificate_serve_the_gateways_domain() -> None:
    domain = flag("--domain")
    names = [f"*.{domain}", f"api.{domain}"]
    ingress = find("Ingress")["spec"]
    certificate = find("Certificate")["spec"]
    assert certificate["dnsNames"] == names
    assert ingress["tls"] == [{"hosts": names, "secretName": certificate["secretName"]}]
    assert sorted(rule["host"] for rule in ingress["rules"]) == sorted(names)
    issuer = find("Issuer")
    assert certificate["issuerRef"] == {
        "group": "cert-manager.io",
        "kind": "Issuer",
        "name": issuer["metadata"]["name"],
    }


def test_the_issuer_proves_the_wildcard_over_dns01() -> None:
    """ACME grants a wildcard name only to a DNS-01 challenge."""
    acme = find("Issuer")["spec"]["acme"]
    assert acme["server"] == "https://acme-v02.api.letsencrypt.org/directory"
    assert all(solver.keys() == {"dns01"} for solver in acme["solvers"])


def test_ingress_neither_buffers_nor_cuts_streams() -> None:
    notes = find("Ingress")["metadata"]["annotations"]
    prefix = "nginx.ingress.kubernetes.io/"
    assert notes[prefix + "proxy-buffering"] == "off"
    assert notes[prefix + "proxy-request-buffering"] == "off"
    assert notes[prefix + "proxy-body-size"] == "0"
    for timeout in ("proxy-read-timeout", "proxy-send-timeout"):
        assert int(notes[prefix + timeout]) > 10 * SDK_KEEPALIVE_SECONDS


# --------------------------------------------------------------------------- RBAC against the code

Grant = tuple[str, str, str]  # (API group, resource, verb)

# Every typed client method the gateway may call, as the request RBAC sees. A new method fails
# test_every_client_call_is_known until it is added here, and to deploy/gateway/rbac.yaml if
# the gateway itself makes it.
TYPED: dict[str, Grant] = {
    "list_namespaced_secret": ("", "secrets", "list"),
    "read_namespaced_secret": ("", "secrets", "get"),
    "create_namespaced_secret": ("", "secrets", "create"),
    "delete_namespaced_secret": ("", "secrets", "delete"),
    "create_namespaced_lease": ("coordination.k8s.io", "leases", "create"),
    "read_namespaced_lease": ("coordination.k8s.io", "leases", "get"),
    "replace_namespaced_lease": ("coordination.k8s.io", "leases", "update"),
    "patch_namespaced_lease": ("coordination.k8s.io", "leases", "patch"),
    "create_token_review": ("authentication.k8s.io", "tokenreviews", "create"),
    "create_subject_access_review": ("authorization.k8s.io", "subjectaccessreviews", "create"),
    "read_namespaced_config_map": ("", "configmaps", "get"),
}
CUSTOM_VERBS = {
    "get": "get",
    "list": "list",
    "create": "create",
    "patch": "patch",
    "replace": "update",
    "delete": "delete",
}
# The key CLI's own calls, made with the operator's credentials: never the gateway's.
OPERATOR_FUNCTIONS = {"SecretKeys.create", "SecretKeys.revoke"}


@cache
def client_methods() -> frozenset[str]:
    """Every request method of the official client's API classes (imported lazily upstream)."""
    names: set[str] = set()
    for info in pkgutil.iter_modules(kubernetes.client.api.__path__):
        module = importlib.import_module(f"{kubernetes.client.api.__name__}.{info.name}")
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == module.__name__:
                # Each request method has a twin returning the HTTP details too.
                suffix = "_with_http_info"
                names |= {n.removesuffix(suffix) for n in vars(cls) if n.endswith(suffix)}
    return frozenset(names)


@dataclass(frozen=True)
class Call:
    module: str
    function: str
    method: str
    arguments: tuple[ast.expr, ...]
    keywords: frozenset[str]
    via_watch: bool

    @property
    def where(self) -> str:
        return f"{self.module}:{self.function}: {self.method}"


def constants() -> dict[str, str]:
    """Every module-level string constant of the gateway, for resolving call arguments."""
    out: dict[str, str] = {}
    for path in sorted(GATEWAY_CODE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                out |= {t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)}
    return out


def client_calls() -> Iterator[Call]:
    """Each reference to a client method in the gateway's code, called or handed on."""
    for path in sorted(GATEWAY_CODE.rglob("*.py")):
        yield from _calls_in(path.stem, ast.parse(path.read_text()), "<module>", None)


def _calls_in(module: str, node: ast.AST, scope: str, parent: ast.AST | None) -> Iterator[Call]:
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        scope = node.name if scope == "<module>" else f"{scope}.{node.name}"
    if isinstance(node, ast.Attribute) and node.attr in client_methods():
        yield _call(module, scope, node, parent)
    for child in ast.iter_child_nodes(node):
        yield from _calls_in(module, child, scope, node)


def _call(module: str, function: str, node: ast.Attribute, parent: ast.AST | None) -> Call:
    if isinstance(parent, ast.Call) and parent.func is node:
        args, keywords, watch = parent.args, parent.keywords, False
    elif isinstance(parent, ast.Call) and node in parent.args:
        # Handed to asyncio.to_thread(fn, *args) or Watch().stream(fn, *args).
        args = parent.args[parent.args.index(node) + 1 :]
        keywords = parent.keywords
        watch = isinstance(parent.func, ast.Attribute) and parent.func.attr == "stream"
    else:
        pytest.fail(f"{module}:{function}: {node.attr} is referenced where its use can't be read")
    names = frozenset(k.arg for k in keywords if k.arg)
    watch = watch or any(
        k.arg == "watch" and isinstance(k.value, ast.Constant) and k.value.value for k in keywords
    )
    return Call(module, function, node.attr, tuple(args), names, watch)


def needed(call: Call) -> Grant:
    """The grant a call needs; a method this test doesn't know fails, naming itself."""
    if call.method.endswith("_custom_object"):
        verb, scope = call.method.split("_")[:2]
        plural_at = 3 if scope == "namespaced" else 2
        table = constants()
        group, plural = (
            table.get(a.id, "?") if isinstance(a, ast.Name) else "?"
            for a in (call.arguments[0], call.arguments[plural_at])
        )
        return group, plural, "watch" if call.via_watch else CUSTOM_VERBS[verb]
    if call.method not in TYPED:
        pytest.fail(f"{call.where}: unknown to this test; add it to TYPED and to rbac.yaml")
    group, resource, verb = TYPED[call.method]
    return group, resource, "watch" if call.via_watch else verb


def granted() -> dict[Grant, set[str] | None]:
    """Each grant of the gateway's roles, with the names it is limited to (None: any)."""
    out: dict[Grant, set[str] | None] = {}
    for kind, binding in (("ClusterRole", "ClusterRoleBinding"), ("Role", "RoleBinding")):
        role = find(kind)
        bound = find(binding)
        assert bound["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": kind,
            "name": role["metadata"]["name"],
        }
        assert bound["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": "sandbox-gateway",
                "namespace": PLATFORM.gateway.namespace,
            }
        ]
        for rule in role["rules"]:
            names = set(rule["resourceNames"]) if "resourceNames" in rule else None
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert (group, resource, verb) not in out, "granted twice"
                        out[group, resource, verb] = names
    return out


def gateway_needs() -> set[Grant]:
    return {needed(c) for c in client_calls() if c.function not in OPERATOR_FUNCTIONS}


def test_every_client_call_is_known() -> None:
    calls = list(client_calls())
    # The scan sees the calls there are today: sandboxes, and the key Secrets.
    assert {c.method for c in calls} >= {
        "list_namespaced_secret",
        "create_namespaced_custom_object",
        "list_cluster_custom_object",
        "patch_namespaced_custom_object",
        "delete_namespaced_custom_object",
    }
    for call in calls:
        group, resource, _ = needed(call)
        assert "?" not in (group, resource), f"{call.where}: group or plural not a constant"


def test_the_gateway_may_make_every_call_it_makes() -> None:
    grants = granted()
    missing = gateway_needs() - grants.keys()
    assert missing == set(), "the gateway calls these without a grant in rbac.yaml"


def test_the_gateway_holds_nothing_it_does_not_use() -> None:
    """Its calls, and watch, which its list-then-watch of sandboxes needs; nothing more."""
    ahead = {("sandbox.cozystack.io", "workspacesandboxes", "watch")}
    assert granted().keys() - gateway_needs() == ahead


def test_the_gateway_cannot_mint_or_revoke_keys() -> None:
    grants = granted()
    operator = {needed(c) for c in client_calls() if c.function in OPERATOR_FUNCTIONS}
    assert operator == {("", "secrets", "create"), ("", "secrets", "delete")}
    assert operator.isdisjoint(grants)
    assert not {g for g in grants if g[1] == "secrets" and g[2] not in {"get", "list", "watch"}}


def test_only_the_key_cli_calls_the_operators_functions() -> None:
    """Outside keys_cli.py (and secret_keys.py) every create or revoke is the backend's, not the keys'."""
    for path in sorted(GATEWAY_CODE.rglob("*.py")):
        if path.name in {"keys_cli.py", "secret_keys.py"}:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"create", "revoke"}
            ):
                assert ast.unparse(node.func.value) in {"self.backend", "backend"}, (
                    f"{path.name}: {ast.unparse(node)}"
                )


def test_the_lease_is_reachable_only_by_its_name() -> None:
    grants = granted()
    assert grants["coordination.k8s.io", "leases", "get"] == {REAPER_LEASE}
    assert grants["coordination.k8s.io", "leases", "update"] == {REAPER_LEASE}
    # RBAC can't limit create by name: the object has none before it exists.
    assert grants["coordination.k8s.io", "leases", "create"] is None
    lease_calls = [c for c in client_calls() if "lease" in c.method]
    if lease_calls:
        assert REAPER_LEASE in constants().values()


def test_of_tenants_configmaps_only_the_pool_limits_are_readable() -> None:
    """A tenant's other ConfigMaps are none of the gateway's business."""
    grants = granted()
    assert grants["", "configmaps", "get"] == {POOL_LIMITS}
    assert not {g for g in grants if g[1] == "configmaps" and g[2] != "get"}
    assert POOL_LIMITS in constants().values()


def test_no_wildcards_and_the_account_talks_to_the_api_server() -> None:
    for kind in ("ClusterRole", "Role"):
        for rule in find(kind)["rules"]:
            assert "*" not in "".join([*rule["apiGroups"], *rule["resources"], *rule["verbs"]])
    assert find("ServiceAccount")["automountServiceAccountToken"] is True


def test_the_scan_catches_an_ungranted_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call added without a grant fails test_the_gateway_may_make_every_call_it_makes."""
    copied = tmp_path / "workspace_gateway"
    shutil.copytree(GATEWAY_CODE, copied)
    with (copied / "keys.py").open("a") as f:
        f.write("\n\ndef forget(core):\n    core.delete_collection_namespaced_secret('ns')\n")
    with (copied / "kubernetes" / "cluster.py").open("a") as f:
        f.write("\n\ndef peek(core):\n    core.read_namespaced_secret('x', 'ns')\n")
    monkeypatch.setattr(f"{__name__}.GATEWAY_CODE", copied)
    with pytest.raises(pytest.fail.Exception, match="delete_collection_namespaced_secret"):
        gateway_needs()
    shutil.copy(ROOT / "gateway" / "workspace_gateway" / "keys.py", copied / "keys.py")
    assert ("", "secrets", "get") in gateway_needs()
    assert gateway_needs() - granted().keys() == {("", "secrets", "get")}  # only list is granted
    shutil.copy(
        ROOT / "gateway" / "workspace_gateway" / "kubernetes" / "cluster.py",
        copied / "kubernetes" / "cluster.py",
    )
    with (copied / "kubernetes" / "cluster.py").open("a") as f:
        f.write("\n\ndef tamper(core):\n    core.replace_namespaced_lease('x', 'ns', {})\n")
    # update is granted only by name: the scan itself sees the grant, and the name test the name.
    assert ("coordination.k8s.io", "leases", "update") in gateway_needs()
    with (copied / "kubernetes" / "cluster.py").open("a") as f:
        f.write("\n\ndef grab(core):\n    core.patch_namespaced_lease('x', 'ns', {})\n")
    assert gateway_needs() - granted().keys() == {("coordination.k8s.io", "leases", "patch")}


# --------------------------------------------------------------------------- Argo CD and docs


def test_argo_cd_installs_the_gateway_folder_like_the_platform() -> None:
    platform = yaml.safe_load((ARGOCD / "application.yaml").read_text())
    gateway = yaml.safe_load((ARGOCD / "application-gateway.yaml").read_text())
    assert gateway["kind"] == "Application"
    assert gateway["spec"]["source"] == {**platform["spec"]["source"], "path": "deploy/gateway"}
    assert gateway["spec"]["destination"] == platform["spec"]["destination"]
    assert gateway["spec"]["syncPolicy"]["automated"] == platform["spec"]["syncPolicy"]["automated"]
    assert (DEPLOY / "README.md").is_file()
    assert re.search(r"\(deploy/gateway/README\.md\)", (ROOT / "README.md").read_text())


@needs_kubectl
def test_the_readmes_overlay_moves_every_name_to_the_new_domain(tmp_path: Path) -> None:
    """The overlay README.md shows builds, and leaves no trace of the example domain."""
    readme = (DEPLOY / "README.md").read_text()
    (block,) = re.findall(r"```yaml\n(# overlays/prod/kustomization.yaml\n.*?)```", readme, re.S)
    overlay = yaml.safe_load(block)
    # kustomize takes a base outside the overlay only as a relative path.
    overlay["resources"] = [os.path.relpath(DEPLOY, tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    out, built = kustomize(tmp_path)
    assert "sandbox.example.com" not in out
    assert "platform@example.com" not in out
    (deployment,) = (d for d in built if d["kind"] == "Deployment")
    (gateway,) = deployment["spec"]["template"]["spec"]["containers"]
    args = gateway["args"]
    assert args[args.index("--domain") + 1] == "sbx.acme.example"
    assert gateway["image"] == "registry.example.org/platform/workspace-sandbox-gateway:v0.1.0"
    (ingress,) = (d for d in built if d["kind"] == "Ingress")
    assert {r["host"] for r in ingress["spec"]["rules"]} == {
        "api.sbx.acme.example",
        "*.sbx.acme.example",
    }
    assert all(validate(d) == [] for d in built)


def test_the_image_runs_the_gateway_as_the_pods_user() -> None:
    """gateway/Dockerfile builds what the Deployment runs: its user, port and entry point."""
    dockerfile = (ROOT / "gateway" / "Dockerfile").read_text()
    (user,) = re.findall(r"^USER (\d+):(\d+)$", dockerfile, re.M)
    security = pod_spec()["securityContext"]
    assert (int(user[0]), int(user[1])) == (security["runAsUser"], security["runAsGroup"])
    assert re.search(r"^EXPOSE (\d+)$", dockerfile, re.M)[1] == str(  # type: ignore[index]
        container()["ports"][0]["containerPort"]
    )
    (entry,) = re.findall(r'^ENTRYPOINT \["([^"]+)"\]$', dockerfile, re.M)
    assert Path(entry).name == "workspace-sandbox-gateway"
    assert "command" not in container()
