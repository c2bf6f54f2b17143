"""The admission policies in deploy/: the project's evaluator and the real API server, case by
case (tests/control_plane/replay.py). Any disagreement fails."""

from collections import Counter
from pathlib import Path

import pytest

from tests.control_plane.replay import Case, Replay, describe, record
from tests.control_plane.server import ControlPlane

pytestmark = pytest.mark.control_plane

REPLAYED_AT_LEAST = 0.7
"""Of the evaluator's distinct cases, the share the server is asked (72 % when this was
written); the rest need what no server here has (KubeVirt's VMI and pool kinds, the XRD's CRD
before Crossplane serves it, a running pod) or carry an object the server's own validation
refuses before admission (the evaluator reads only the fields its policies read); each is
listed by reason in the failure."""


@pytest.fixture(scope="module")
def replayed(bare: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Replay:
    root: Path = tmp_path_factory.mktemp("admission")
    replay = Replay(bare)
    replay.run([Case(raw) for raw in record(root)], served(bare))
    (root / "replayed.txt").write_text(replay.report())
    return replay


def served(plane: ControlPlane) -> set[tuple[str, str, str]]:
    """(group, version, resource) of every resource the server serves."""
    return {(g, v, resource) for (g, v, _), (resource, _) in plane.resources().items()}


def test_the_server_agrees_with_the_evaluator_on_every_case(replayed: Replay) -> None:
    disagreements = [
        f"{describe(c)}: evaluator {c.expected!r}, server {got!r}"
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
