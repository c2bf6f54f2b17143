"""deploy/argocd: Argo CD's tracking markers on an XR never reach what it composes."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.fn import FunctionRunner
from tests.deploy.argocd import run_answered
from tests.support import (
    EXAMPLES,
    NOW,
    load_stream,
    observed_of,
    request,
    xr,
)

TRACKING_ID = "platform:sandbox.cozystack.io/WorkspaceSandbox:tenant-acme/alice-api"
ARGO_LABELS = {"app.kubernetes.io/instance": "platform", "argocd.argoproj.io/instance": "platform"}
ARGO_ANNOTATIONS = {
    "argocd.argoproj.io/tracking-id": TRACKING_ID,
    "argocd.argoproj.io/sync-options": "Prune=false",
    "kubectl.kubernetes.io/last-applied-configuration": "{}",
}


async def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    return await FunctionRunner(clock=lambda: NOW).RunFunction(req, None)


def is_argo_key(key: Any) -> bool:
    return isinstance(key, str) and (
        key == "app.kubernetes.io/instance" or key.startswith("argocd.argoproj.io/")
    )


def markers(value: Any, path: str = "") -> Iterator[str]:
    """Where Argo CD's tracking label or annotations (keys or the tracking id) appear, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if is_argo_key(key):
                yield f"{path}.{key}"
            yield from markers(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from markers(item, f"{path}[{index}]")
    elif isinstance(value, str) and ("argocd.argoproj.io/" in value or TRACKING_ID in value):
        yield path


def metadata_maps(value: Any) -> Iterator[dict[str, Any]]:
    """Every labels and annotations map of every metadata, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "metadata" and isinstance(item, dict):
                for field in ("labels", "annotations"):
                    if isinstance(item.get(field), dict):
                        yield item[field]
            yield from metadata_maps(item)
    elif isinstance(value, list):
        for item in value:
            yield from metadata_maps(item)


def tracked(composite: dict[str, Any]) -> dict[str, Any]:
    meta = composite["metadata"]
    return {
        **composite,
        "metadata": {
            **meta,
            "labels": {**meta.get("labels", {}), **ARGO_LABELS},
            "annotations": {**meta.get("annotations", {}), **ARGO_ANNOTATIONS},
        },
    }


def tracked_observed(observed: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Observed resources that somehow carry the markers too: nothing may echo them back."""
    return {name: tracked(obj) for name, obj in observed.items()}


def tracking_cases() -> Iterator[Any]:
    yield pytest.param(
        xr(labels=ARGO_LABELS, annotations=ARGO_ANNOTATIONS), {}, None, id="standard"
    )
    yield pytest.param(
        xr({"preset": "kata"}, labels=ARGO_LABELS, annotations=ARGO_ANNOTATIONS),
        {},
        None,
        id="kata",
    )
    for case in EXAMPLES:
        composite = tracked(load_stream(case / "xr.yaml")[0])
        yield pytest.param(composite, observed_of(case), case, id=f"example-{case.name}")
        if (case / "observed.yaml").exists():
            yield pytest.param(
                composite,
                tracked_observed(observed_of(case)),
                case,
                id=f"example-{case.name}-marked-observed",
            )


@pytest.mark.parametrize(("composite", "observed", "case"), list(tracking_cases()))
async def test_no_composed_resource_carries_argo_cd_tracking(
    composite: dict[str, Any], observed: dict[str, dict[str, Any]], case: Path | None
) -> None:
    rsp = await run_answered(request(composite, observed), case)
    assert not [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    composed = {
        name: resource.struct_to_dict(r.resource) for name, r in rsp.desired.resources.items()
    }
    assert composed
    for name, manifest in composed.items():
        assert list(metadata_maps(manifest)), f"{name} has no labels or annotations at all"
        for found in metadata_maps(manifest):
            assert not [k for k in found if is_argo_key(k)], name
        assert list(markers(manifest)) == [], name
    assert list(markers(resource.struct_to_dict(rsp.desired.composite.resource))) == []


async def test_the_markers_reach_the_function() -> None:
    """The XR sent does carry them, so the assertions above are not vacuous."""
    req = request(xr(labels=ARGO_LABELS, annotations=ARGO_ANNOTATIONS))
    sent = resource.struct_to_dict(req.observed.composite.resource)
    assert sent["metadata"]["labels"]["app.kubernetes.io/instance"] == "platform"
    assert len(list(markers(sent))) == 5
