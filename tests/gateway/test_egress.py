"""E2B's egress settings (`allow_internet_access`, `network.allowOut`/`denyOut`) as the sandbox's
`spec.network`, with the unmodified SDK; and the function's refusal reaching the caller at once.
"""

import time
from pathlib import Path
from typing import Any

import pytest
from e2b import ALL_TRAFFIC, Sandbox
from e2b.exceptions import SandboxException
from workspace_gateway.errors import GatewayError
from workspace_gateway.kubernetes.objects import PLURAL, refusal_of
from workspace_gateway.kubernetes.templates import Template
from workspace_gateway.request_bodies import egress_of, new_sandbox

from function.errors import FieldError
from function.model import parse
from function.model.spec import WorkspaceSandbox
from function.render import render
from tests.gateway.stand_in import BASE, serving
from tests.support import NOW, PLATFORM

pytestmark = pytest.mark.e2e  # starts agents or gateways

ISOLATED = Template(image="ubuntu-24.04", preset="isolated-kata")
NAMED = {"allowOut": ["pypi.org", "*.npmjs.org", "1.1.1.1", "2606:4700::/32"]}


@pytest.mark.parametrize(
    ("body", "spec"),
    [
        pytest.param({}, None, id="nothing-said"),
        pytest.param({"allow_internet_access": True}, None, id="internet"),
        pytest.param({"network": {"allowPublicTraffic": True}}, None, id="public-previews"),
        pytest.param({"network": {"allowPublicTraffic": False}}, None, id="private-previews"),
        pytest.param({"network": {"allowOut": ["pypi.org"]}}, None, id="allow-alone-adds-nothing"),
        pytest.param({"allow_internet_access": False}, {"egress": "None"}, id="no-internet"),
        pytest.param({"network": {"denyOut": [ALL_TRAFFIC]}}, {"egress": "None"}, id="deny-all"),
        pytest.param(
            {"network": {**NAMED, "denyOut": [ALL_TRAFFIC, "::/0"]}},
            {
                "egress": "Allowlist",
                "allow": [
                    {"fqdn": "pypi.org"},
                    {"fqdn": "*.npmjs.org"},
                    {"cidr": "1.1.1.1/32"},
                    {"cidr": "2606:4700::/32"},
                ],
            },
            id="allow-list",
        ),
        pytest.param(
            {"allow_internet_access": False, "network": {"allowOut": ["PyPI.org", "pypi.org"]}},
            {"egress": "Allowlist", "allow": [{"fqdn": "pypi.org"}]},
            id="no-internet-but-these-once",
        ),
        pytest.param(
            {"network": {"allowOut": [ALL_TRAFFIC], "denyOut": [ALL_TRAFFIC]}},
            None,
            id="allowing-all-traffic-wins",
        ),
    ],
)
def test_egress_settings_become_the_sandboxs_network(
    body: dict[str, Any], spec: dict[str, Any] | None
) -> None:
    assert egress_of(body) == spec
    assert new_sandbox(body).network == spec


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"network": {"denyOut": ["10.0.0.0/8"]}},
            (
                "network.denyOut: only all traffic (0.0.0.0/0) can be denied here, not "
                "10.0.0.0/8: the platform already denies private and reserved ranges; list what "
                "to reach in network.allowOut instead"
            ),
        ),
        (
            {"network": {"allowOut": ["1.1.1.0/23"], "denyOut": [ALL_TRAFFIC]}},
            "network.allowOut: '1.1.1.0/23' is not an address range: 1.1.1.0/23 has host bits set",
        ),
        (
            {"network": {"allowOut": "pypi.org"}},
            "network.allowOut must be a list of non-empty strings",
        ),
        (
            {"network": {"dnsServers": ["1.1.1.1"]}},
            "'network.dnsServers' is not offered by this gateway",
        ),
        (
            {"network": {"egressProxy": {"address": "p:1080"}}},
            "'network.egressProxy' is not offered by this gateway",
        ),
        ({"network": {"rules": {}}}, "'network.rules' is not offered by this gateway"),
        (
            {"network": {"allowPublicTraffic": "no"}},
            "network.allowPublicTraffic must be true or false",
        ),
        ({"network": "none"}, "network must be an object"),
        ({"allow_internet_access": "no"}, "allow_internet_access must be true or false"),
        (
            {
                "network": {
                    "allowOut": [f"h{i}.example.com" for i in range(65)],
                    "denyOut": [ALL_TRAFFIC],
                }
            },
            "network.allowOut: at most 64 entries",
        ),
    ],
)
def test_egress_the_platform_cannot_honour_is_refused(body: dict[str, Any], message: str) -> None:
    with pytest.raises(GatewayError) as e:
        new_sandbox(body)
    assert (e.value.status, e.value.message) == (400, message)


