"""Offline rendering: requirements are offered the way Crossplane offers them."""

from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.offline import Offline, run
from tests.support import request, xr

SNAPSHOT = {
    "apiVersion": "snapshot.storage.k8s.io/v1",
    "kind": "VolumeSnapshot",
    "metadata": {"name": "base", "namespace": "tenant-acme", "labels": {"tier": "gold"}},
}
OTHER_NS = {**SNAPSHOT, "metadata": {**SNAPSHOT["metadata"], "namespace": "tenant-evil"}}


class Requiring:
    """Asks for the snapshot named `base` in tenant-acme and records what it was offered."""

    def __init__(self, selector: fnv1.ResourceSelector) -> None:
        self.selector = selector
        self.offered: list[list[dict[str, Any]]] = []

    async def RunFunction(
        self, req: fnv1.RunFunctionRequest, _: object
    ) -> fnv1.RunFunctionResponse:
        found = req.required_resources.get("snapshot")
        self.offered.append(
            [resource.struct_to_dict(r.resource) for r in found.items] if found else []
        )
        rsp = fnv1.RunFunctionResponse()
        rsp.requirements.resources["snapshot"].CopyFrom(self.selector)
        return rsp


async def test_required_resources_are_matched_by_name_and_namespace() -> None:
    selector = fnv1.ResourceSelector(
        api_version="snapshot.storage.k8s.io/v1",
        kind="VolumeSnapshot",
        match_name="base",
        namespace="tenant-acme",
    )
    runner = Requiring(selector)
    await run(runner, Offline(request(xr()), "step", [OTHER_NS, SNAPSHOT]))
    # First call: nothing offered yet; second: the match; then it stops, as nothing changed.
    assert runner.offered == [[], [SNAPSHOT]]


async def test_required_resources_are_matched_by_labels() -> None:
    selector = fnv1.ResourceSelector(
        api_version="snapshot.storage.k8s.io/v1",
        kind="VolumeSnapshot",
        match_labels=fnv1.MatchLabels(labels={"tier": "gold"}),
    )
    runner = Requiring(selector)
    await run(runner, Offline(request(xr()), "step", [OTHER_NS, SNAPSHOT]))
    assert runner.offered == [[], [OTHER_NS, SNAPSHOT]]


async def test_a_missing_requirement_is_offered_as_empty() -> None:
    selector = fnv1.ResourceSelector(api_version="v1", kind="Secret", match_name="nope")
    runner = Requiring(selector)
    await run(runner, Offline(request(xr()), "step", [SNAPSHOT]))
    assert runner.offered == [[], []]
