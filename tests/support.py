"""Shared test inputs: the shipped platform, tenant specs and requests."""

import subprocess
import time
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.compose.names import resolve
from function.model import parse
from function.model.platform import SandboxPlatform
from function.model.spec import WorkspaceSandbox

ROOT = Path(__file__).resolve().parent.parent
COMPOSITION = ROOT / "function" / "compositions" / "workspacesandbox.yaml"
EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/xr.yaml"))
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
NAMESPACE = "tenant-acme"
NOW_ARG = "2026-11-29T12:00:00Z"
"""NOW as the `workspace-sandbox render --now` option takes it."""


@cache
def platform_input() -> dict[str, Any]:
    composition = yaml.safe_load(COMPOSITION.read_text())
    step_input: dict[str, Any] = composition["spec"]["pipeline"][0]["input"]
    return step_input


def platform(**changes: Any) -> SandboxPlatform:
    """The shipped SandboxPlatform, with top-level fields replaced."""
    return parse(SandboxPlatform, {**platform_input(), **changes}, "input")


PLATFORM = platform()

AGENT_COMPOSITION = ROOT / "examples" / "composition-with-agent.yaml"
"""The shipped Composition with input.agent set: the example of a platform delivering the agent."""


@cache
def agent_platform_input() -> dict[str, Any]:
    composition = yaml.safe_load(AGENT_COMPOSITION.read_text())
    step_input: dict[str, Any] = composition["spec"]["pipeline"][0]["input"]
    return step_input


AGENT_PLATFORM = parse(SandboxPlatform, agent_platform_input(), "input")
AGENT_IMAGE = AGENT_PLATFORM.agent.image if AGENT_PLATFORM.agent else ""

SITE_WARNING = "SiteAddressesNotStated"
"""The reason of the warning the shipped platform gets on every call: it leaves the site's own
addresses unstated (tests/render/test_site_addresses.py checks that warning)."""
AGENT_WARNING = "AgentNotConfigured"
"""The reason of the warning every VM sandbox of the shipped platform gets: it names no agent
image (tests/edge/test_fn.py checks that warning)."""


def results(rsp: fnv1.RunFunctionResponse) -> list[fnv1.Result]:
    """A response's results but the shipped platform's warnings about what it leaves unset."""
    return [r for r in rsp.results if r.reason not in {SITE_WARNING, AGENT_WARNING}]


def xr(spec: dict[str, Any] | None = None, name: str = "alice-api", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": name, "namespace": NAMESPACE, **meta},
        "spec": {"image": "ubuntu-24.04", **(spec or {})},
    }


def workspace(spec: dict[str, Any] | None = None, name: str = "alice-api") -> WorkspaceSandbox:
    """A new sandbox (nothing observed), its children's names resolved as render resolves them."""
    data = xr(spec, name)
    ws = parse(WorkspaceSandbox, {"metadata": data["metadata"], "spec": data["spec"]}, "")
    return resolve(ws, {})


def owned(observed: dict[str, Any] | None, name: str = "alice-api") -> dict[str, Any]:
    """Observed objects as Crossplane sends them: controlled by the XR `name`.

    An object whose metadata names its owners (even none) is left as it is.
    """
    out: dict[str, Any] = {}
    for key, obj in (observed or {}).items():
        if not isinstance(obj.get("metadata", {}), dict):
            out[key] = obj  # malformed on purpose (the fuzz tests): Crossplane adds nothing
            continue
        meta = dict(obj.get("metadata") or {})
        meta.setdefault("ownerReferences", [owner_reference(name)])
        out[key] = {**obj, "metadata": meta}
    return out


def owner_reference(name: str = "alice-api", uid: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def request(
    composite: dict[str, Any],
    observed: dict[str, dict[str, Any]] | None = None,
    step_input: dict[str, Any] | None = None,
) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest(
        meta=fnv1.RequestMeta(tag="test"),
        input=resource.dict_to_struct(platform_input() if step_input is None else step_input),
        observed=fnv1.State(composite=fnv1.Resource(resource=resource.dict_to_struct(composite))),
    )
    meta = composite.get("metadata")
    xr_name = meta.get("name") if isinstance(meta, dict) else None
    for name, obj in owned(observed, str(xr_name)).items():
        req.observed.resources[name].resource.update(obj)
    return req


def load_stream(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def observed_of(case: Path) -> dict[str, dict[str, Any]]:
    """An example's observed.yaml keyed by composition-resource name."""
    path = case / "observed.yaml"
    if not path.exists():
        return {}
    return {
        d["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: d
        for d in load_stream(path)
    }


def required_of(case: Path, asked: dict[str, dict[str, str]]) -> dict[str, list[dict[str, Any]]]:
    """An example's required.yaml, answered the way Crossplane answers each requirement."""
    path = case / "required.yaml"
    docs = load_stream(path) if path.exists() else []
    return {
        key: [
            d
            for d in docs
            if (d["apiVersion"], d["kind"], d["metadata"]["name"])
            == (want["apiVersion"], want["kind"], want["name"])
        ]
        for key, want in asked.items()
    }


def wait_until_serving(proc: subprocess.Popen[bytes], channel: grpc.Channel) -> None:
    """Wait for a `serve` process to answer on `channel`; fail with its output if it can't."""
    deadline = time.monotonic() + 20
    while True:
        try:
            grpc.channel_ready_future(channel).result(timeout=0.5)
            return
        except grpc.FutureTimeoutError:
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"server did not start: {out}")


def render_args(case: Path) -> list[str]:
    """The `workspace-sandbox render` arguments for an example: its xr and what it observes."""
    args = ["render", str(case / "xr.yaml"), "--include-results", "--now", NOW_ARG]
    if (case / "observed.yaml").exists():
        args += ["--observed", str(case / "observed.yaml")]
    if (case / "required.yaml").exists():
        args += ["--required", str(case / "required.yaml")]
    return args
