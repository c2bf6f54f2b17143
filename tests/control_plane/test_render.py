"""`crossplane internal render` of Crossplane core v2.3.4 calling our served function, for every
example: its composed resources, the XR's status and conditions, and the function's results,
compared with what `workspace-sandbox render` prints for the same files.

Each difference Crossplane makes by design is normalised by a named function below that says
why; anything else fails the test.
"""

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from function.main import cli
from function.offline import CONDITION_TIME, RESOURCE_NAME, plain
from tests.control_plane.render import (
    Messages,
    crossplane_render,
    messages,
    served,
)
from tests.control_plane.server import built
from tests.support import AGENT_COMPOSITION, COMPOSITION, EXAMPLES, ROOT, load_stream, render_args

pytestmark = pytest.mark.control_plane

XRD = ROOT / "apis" / "workspacesandbox" / "definition.yaml"


@dataclass(frozen=True)
class Case:
    example: Path
    composition: Path


CASES = [pytest.param(Case(c, COMPOSITION), id=c.name) for c in EXAMPLES] + [
    # The examples tests/edge/test_cli.py also renders with a platform that delivers the agent.
    pytest.param(Case(c, AGENT_COMPOSITION), id=f"with-agent-{c.name}")
    for c in EXAMPLES
    if c.name in ("full", "kata")
]


@pytest.fixture(scope="module")
def binary() -> Path:
    return built("crossplane") / "crossplane"


@pytest.fixture(scope="module")
def msgs(tmp_path_factory: pytest.TempPathFactory) -> Messages:
    return messages(tmp_path_factory.mktemp("render-proto"))


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    with served() as at:
        yield at


def _files(case: Path, name: str) -> list[dict[str, Any]]:
    return load_stream(case / name) if (case / name).exists() else []


def _owner_uid(observed: list[dict[str, Any]]) -> str | None:
    """The XR's uid as its composed resources' controller references name it."""
    for o in observed:
        for ref in o["metadata"].get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") == "WorkspaceSandbox":
                return str(ref["uid"])
    return None


def _render_uid(xr: dict[str, Any]) -> str:
    """The uid `crossplane internal render` gives an XR that has none: a SHA-1 UUID of its GVK,
    namespace and name (internal/render/composite/render.go)."""
    group, version = xr["apiVersion"].split("/")
    gvk = f"{group}/{version}, Kind={xr['kind']}"
    meta = xr["metadata"]
    return str(
        uuid.uuid5(uuid.UUID(int=0), f"{gvk}\x00{meta.get('namespace', '')}\x00{meta['name']}")
    )


@dataclass(frozen=True)
class Inputs:
    composite: dict[str, Any]
    """The CompositeInput, as JSON."""
    uid: str
    """The uid Crossplane's XR has, which its composed resources' owner references carry."""
    step: str


def inputs(case: Case, address: str) -> Inputs:
    """The RenderRequest's CompositeInput from the files `workspace-sandbox render` reads."""
    (xr,) = load_stream(case.example / "xr.yaml")
    composition = next(d for d in load_stream(case.composition) if d["kind"] == "Composition")
    pipeline = composition["spec"]["pipeline"]
    observed = _files(case.example, "observed.yaml")
    # An observed resource whose controller is another uid is refused as not the XR's own. The
    # XR Crossplane reads from the API server has the uid its resources name; xr.yaml, written
    # as a tenant writes it, has none, so it is given that one.
    uid = xr["metadata"].get("uid") or _owner_uid(observed)
    if uid:
        xr["metadata"]["uid"] = uid
    composite = {
        "compositeResource": xr,
        "composition": composition,
        "compositeResourceDefinition": yaml.safe_load(XRD.read_text()),
        # Every step is ours: no other function is served here.
        "functions": [{"name": s["functionRef"]["name"], "address": address} for s in pipeline],
        "observedResources": observed,
        "requiredResources": _files(case.example, "required.yaml"),
    }
    step = str(pipeline[0]["step"])
    return Inputs(composite, uid or _render_uid(xr), step)


