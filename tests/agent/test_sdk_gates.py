"""The envd version the agent advertises is the one every gate of the dev extra's SDK asks for.

The SDK decides what it may ask of a sandbox from the `envdVersion` the control API gives, which
the gateway reads from the agent's `/health`. The tests in `sdk/` run in the SDK's debug mode,
which assumes envd 99.99.99 and so opens every gate whatever the agent says; here the SDK holds
the version `/health` gives, as `create` would.
"""

import pytest
from e2b import ConnectionConfig, Sandbox
from e2b.envd import versions
from e2b.exceptions import TemplateException
from packaging.version import Version
from workspace_agent import ENVD_VERSION

from tests.agent.sdk.agents import TOKEN, Running, debug_env

pytestmark = pytest.mark.e2e  # starts agents or gateways

GATES = {
    name: value
    for name, value in vars(versions).items()
    if isinstance(value, Version) and name != "ENVD_DEBUG_FALLBACK"
}


def test_the_agent_is_as_new_as_the_sdk_s_last_gate() -> None:
    # A newer SDK with a new gate fails this: implement what it asks for, then raise the version.
    assert max(GATES.values()) == Version(ENVD_VERSION)
    assert GATES["ENVD_VERSION_WATCH_NETWORK_MOUNTS"] == Version("0.6.4")


def as_created(version: str) -> Sandbox:
    """The SDK's `Sandbox` as `create` leaves it when the control API says `version`."""
    return Sandbox(
        sandbox_id="gates",
        sandbox_domain=None,
        envd_version=Version(version),
        envd_access_token=TOKEN,
        traffic_access_token=None,
        connection_config=ConnectionConfig(extra_sandbox_headers={"X-Access-Token": TOKEN}),
    )


def test_with_the_version_health_gives_the_sdk_refuses_nothing(
    agent: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    debug_env(monkeypatch, agent.url)
    advertised = agent.get("/health").headers["x-envd-version"]
    sandbox = as_created(advertised)
    assert sandbox._envd_version == Version("0.6.4")  # what the gates read
    assert sandbox.files.write("m.txt", "x", metadata={"k": "v"}).metadata == {"k": "v"}
    sandbox.files.make_dir("w")
    handle = sandbox.files.watch_dir("w", include_entry=True, allow_network_mounts=True)
    sandbox.files.write("w/e.txt", "four")
    entries = [e.entry for e in handle.get_new_events()]
    assert [(e.name, e.size) if e else None for e in entries] == [("e.txt", 4)] * 3
    handle.stop()
    assert sandbox.commands.run("echo ok").stdout == "ok\n"


def test_the_version_before_refused_all_three_on_the_sdk_s_side(
    agent: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    debug_env(monkeypatch, agent.url)
    old = as_created("0.5.7")
    with pytest.raises(TemplateException, match=r"metadata requires envd 0\.6\.2"):
        old.files.write("m.txt", "x", metadata={"k": "v"})
    with pytest.raises(TemplateException, match="include entry info"):
        old.files.watch_dir(".", include_entry=True)
    with pytest.raises(TemplateException, match="network mounts"):
        old.files.watch_dir(".", allow_network_mounts=True)
