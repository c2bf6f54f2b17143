"""Named egress bundles: the platform curates them, a tenant allows one by name."""

from typing import Any

import pytest

from function.compose.network_policy import network_policies
from function.compose.workloads import kind_of
from function.errors import FieldError
from function.model.platform import SandboxPlatform
from tests.support import PLATFORM, platform, platform_input, workspace

PRESET = PLATFORM.presets["standard"]
SSH = kind_of(PRESET).serves_ssh
REGISTRIES: list[dict[str, Any]] = platform_input()["network"]["egressBundles"][
    "package-registries"
]


def network(**changes: Any) -> dict[str, Any]:
    return {**platform_input()["network"], **changes}


# A cluster whose namespaces don't already allow internet egress: names work there.
OPEN = platform(network=network(namespacesAllowInternet=False))
ADDRESSES = [{"cidr": "140.82.112.0/20", "ports": [22]}, {"cidr": "2a0a:a440::/29"}]
GIT = platform(
    network=network(egressBundles={"package-registries": REGISTRIES, "git-ssh": ADDRESSES})
)


def allowlist(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"network": {"egress": "Allowlist", "allow": list(entries)}}


def policies(spec: dict[str, Any], p: SandboxPlatform) -> dict[str, Any]:
    return network_policies(workspace(spec), PRESET, p, ssh=SSH)


def refusal(spec: dict[str, Any], p: SandboxPlatform = PLATFORM) -> str:
    with pytest.raises(FieldError) as err:
        policies(spec, p)
    return str(err.value)


def test_the_shipped_platform_offers_package_registries() -> None:
    names = {e.fqdn for e in PLATFORM.network.egress_bundles["package-registries"]}
    assert {"registry.npmjs.org", "pypi.org", "files.pythonhosted.org", "github.com"} <= names
    assert {"deb.debian.org", "archive.ubuntu.com", "security.ubuntu.com"} <= names


@pytest.mark.parametrize(
    ("bundled", "by_hand", "p"),
    [
        pytest.param(
            [{"bundle": "package-registries"}], REGISTRIES, OPEN, id="names-where-names-work"
        ),
        pytest.param(
            [{"cidr": "198.51.99.0/24"}, {"bundle": "package-registries"}],
            [{"cidr": "198.51.99.0/24"}, *REGISTRIES],
            OPEN,
            id="beside-the-tenants-own-entries",
        ),
        # With internet already allowed, addresses are enforced by denies: a bundle's too.
        pytest.param([{"bundle": "git-ssh"}], ADDRESSES, GIT, id="addresses-as-denies"),
    ],
)
def test_a_bundle_renders_as_its_entries_listed_by_hand(
    bundled: list[dict[str, Any]], by_hand: list[dict[str, Any]], p: SandboxPlatform
) -> None:
    assert policies(allowlist(*bundled), p) == policies(allowlist(*by_hand), p)


def test_a_bundle_of_names_is_refused_where_namespaces_allow_the_internet() -> None:
    assert refusal(allowlist({"cidr": "198.51.99.0/24"}, {"bundle": "package-registries"})) == (
        "spec.network.allow[1].bundle: bundle 'package-registries' holds names "
        "(registry.npmjs.org), and names can't be enforced on this platform: its namespaces "
        "already allow all internet egress, and Cilium can only take that away by address; "
        "use a preset that gives each sandbox a namespace of its own (dedicated-plane, "
        "isolated, isolated-kata, shared-plane)"
    )


def test_an_unknown_bundle_is_refused_with_the_names_on_offer() -> None:
    assert refusal(allowlist({"bundle": "rubygems"}), GIT) == (
        "spec.network.allow[0].bundle: 'rubygems' is not an egress bundle; "
        "use one of: git-ssh, package-registries"
    )
    none = platform(network=network(egressBundles={}))
    assert refusal(allowlist({"bundle": "rubygems"}), none) == (
        "spec.network.allow[0].bundle: 'rubygems' is not an egress bundle; "
        "this platform offers none"
    )


def test_a_tenant_entry_overlapping_a_bundle_is_refused_like_two_overlapping_entries() -> None:
    spec = allowlist({"bundle": "git-ssh"}, {"cidr": "140.82.121.0/24"})
    assert refusal(spec, GIT) == (
        "spec.network.allow[1].cidr: 140.82.121.0/24 overlaps allow[0] (140.82.112.0/20); "
        "merge them"
    )
    spec = allowlist({"cidr": "140.82.121.0/24"}, {"bundle": "git-ssh"})
    assert refusal(spec, GIT) == (
        "spec.network.allow[1].bundle: 140.82.112.0/20 overlaps allow[0] (140.82.121.0/24); "
        "merge them"
    )
