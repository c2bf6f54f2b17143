"""The Cilium policies Cozystack's tenant chart installs in every tenant namespace.

Modelled on cozystack/cozystack v1.6.2 `packages/apps/tenant/templates/networkpolicy.yaml`,
as plain manifests, so tests can evaluate a sandbox's own policy together with what the
namespace already allows. They are allow rules only: inside the namespace everything may talk,
pods may reach `world`, and the cluster may reach the pods. A sandbox's isolation therefore has
to be written as deny rules; allow rules of its own would add nothing.

Left out, because a tenant has them only when it runs its own ingress, etcd or monitoring: the
`<ns>-ingress-ingress`, `<ns>-ingress-etcd` and `<ns>-egress-virt-handler` policies.
"""

from typing import Any

from function.compose.cilium_policy import ccnp, cnp

NAMESPACE = "k8s:io.kubernetes.pod.namespace"
_ROOT = "tenant-root"


def _release_namespace(namespace: str) -> str:
    """The namespace the tenant's HelmRelease lives in: its parent tenant's namespace.

    The chart names a child tenant `<release namespace>-<name>`, except that children of
    tenant-root are `tenant-<name>`.
    """
    if namespace == _ROOT:
        return _ROOT
    parent = namespace.rpartition("-")[0]
    return _ROOT if parent == "tenant" else parent


def _parents(namespace: str) -> list[str]:
    # The chart loops over the dash-prefixes of the *release* namespace (the parent tenant's),
    # skipping the bare "tenant": tenant-acme -> [tenant-root]; tenant-acme-dev -> [tenant-acme].
    parts = _release_namespace(namespace).split("-")
    return ["-".join(parts[: i + 1]) for i in range(1, len(parts))]


def _to_namespace(namespace: str, name: str, target: str) -> dict[str, Any]:
    """Egress from every pod of the tenant to every pod of one platform namespace."""
    return cnp(
        name,
        {
            "endpointSelector": {},
            "egress": [{"toEndpoints": [{"matchLabels": {NAMESPACE: target}}]}],
        },
        namespace=namespace,
    )


def _egress(namespace: str) -> dict[str, Any]:
    rules: list[dict[str, Any]] = [
        {
            "toEndpoints": [
                {
                    "matchLabels": {
                        f"k8s:io.cilium.k8s.namespace.labels.tenant.cozystack.io/{namespace}": ""
                    }
                }
            ]
        }
    ]
    if namespace != _ROOT:
        parents = _parents(namespace)
        peers = (
            {"k8s:app.kubernetes.io/name": "vminsert"},
            {"k8s:app.kubernetes.io/name": "vlinsert"},
            {"k8s:app.kubernetes.io/instance": "etcd"},
            {"cozystack.io/service": "ingress"},
        )
        rules += [
            {"toEndpoints": [{"matchLabels": {**peer, NAMESPACE: p}} for p in parents]}
            for peer in peers
        ]
    selector = {"matchLabels": {NAMESPACE: namespace}}
    return ccnp(f"{namespace}-egress", {"endpointSelector": selector, "egress": rules})


def _ingress(namespace: str) -> dict[str, Any]:
    rules: list[dict[str, Any]] = [
        {"fromEntities": ["kube-apiserver"]},
        {
            "fromEndpoints": [
                {"matchLabels": {"k8s:io.cilium.k8s.namespace.labels.cozystack.io/system": "true"}}
            ]
        },
        {"fromEndpoints": [{"matchLabels": {NAMESPACE: "kube-system"}}]},
    ]
    if namespace != _ROOT:
        rules.append(
            {"fromEndpoints": [{"matchLabels": {NAMESPACE: p}} for p in _parents(namespace)]}
        )
    selector = {"matchLabels": {NAMESPACE: namespace}}
    return ccnp(f"{namespace}-ingress", {"endpointSelector": selector, "ingress": rules})


def cozystack_baseline(namespace: str) -> list[dict[str, Any]]:
    """The tenant chart's Cilium policies for tenant namespace `namespace`, in chart order."""
    if namespace != _ROOT and not namespace.startswith("tenant-"):
        raise ValueError(f"{namespace!r} is not a tenant namespace (tenant-<name>)")
    return [
        cnp(
            "allow-internal-communication",
            {
                "endpointSelector": {},
                "ingress": [{"fromEndpoints": [{}]}],
                "egress": [{"toEndpoints": [{}]}],
            },
            namespace=namespace,
        ),
        cnp(
            "allow-external-communication",
            {
                "endpointSelector": {},
                "ingress": [{"fromEntities": ["world", "cluster"]}],
                "egress": [{"toEntities": ["world"]}],
            },
            namespace=namespace,
        ),
        _egress(namespace),
        _ingress(namespace),
        cnp(
            "allow-to-apiserver",
            {
                "endpointSelector": {
                    "matchLabels": {"policy.cozystack.io/allow-to-apiserver": "true"}
                },
                "egress": [
                    {"toEntities": ["kube-apiserver"]},
                    # No L3 peer: port 6443 to ANY destination for pods with the label. This
                    # is why that label (and its prefix) must never reach a sandbox.
                    {"toPorts": [{"ports": [{"port": "6443", "protocol": "TCP"}]}]},
                ],
            },
            namespace=namespace,
        ),
        cnp(
            "allow-to-dns",
            {
                "endpointSelector": {},
                "egress": [
                    {
                        "toEndpoints": [
                            {"matchLabels": {NAMESPACE: "kube-system", "k8s-app": "kube-dns"}}
                        ]
                    }
                ],
            },
            namespace=namespace,
        ),
        _to_namespace(namespace, "allow-to-dashboard", "cozy-dashboard"),
        _to_namespace(namespace, "allow-to-linstor-gui", "cozy-linstor"),
        _to_namespace(namespace, "allow-to-keycloak", "cozy-keycloak"),
        _to_namespace(namespace, "allow-to-grafana-dashboards", "cozy-grafana-operator"),
        _to_namespace(namespace, "allow-to-cdi-upload-proxy", "cozy-kubevirt-cdi"),
        cnp(
            "allow-to-ingress",
            {
                "endpointSelector": {},
                "egress": [{"toEndpoints": [{"matchLabels": {"cozystack.io/service": "ingress"}}]}],
            },
            namespace=namespace,
        ),
    ]
