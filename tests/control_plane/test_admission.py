"""The admission policies in deploy/: the project's evaluator and the real API server, case by
case (tests/control_plane/replay.py). Any disagreement fails."""

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control_plane.install import install_crds
from tests.control_plane.replay import Case, Replay, record
from tests.control_plane.server import CONTROLLERS, ControlPlane, control_plane

pytestmark = pytest.mark.control_plane

REPLAYED_AT_LEAST = 0.75
"""Of the evaluator's distinct cases, the share the server is asked; the rest need what no
server here has (a running pod, a controller's CRD) and are listed by reason in the failure."""


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replay]:
    # A plane of its own: no policies but the one a round binds, and no garbage collector, which
    # would delete a stored old object whose owner is not there.
    root: Path = tmp_path_factory.mktemp("admission")
    cases = [Case(raw) for raw in record(root)]
    controllers = [c for c in CONTROLLERS if c != "garbage-collector-controller"]
    with control_plane(root / "plane", controllers) as plane:
        install_crds(plane)
        replay = Replay(plane)
        replay.run(cases, served(plane))
        yield replay


def served(plane: ControlPlane) -> set[tuple[str, str, str]]:
    """(group, version, resource) of every resource and subresource the server serves."""
    out = set()
    status, core = plane.request("GET", "/api/v1")
    assert status == 200
    out |= {("", "v1", r["name"].partition("/")[0]) for r in core["resources"]}
    status, groups = plane.request("GET", "/apis")
    assert status == 200
    for group in groups["groups"]:
        for version in group["versions"]:
            _, listing = plane.request("GET", f"/apis/{version['groupVersion']}")
            for r in listing.get("resources", []):
                out.add((group["name"], version["version"], r["name"].partition("/")[0]))
    return out


def test_the_server_agrees_with_the_evaluator_on_every_case(replayed: Replay) -> None:
    disagreements = [
        f"{c.policy} {c.request['operation']} {c.request['resource']['resource']} "
        f"{c.request['namespace'] if 'namespace' in c.request else ''}/{c.request['name']} "
        f"as {c.request['userInfo']['username']}: evaluator {c.expected!r}, server {got!r}"
        for c, got in replayed.results
        if got != c.expected
    ]
    assert disagreements == []


def test_most_cases_reach_the_server(replayed: Replay) -> None:
    asked, skipped = len(replayed.results), len(replayed.skipped)
    reasons = Counter(why for _, why in replayed.skipped)
    assert asked >= REPLAYED_AT_LEAST * (asked + skipped), reasons.most_common()
    refused = sum(1 for c, _ in replayed.results if c.expected)
    assert refused and asked - refused, (refused, asked)
