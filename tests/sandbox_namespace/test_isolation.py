"""Isolation proven on the host: a sandbox in a namespace of its own, with no tenant baseline.

Every row of the Namespace placement's truth tables is asked again with Alice and Bob in their
own namespaces; the host guard still selects them there; and names in an allow-list are
enforced, which the tenant's baseline would make impossible in its namespace.
"""

from functools import cache
from typing import Any

import pytest

from function.compose.names import EGRESS_LABEL, WORKSPACE_LABEL, new_identity, sandbox_namespace
from function.model import Manifest
from function.policy import Flow, evaluate, selects
from tests.policy.isolation import ALICE, ALICE_POD, POD_TABLE, TABLE
from tests.sandbox_namespace.environment import GUARD, host_environment, world
from tests.sandbox_namespace.world import HOME, ISOLATED, ISOLATED_KATA, TENANT_LABEL
from tests.support import NAMESPACE, workspace

LOCAL_CLUSTER = pytest.mark.parametrize(
    "local", [True, False], ids=["local-cluster-default", "no-local-cluster-default"]
)
BOB_HOME = sandbox_namespace(workspace(name="bob-frontend"))


def test_the_model_places_both_sandboxes_in_namespaces_of_their_own() -> None:
    for preset in (ISOLATED, ISOLATED_KATA):
        env = host_environment(preset)
        alice, bob = env.workload("alice-api"), env.workload("bob-frontend")
        assert (alice.namespace, bob.namespace) == (HOME, BOB_HOME)
        assert alice.labels[WORKSPACE_LABEL] == new_identity("alice-api")
        assert alice.labels[EGRESS_LABEL] == "Internet"
        assert env.namespace_labels_of(HOME)[TENANT_LABEL] == NAMESPACE
        assert env.namespace_labels_of(HOME)["pod-security.kubernetes.io/enforce"] == "restricted"
        namespaces = sorted(m["metadata"]["namespace"] for m in world(preset, {}, guard=False)[:4])
        assert namespaces == sorted([HOME, HOME, BOB_HOME, BOB_HOME])


@pytest.mark.parametrize("preset", [ISOLATED, ISOLATED_KATA])
def test_the_host_guard_selects_a_sandbox_in_its_own_namespace(preset: str) -> None:
    env = host_environment(preset)
    alice = env.workload("alice-api")
    assert selects(GUARD["spec"]["endpointSelector"], alice.labels)
    # And by itself, with none of the sandbox's own policies, it denies what it must.
    alone = [GUARD]
    for dest, port in (("10.0.0.5", 443), ("169.254.169.254", 80), ("10.244.1.22", 3000)):
        v = evaluate(Flow("alice-api", dest, port), alone, env)
        assert not v.allowed, (dest, v.reason)
        assert "CiliumClusterwideNetworkPolicy workspace-sandbox-guard" in v.reason
    v = evaluate(Flow("mallory-shell", "alice-api", 49983), alone, env)
    assert not v.allowed, v.reason


@LOCAL_CLUSTER
@pytest.mark.parametrize(("flow", "allowed"), TABLE)
def test_the_vm_truth_table_holds_in_its_own_namespace(
    flow: Flow, allowed: bool, local: bool
) -> None:
    v = evaluate(flow, _internet(ISOLATED), host_environment(ISOLATED, local))
    assert v.allowed is allowed, v.reason


@LOCAL_CLUSTER
@pytest.mark.parametrize(("flow", "allowed"), POD_TABLE)
def test_the_kata_truth_table_holds_in_its_own_namespace(
    flow: Flow, allowed: bool, local: bool
) -> None:
    v = evaluate(flow, _internet(ISOLATED_KATA), host_environment(ISOLATED_KATA, local))
    assert v.allowed is allowed, v.reason


WITHOUT_GUARD = [
    pytest.param(preset, *row.values, id=f"{preset}-{row.id}")
    for preset, table in ((ISOLATED, TABLE), (ISOLATED_KATA, POD_TABLE))
    for row in table
]


@pytest.mark.parametrize(("preset", "flow", "allowed"), WITHOUT_GUARD)
def test_the_truth_table_holds_without_the_guard(preset: str, flow: Flow, allowed: bool) -> None:
    # The guard only subtracts: the sandbox's own policies must isolate it by themselves.
    v = evaluate(flow, _internet(preset, guard=False), host_environment(preset))
    assert v.allowed is allowed, v.reason


def _internet(preset: str, *, guard: bool = True) -> list[Manifest]:
    return list(_policies(preset, "Internet", guard=guard))


NAMED = {
    "network": {
        "egress": "Allowlist",
        "allow": [
            {"fqdn": "pypi.org"},
            {"fqdn": "*.pythonhosted.org", "ports": [443]},
            {"fqdn": "rebind.example.net"},
            {"bundle": "package-registries"},
            {"cidr": "140.82.121.0/24", "ports": [22]},
        ],
    }
}


