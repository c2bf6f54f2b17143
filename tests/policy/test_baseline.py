"""Cozystack's tenant baseline: valid Cilium objects, and what it allows on its own.

The semantic cases are the reason sandboxes need deny rules: the baseline alone lets a
sandbox reach the metadata service, private ranges, other pods of its tenant and cluster DNS,
and lets the whole cluster and the internet connect to it.
"""

from dataclasses import replace
from typing import Any

import pytest

from function.policy import Flow, Workload, cozystack_baseline, cozystack_environment, evaluate
from tests.schemas import validate

ENV = cozystack_environment()
BASELINE = cozystack_baseline("tenant-acme")


@pytest.mark.parametrize("namespace", ["tenant-root", "tenant-acme", "tenant-acme-dev"])
def test_the_baseline_is_valid_cilium_policy(namespace: str) -> None:
    for manifest in cozystack_baseline(namespace):
        assert validate(manifest) == [], manifest["metadata"]["name"]


def test_every_manifest_is_named_and_namespaced_policies_have_the_namespace() -> None:
    names = [m["metadata"]["name"] for m in BASELINE]
    assert names == [
        "allow-internal-communication",
        "allow-external-communication",
        "tenant-acme-egress",
        "tenant-acme-ingress",
        "allow-to-apiserver",
        "allow-to-dns",
        "allow-to-dashboard",
        "allow-to-linstor-gui",
        "allow-to-keycloak",
        "allow-to-grafana-dashboards",
        "allow-to-cdi-upload-proxy",
        "allow-to-ingress",
    ]
    for manifest in BASELINE:
        namespaced = manifest["kind"] == "CiliumNetworkPolicy"
        assert (manifest["metadata"].get("namespace") == "tenant-acme") is namespaced


def _rules(namespace: str, name: str, direction: str) -> list[dict[str, Any]]:
    (policy,) = [m for m in cozystack_baseline(namespace) if m["metadata"]["name"] == name]
    rules: list[dict[str, Any]] = policy["spec"][direction]
    return rules


@pytest.mark.parametrize(
    ("namespace", "parents"),
    [
        pytest.param("tenant-acme", ["tenant-root"], id="child-of-root-trusts-root"),
        pytest.param("tenant-acme-dev", ["tenant-acme"], id="grandchild-trusts-its-parent"),
        pytest.param("tenant-a-b-c", ["tenant-a", "tenant-a-b"], id="every-prefix-of-the-parent"),
    ],
)
def test_parents_come_from_the_release_namespace(namespace: str, parents: list[str]) -> None:
    ingress = _rules(namespace, f"{namespace}-ingress", "ingress")
    ns = "k8s:io.kubernetes.pod.namespace"
    assert [sel["matchLabels"][ns] for sel in ingress[-1]["fromEndpoints"]] == parents
    egress = _rules(namespace, f"{namespace}-egress", "egress")
    assert len(egress) == 5
    assert {sel["matchLabels"][ns] for rule in egress[1:] for sel in rule["toEndpoints"]} == set(
        parents
    )


def test_tenant_root_has_no_parent_rules() -> None:
    assert len(_rules("tenant-root", "tenant-root-egress", "egress")) == 1
    assert len(_rules("tenant-root", "tenant-root-ingress", "ingress")) == 3


def test_only_tenant_namespaces_have_a_baseline() -> None:
    with pytest.raises(ValueError, match="not a tenant namespace"):
        cozystack_baseline("cozy-system")


@pytest.mark.parametrize(
    ("flow", "allowed"),
    [
        pytest.param(Flow("alice-api", "169.254.169.254", 80), True, id="metadata-service"),
        pytest.param(Flow("alice-api", "10.0.0.5", 443), True, id="off-cluster-private-address"),
        pytest.param(Flow("alice-api", "100.64.0.3", 22), True, id="kube-ovn-join-address"),
        pytest.param(Flow("alice-api", "pypi.org", 443), True, id="public-internet"),
        pytest.param(Flow("alice-api", "10.96.0.10", 53, "UDP"), True, id="cluster-dns"),
        pytest.param(
            Flow("alice-api", "bob-frontend", 22), True, id="another-sandbox-of-the-tenant"
        ),
        pytest.param(Flow("alice-api", "postgres-acme", 5432), True, id="the-tenants-database"),
        pytest.param(Flow("alice-api", "root-ingress", 443), True, id="the-parent-tenants-ingress"),
        pytest.param(Flow("alice-api", "keycloak", 8443), True, id="platform-keycloak"),
        pytest.param(Flow("alice-api", "dashboard", 443), True, id="platform-dashboard"),
        pytest.param(Flow("alice-api", "platform-db", 5432), False, id="not-the-platform-database"),
        pytest.param(Flow("alice-api", "mallory-shell", 22), False, id="not-another-tenant"),
        pytest.param(Flow("alice-api", "192.168.100.11", 10250), False, id="not-its-node"),
        pytest.param(Flow("alice-api", "10.96.0.1", 443), False, id="not-the-apiserver"),
        pytest.param(Flow("world", "alice-api", 22), True, id="ingress-from-the-internet"),
        pytest.param(
            Flow("mallory-shell", "alice-api", 22), True, id="ingress-from-another-tenant"
        ),
        pytest.param(
            Flow("gateway-debug", "alice-api", 22), True, id="ingress-from-any-system-pod"
        ),
        pytest.param(
            Flow("192.168.100.12", "alice-api", 22), True, id="ingress-from-a-remote-node"
        ),
    ],
)
def test_what_the_baseline_alone_allows(flow: Flow, allowed: bool) -> None:
    verdict = evaluate(flow, BASELINE, ENV)
    assert verdict.allowed is allowed, verdict.reason


def test_the_apiserver_label_opens_port_6443_everywhere() -> None:
    # allow-to-apiserver's second rule has no peer: pods with the label reach 6443 on anything,
    # even where nothing else in the baseline lets them go.
    labels = {"policy.cozystack.io/allow-to-apiserver": "true"}
    insider = Workload("insider", "tenant-acme", labels, ("10.244.0.77",))
    env = replace(ENV, workloads=(*ENV.workloads, insider))
    verdict = evaluate(Flow("insider", "platform-db", 6443), BASELINE, env)
    assert verdict.allowed
    assert verdict.rule == "egress[1]"
    assert not evaluate(Flow("alice-api", "platform-db", 6443), BASELINE, env).allowed