@dataclass(frozen=True)
class Output:
    """A render, normalised: the XR's identity, status and conditions, each composed resource
    by its composition-resource name, and the function's results."""

    xr: dict[str, Any]
    conditions: dict[str, dict[str, Any]]
    composed: dict[str, dict[str, Any]]
    results: list[dict[str, Any]]


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Conditions keyed by type, without lastTransitionTime.

    The API lists conditions as a map keyed by type, and each renderer appends them in the
    order it sets them: Crossplane its own last, ours Ready and Synced first. Our render prints
    crossplane render's fixed time (offline.CONDITION_TIME), Crossplane the reconcile's clock.
    """
    return {
        c["type"]: {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions") or []
    }


def _identity(xr: dict[str, Any]) -> dict[str, Any]:
    meta = xr["metadata"]
    return {
        "apiVersion": xr["apiVersion"],
        "kind": xr["kind"],
        "metadata": {k: meta[k] for k in ("name", "namespace") if k in meta},
        "status": {k: v for k, v in (xr.get("status") or {}).items() if k != "conditions"},
    }


def ours(case: Case) -> Output:
    """`workspace-sandbox render --include-results` of the case."""
    args = [*render_args(case.example), "--composition", str(case.composition)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    results = [
        {k: d.get(k) for k in ("severity", "reason", "message")}
        for d in docs
        if d["kind"] == "Result"
    ]
    assert all(r["severity"] != "SEVERITY_FATAL" for r in results), "every example renders"
    (xr,) = [d for d in docs if d["kind"] == "WorkspaceSandbox"]
    for c in xr["status"]["conditions"]:
        assert c["lastTransitionTime"] == CONDITION_TIME
    composed = {
        d["metadata"]["annotations"][RESOURCE_NAME]: d
        for d in docs
        if RESOURCE_NAME in ((d.get("metadata") or {}).get("annotations") or {})
    }
    return Output(_identity(xr), _conditions(xr["status"]), composed, results)


RESPONSIVE = {"type": "Responsive", "status": "True", "reason": "WatchCircuitClosed"}
"""Crossplane v2.3's watch circuit breaker reports on the XR's controller (whether its watches
of composed resources are throttled), not on what the pipeline composed; a render has no
watches, and `workspace-sandbox render` prints no such condition."""

SEVERITY = {"Warning": "SEVERITY_WARNING", "Normal": "SEVERITY_NORMAL"}


def _results(events: list[dict[str, Any]], step: str) -> list[dict[str, Any]]:
    """The function's results, from the events Crossplane makes of them.

    Crossplane emits each non-FATAL result as an event on the XR, its message prefixed with the
    step (`Pipeline step "compose-sandbox": ...`), its reason `ComposeResources` when the result
    has none; the reconciler's own events (the Composition it selected, each resource not yet
    ready, which the Ready condition's message also names) are not results.
    """
    prefix = f'Pipeline step "{step}": '
    return [
        {
            "severity": SEVERITY[e["type"]],
            "reason": e.get("reason"),
            "message": e["message"][len(prefix) :],
        }
        for e in events
        if e.get("message", "").startswith(prefix)
    ]


def theirs(rendered: dict[str, Any], step: str) -> Output:
    xr = plain(rendered["compositeResource"])
    conditions = _conditions(xr["status"])
    assert conditions.pop("Responsive") == RESPONSIVE
    composed = {}
    for obj in rendered.get("composedResources") or []:
        got = plain(obj)
        composed[got["metadata"]["annotations"][RESOURCE_NAME]] = got
    return Output(_identity(xr), conditions, composed, _results(rendered["events"], step))


def _with_owner_uid(out: Output, uid: str) -> Output:
    """Our render's owner references carry xr.yaml's uid, empty when the file has none (a file
    has no uid); Crossplane's carry the uid its XR has, the one the request gave it or the one
    render derives. The reference is compared whole with that uid put in."""
    composed = {}
    for name, obj in out.composed.items():
        refs = [
            r | {"uid": uid} if r.get("controller") and r["uid"] == "" else r
            for r in obj["metadata"]["ownerReferences"]
        ]
        composed[name] = obj | {"metadata": obj["metadata"] | {"ownerReferences": refs}}
    return Output(out.xr, out.conditions, composed, out.results)


@pytest.mark.parametrize("case", CASES)
def test_crossplane_renders_every_example_as_our_render_does(
    case: Case, binary: Path, msgs: Messages, address: str
) -> None:
    want = ours(case)
    ins = inputs(case, address)
    rendered = crossplane_render(binary, msgs, ins.composite)
    assert rendered.code == 0, rendered.stderr
    got = theirs(rendered.output, ins.step)
    want = _with_owner_uid(want, ins.uid)

    assert got.xr == want.xr
    assert got.conditions == want.conditions
    assert sorted(got.composed) == sorted(want.composed)
    for name in want.composed:
        assert got.composed[name] == want.composed[name], name
    assert got.results == want.results

    # What Crossplane does beyond the XR and its resources, which our render implies: the XR
    # references exactly what it applied, and nothing observed is garbage-collected.
    refs = rendered.output["compositeResource"]["spec"]["crossplane"]["resourceRefs"]
    applied = rendered.output["composedResources"]
    assert sorted((r["apiVersion"], r["kind"], r["name"]) for r in refs) == sorted(
        (o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in applied
    )
    assert not rendered.output.get("deletedResources"), "Crossplane would delete observed objects"