def test_a_fatal_result_is_read_from_the_synced_condition_of_this_generation() -> None:
    message = (
        'cannot compose resources: pipeline step "workspace-sandbox" returned a fatal result: '
        "spec.network.allow[0].fqdn: names can't be enforced on this platform"
    )
    synced = {"type": "Synced", "status": "False", "reason": "ReconcileError", "message": message}
    obj = {"metadata": {"generation": 2}, "status": {"conditions": [synced]}}
    assert refusal_of(obj) == "spec.network.allow[0].fqdn: names can't be enforced on this platform"
    assert (
        refusal_of({**obj, "status": {"conditions": [{**synced, "observedGeneration": 1}]}}) is None
    )
    assert refusal_of({**obj, "status": {"conditions": [{**synced, "status": "True"}]}}) is None
    other = {**synced, "message": "cannot apply composed resource: conflict"}
    assert refusal_of({**obj, "status": {"conditions": [other]}}) is None


def the_function(obj: dict[str, Any]) -> str | None:
    """What the function answers for the XR the gateway wrote: its FATAL message, or None."""
    meta = {**obj["metadata"], "uid": "0b7c1a2e-1111-4222-8333-444455556666"}
    ws = parse(WorkspaceSandbox, {"metadata": meta, "spec": obj["spec"]}, "")
    try:
        render(ws, PLATFORM, {}, NOW)
    except FieldError as err:
        return str(err)
    return None


def test_the_sdk_asks_for_names_and_gets_an_allow_list_in_a_namespace_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    templates = {"base": BASE, "isolated": ISOLATED}
    with serving(tmp_path, monkeypatch, templates, the_function) as cluster:
        network = {"allow_out": ["pypi.org", "1.1.1.1"], "deny_out": [ALL_TRAFFIC]}
        sandbox = Sandbox.create("isolated", network=network)
        xr = cluster.objects[PLURAL, "team-a", sandbox.sandbox_id]
        assert xr["spec"]["preset"] == "isolated-kata"
        assert xr["spec"]["network"] == {
            "egress": "Allowlist",
            "allow": [{"fqdn": "pypi.org"}, {"cidr": "1.1.1.1/32"}],
        }
        assert sandbox.commands.run("echo ok").stdout == "ok\n"
        sealed = Sandbox.create("isolated", allow_internet_access=False)
        assert cluster.objects[PLURAL, "team-a", sealed.sandbox_id]["spec"]["network"] == {
            "egress": "None"
        }
        sandbox.kill()
        sealed.kill()


def test_names_where_the_platform_cannot_enforce_them_are_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serving(tmp_path, monkeypatch, None, the_function) as cluster:
        began = time.monotonic()
        with pytest.raises(SandboxException) as e:
            Sandbox.create("base", network={"allow_out": ["pypi.org"], "deny_out": [ALL_TRAFFIC]})
        # Told within a few of the gateway's checks, not after its whole wait for readiness.
        assert time.monotonic() - began < 10
        assert (
            "the platform refused the sandbox: spec.network.allow[0].fqdn: names can't be "
            in str(e.value)
        )
        assert "isolated" in str(e.value)
        # A refused sandbox is not left behind.
        assert not [k for k in cluster.objects if k[0] == PLURAL]