def from_alice(dest: str, port: int | None = 443, protocol: str = "TCP", **kw: Any) -> Flow:
    return Flow("alice-api", dest, port, protocol, **kw)  # type: ignore[arg-type]


def _named(dest: str, port: int = 443) -> Flow:
    return from_alice(dest, port, dns_resolver="9.9.9.9")


ALLOWLIST = [
    pytest.param(_named("pypi.org"), True, id="listed-name"),
    pytest.param(_named("pypi.org", 80), True, id="listed-name-without-ports-any-port"),
    pytest.param(_named("files.pythonhosted.org"), True, id="wildcard-name"),
    pytest.param(_named("files.pythonhosted.org", 80), False, id="wildcard-name-other-port"),
    pytest.param(_named("upload.pypi.org"), False, id="subdomain-of-exact-name"),
    pytest.param(_named("registry.npmjs.org"), True, id="bundle-name"),
    pytest.param(_named("github.com"), True, id="bundle-name-2"),
    pytest.param(_named("registry.npmjs.org", 80), False, id="bundle-name-port-it-lacks"),
    pytest.param(_named("github.com", 22), True, id="name-inside-a-listed-cidr-on-its-port"),
    pytest.param(_named("github.com", 8443), False, id="name-on-neither-entrys-port"),
    pytest.param(_named("objects.githubusercontent.com"), True, id="bundle-name-3"),
    pytest.param(_named("rebind.example.net"), False, id="listed-name-resolving-private"),
    pytest.param(from_alice("151.101.0.223"), True, id="address-of-listed-name"),
    pytest.param(from_alice("2a04:4e42::223"), True, id="v6-address-of-listed-name"),
    pytest.param(from_alice("93.184.215.14"), False, id="address-no-entry-lists"),
    pytest.param(from_alice("140.82.121.4", 22), True, id="listed-cidr-listed-port"),
    pytest.param(from_alice("140.82.121.5", 443), False, id="listed-cidr-other-port"),
    # github.com resolves into the listed CIDR, and the bundle lists it on 443.
    pytest.param(from_alice("140.82.121.4", 443), True, id="listed-cidr-name-port"),
    pytest.param(from_alice("1.1.1.1"), False, id="unlisted-public"),
    pytest.param(from_alice("2001:4860:4860::8888"), False, id="unlisted-v6"),
    pytest.param(from_alice("9.9.9.9", 53, "UDP", dns_name="pypi.org"), True, id="dns-listed"),
    pytest.param(
        from_alice("9.9.9.9", 53, "UDP", dns_name="github.com"), True, id="dns-bundle-name"
    ),
    pytest.param(
        from_alice("9.9.9.9", 53, "UDP", dns_name="upload.pypi.org"),
        False,
        id="dns-unlisted-refused",
    ),
    pytest.param(
        from_alice("1.1.1.1", 53, "UDP", dns_name="pypi.org"), False, id="dns-other-resolver"
    ),
    pytest.param(from_alice("10.96.0.10", 53, "UDP"), False, id="cluster-dns"),
    pytest.param(from_alice("10.0.0.5"), False, id="private"),
    pytest.param(from_alice("169.254.169.254", 80), False, id="metadata"),
    pytest.param(from_alice("192.168.100.12", 22), False, id="node"),
    pytest.param(from_alice("10.96.0.1"), False, id="apiserver"),
    pytest.param(from_alice("10.244.1.22", 3000), False, id="other-sandbox"),
    pytest.param(from_alice("64:ff9b::a00:5"), False, id="nat64-private"),
    pytest.param(Flow("sandbox-gateway", "alice-api", 49983), True, id="gateway-reaches-agent"),
    pytest.param(Flow("mallory-shell", "alice-api", 49983), False, id="other-tenant-ingress"),
]


@cache
def _policies(preset: str, egress: str, *, guard: bool = True) -> tuple[Manifest, ...]:
    alice = ALICE if preset == ISOLATED else ALICE_POD
    return tuple(world(preset, alice | (NAMED if egress == "Allowlist" else {}), guard=guard))


@LOCAL_CLUSTER
@pytest.mark.parametrize("preset", [ISOLATED, ISOLATED_KATA])
@pytest.mark.parametrize(("flow", "allowed"), ALLOWLIST)
def test_names_in_an_allowlist_are_enforced_in_its_own_namespace(
    flow: Flow, allowed: bool, preset: str, local: bool
) -> None:
    env = host_environment(preset, local, "Allowlist")
    v = evaluate(flow, _policies(preset, "Allowlist"), env)
    assert v.allowed is allowed, v.reason
