"""The XRD's rules on single values: what the API server says to a tenant, and what it costs.

Values the API server refuses carry a CEL rule with a plain message instead of a `pattern`, whose
error would quote the regular expression. Each rule is run here over values it accepts and values
it refuses, through the CRD Crossplane generates from the XRD, with the exact message the tenant
reads: one message, since no pattern reports the same value again.
"""

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import yaml

from tests.schemas import validate_xrd_object
from tests.support import ROOT

XRD = yaml.safe_load((ROOT / "apis" / "workspacesandbox" / "definition.yaml").read_text())
SCHEMA = XRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ59QzKAgaweWutMQQYQMAhdmOo8JHFmw4Y3BLQLyb4k"
DNS_LABEL = "must be lowercase letters, digits and '-', starting and ending with a letter or digit"
CPU = "must be an amount of CPU more than zero, such as 2, 1500m or 0.5, with no sign or exponent"
MEMORY = (
    "must be a whole number of bytes more than zero, such as 4Gi or 4096Mi, with no sign or "
    "exponent"
)
DISK = "must be a whole number of bytes more than zero, such as 20Gi, with no sign or exponent"
FQDN = (
    "must be a lowercase DNS name such as pypi.org, optionally starting with '*.'; no scheme, "
    "port or path"
)
PORT_NAME = "must be lowercase letters, digits and single '-', with at least one letter"
SSH_KEY = (
    "must be one OpenSSH public key line: '<type> <base64> [comment]', with type one of "
    "ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, ecdsa-sha2-nistp521, "
    "sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com"
)
SUBDOMAIN = (
    "must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
)


def put(node: Any, tokens: list[str], value: Any) -> None:
    head, *rest = tokens
    if not rest:
        if head == "[0]":
            node.append(value)
        else:
            node[head] = value
        return
    empty: Any = [] if rest[0] == "[0]" else {}
    if head == "[0]":
        if not node:
            node.append(empty)
        child = node[0]
    else:
        child = node.setdefault(head, empty)
    put(child, rest, value)


def xr_with(path: str, value: Any) -> dict[str, Any]:
    """A WorkspaceSandbox with `value` at `path` in its spec, such as `ports[0].name`."""
    spec: dict[str, Any] = {"image": "ubuntu-24.04"}
    if path.startswith("network."):
        spec["network"] = {"egress": "Allowlist"}
    if path.startswith("ports["):
        spec["ports"] = [{"port": 3000}]
    put(spec, re.findall(r"\w+|\[0\]", path), value)
    return {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": "alice-api", "namespace": "tenant-acme"},
        "spec": spec,
    }


def accepted(path: str, *values: Any) -> Iterator[Any]:
    for value in values:
        yield pytest.param(path, value, None, id=f"{path}={value!r}")


def refused(path: str, message: str, *values: Any) -> Iterator[Any]:
    for value in values:
        yield pytest.param(path, value, message, id=f"{path}={value!r}")


CASES = [
    *accepted("preset", "standard", "kata-2", "a"),
    *refused("preset", DNS_LABEL, "Standard", "-kata", "kata-", "kata_2", "a.b"),
    *accepted("resources.cpu", "2", "1500m", "1.5", ".5", "2.", "250m", 2, "1E"),
    *refused(
        "resources.cpu", CPU, "0", "0.0", "0m", "-1", "+1", "1e3", "1E3", "2 cores", "4GB", ""
    ),
    *accepted("resources.memory", "4Gi", "4096Mi", "4G", "1.5G", "1Ti", "1E", 2**32),
    # The API server keeps these as scaled decimals, never whole numbers of bytes
    # (tests/schemas/quantity.py): 1536Mi, not 1.5Gi.
    *refused("resources.memory", MEMORY, "1.5Gi", "1.0Gi", "0.5Ki", "1Pi", "1Ei"),
    *refused(
        "resources.memory", MEMORY, "0", "0.0Gi", "-1Gi", "+1Gi", "1e9", "4gi", "4GB", "1500m"
    ),
    *refused("resources.memory", MEMORY, "0.5", "99999999999999999999"),
    *accepted("resources.disk", "20Gi", "50G", "107374182400"),
    *refused("resources.disk", DISK, "0Gi", "-20Gi", "20 GiB", "1e11", "1n"),
    *accepted("network.allow[0].fqdn", "pypi.org", "*.pypi.org", "files.pythonhosted.org"),
    *refused("network.allow[0].fqdn", FQDN, "https://pypi.org", "PyPI.org", "pypi.*", "a..b"),
    *accepted("network.allow[0].bundle", "package-registries", "a", "npm2"),
    *refused("network.allow[0].bundle", DNS_LABEL, "Package-Registries", "a.b", "-a", "a_b"),
    *accepted("ports[0].name", "preview", "1-a", "web2"),
    *refused("ports[0].name", PORT_NAME, "8080", "a--b", "a-", "Web", "dev_server"),
    *accepted("ssh.authorizedKeys[0]", KEY, f"{KEY} alice@laptop"),
    *refused(
        "ssh.authorizedKeys[0]",
        SSH_KEY,
        f"ssh-dss {KEY.split()[1]}",
        f"{KEY} a\nssh-ed25519 {KEY.split()[1]} b",
        f"{KEY} {'c' * 101}",
        KEY.split()[1],
    ),
    *accepted("snapshots[0].name", "nightly", "before-refactor", "a" * 40),
    *refused("snapshots[0].name", DNS_LABEL, "Nightly", "a.b", "-a"),
    *accepted("restoreFrom.snapshot", "alice-api-nightly", "a.b-c"),
    *refused("restoreFrom.snapshot", SUBDOMAIN, "a..b", "tenant-b/x", "A", ".a"),
]


@pytest.mark.parametrize(("path", "value", "message"), CASES)
def test_each_rule_accepts_or_refuses_with_its_plain_message(
    path: str, value: Any, message: str | None
) -> None:
    errors = validate_xrd_object(XRD, xr_with(path, value))
    assert errors == ([] if message is None else [f"spec.{path}: {message}"])


@pytest.mark.parametrize(
    ("path", "value", "error"),
    [
        pytest.param("resources.cpu", 0, "0 is less than the minimum of 1", id="cpu-zero"),
        pytest.param("resources.disk", -1, "-1 is less than the minimum of 1", id="disk-negative"),
    ],
)
def test_integers_are_bounded_by_minimum(path: str, value: int, error: str) -> None:
    assert validate_xrd_object(XRD, xr_with(path, value)) == [f"spec.{path}: {error}"]


# --------------------------------------------------------------------------- rule costs


def nodes(node: Mapping[str, Any], path: str = "", cardinality: int = 1) -> Iterator[Any]:
    """Every schema node, its path, and how many times a rule on it can run per object."""
    yield path, node, cardinality
    for name, child in (node.get("properties") or {}).items():
        yield from nodes(child, f"{path}.{name}", cardinality)
    if isinstance(node.get("items"), Mapping):
        items = node.get("maxItems", MAX_REQUEST_BYTES)
        yield from nodes(node["items"], f"{path}[]", cardinality * items)


# What the API server assumes of a value's size when it estimates a rule's cost
# (k8s.io/apiserver/pkg/cel/common/schemas.go): an int-or-string could be as long as a whole
# request, whatever its maxLength says; a string is as long as its maxLength.
MAX_REQUEST_BYTES = 3 * 1024 * 1024


def size_of(node: Mapping[str, Any]) -> int:
    if node.get("x-kubernetes-int-or-string"):
        return MAX_REQUEST_BYTES - 2
    length: int = node["maxLength"]
    return length


def estimated_cost(rule: str, node: Mapping[str, Any]) -> int:
    """The terms that grow with the value: cel-go's checker/cost.go and k8s' quantity library.

    `s.matches(re)` costs ceil((len(s) + 1) * 0.1) * ceil(len(re) * 0.25); `quantity(s)` and
    `isQuantity(s)` cost ceil(len(s) * 0.1) each. Everything else in these rules (comparisons,
    `type()`, `sign()`) costs a few units, covered by the margin the test leaves.
    """
    size = size_of(node)
    cost = 0
    for regex in re.findall(r"matches\(r'((?:[^'\\]|\\.)*)'\)", rule):
        cost += math.ceil((size + 1) * 0.1) * math.ceil(len(regex) * 0.25)
    calls = len(re.findall(r"\b(?:isQuantity|quantity)\(self\)", rule))
    return cost + calls * math.ceil(size * 0.1)


# Kubernetes refuses a CRD whose rule is estimated above this (times how often it can run),
# or whose rules add up to ten times as much (apiextensions validation.go).
STATIC_ESTIMATED_COST_LIMIT = 10_000_000
STATIC_ESTIMATED_CRD_COST_LIMIT = 100_000_000


def value_rules() -> Iterator[tuple[str, str, int]]:
    for path, node, cardinality in nodes(SCHEMA):
        for rule in node.get("x-kubernetes-validations") or ():
            text = rule["rule"]
            if "matches(" in text or "quantity(" in text.lower():
                yield path, text, estimated_cost(text, node) * cardinality


def test_the_value_rules_are_the_ones_tested_above() -> None:
    tested = {f".spec.{p}".replace("[0]", "[]") for p, _, _ in (c.values for c in CASES)}
    assert {path for path, _, _ in value_rules()} == tested


def test_every_value_rule_fits_the_cost_budget_with_room_to_spare() -> None:
    costs = {path: cost for path, _, cost in value_rules()}
    assert max(costs.values()) < STATIC_ESTIMATED_COST_LIMIT / 2, costs
    assert sum(costs.values()) < STATIC_ESTIMATED_CRD_COST_LIMIT / 10, costs


def test_an_int_or_string_rule_is_costed_as_a_whole_request() -> None:
    # Why the quantity rules ask `!matches(short)` of the text rather than `matches(grammar)`:
    # the grammar would cost about as much as the per-rule limit.
    node = {"x-kubernetes-int-or-string": True, "maxLength": 32}
    grammar = "self.matches(r'^([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$')"
    assert estimated_cost(grammar, node) > STATIC_ESTIMATED_COST_LIMIT / 2
