"""The gRPC edge: translates between protobuf and render(); holds no composition logic."""

import functools
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import grpc
from crossplane.function import logging, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import struct_pb2 as structpb

from function.errors import FieldError
from function.model import Manifest, parse
from function.model.platform import SandboxPlatform
from function.model.spec import WorkspaceSandbox
from function.render import Rendered, render
from function.wire import StructView, fill, to_dict, to_python

if TYPE_CHECKING:
    # The SDK's logging is structlog's; only its type is named here.
    from structlog.stdlib import BoundLogger

XR_API_VERSION = "sandbox.cozystack.io/v1alpha1"
XR_KIND = "WorkspaceSandbox"

_STATUS = {"True": fnv1.STATUS_CONDITION_TRUE, "False": fnv1.STATUS_CONDITION_FALSE}
_READY = {True: fnv1.READY_TRUE, False: fnv1.READY_FALSE}


@functools.lru_cache(maxsize=32)
def _platform(serialized: bytes) -> SandboxPlatform:
    # The input is the same on nearly every call; parse each distinct one once.
    s = structpb.Struct()
    s.ParseFromString(serialized)
    return parse(SandboxPlatform, to_dict(s), "input")


# The metadata the model reads; the rest (managedFields above all) is never converted.
_METADATA = frozenset({"name", "namespace", "uid"})


def _read(
    req: fnv1.RunFunctionRequest,
) -> tuple[
    WorkspaceSandbox,
    SandboxPlatform,
    dict[str, Mapping[str, Any]],
    dict[str, list[Manifest]],
]:
    if not req.HasField("input"):
        raise FieldError("input", "the Composition step has no SandboxPlatform input")
    platform = _platform(req.input.SerializeToString(deterministic=True))
    xr = req.observed.composite.resource
    if not xr.fields:
        raise FieldError("composite", "the request carries no composite resource")
    view = StructView(xr)
    if (view.get("apiVersion"), view.get("kind")) != (XR_API_VERSION, XR_KIND):
        raise FieldError(
            "composite",
            f"this function composes {XR_API_VERSION} {XR_KIND}, "
            f"not {view.get('apiVersion')} {view.get('kind')}",
        )
    # Only metadata and spec are the tenant's input; status is ours, and the rest (managed
    # fields above all) is the server's and never converted.
    data: dict[str, Any] = {}
    if "metadata" in xr.fields:
        meta = to_python(xr.fields["metadata"])
        data["metadata"] = (
            {k: v for k, v in meta.items() if k in _METADATA} if isinstance(meta, dict) else meta
        )
    if "spec" in xr.fields:
        data["spec"] = to_python(xr.fields["spec"])
    ws = parse(WorkspaceSandbox, data, "")
    # Read lazily: render looks at a few fields of each. Iterating never inserts keys, unlike
    # req.observed.resources["x"].
    observed: dict[str, Mapping[str, Any]] = {
        name: StructView(r.resource) for name, r in req.observed.resources.items()
    }
    required = {
        name: [to_dict(r.resource) for r in found.items]
        for name, found in req.required_resources.items()
    }
    return ws, platform, observed, required


def _supports(req: fnv1.RunFunctionRequest, capability: int) -> bool:
    """Crossplane v2.2 and newer say what they support; before that, v2.0 supports it all."""
    advertised = set(req.meta.capabilities)
    return fnv1.CAPABILITY_CAPABILITIES not in advertised or capability in advertised


def _write(rsp: fnv1.RunFunctionResponse, out: Rendered) -> None:
    for name, manifest in out.resources.items():
        desired = rsp.desired.resources[name]
        # Replace whatever an earlier step left under our name.
        desired.resource.Clear()
        fill(desired.resource, manifest)
        desired.ready = _READY[out.ready[name]]
    composite = rsp.desired.composite
    # Earlier steps may own other status fields; ours are written whole, theirs kept.
    status = to_dict(composite.resource).get("status") or {}
    composite.resource.update({"status": {**status, **out.status}})
    composite.ready = _READY[out.composite_ready]
    for c in out.conditions:
        rsp.conditions.append(
            fnv1.Condition(
                type=c.type, status=_STATUS[c.status], reason=c.reason, message=c.message
            )
        )
    for name, wanted in out.requirements.items():
        rsp.requirements.resources[name].CopyFrom(
            fnv1.ResourceSelector(
                api_version=wanted["apiVersion"],
                kind=wanted["kind"],
                match_name=wanted["name"],
                namespace=wanted["namespace"],
            )
        )
    rsp.meta.ttl.FromSeconds(out.ttl_seconds)
    for message in out.warnings:
        rsp.results.append(
            fnv1.Result(severity=fnv1.SEVERITY_WARNING, message=message, reason="CannotApply")
        )
    for reason, message in out.notices.items():
        rsp.results.append(
            fnv1.Result(severity=fnv1.SEVERITY_WARNING, message=message, reason=reason)
        )


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """Serves RunFunction for v1 (and, through the SDK's wrapper, v1beta1)."""

    def __init__(
        self,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        debug: bool = False,
    ) -> None:
        self.log = logging.get_logger()
        self.clock = clock
        self.debug = debug

    async def RunFunction(
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext[Any, Any] | None
    ) -> fnv1.RunFunctionResponse:
        start = time.perf_counter() if self.debug else 0.0
        try:
            rsp = self._run(req)
        except Exception as err:
            # grpc logs the traceback, but not which XR raised it.
            self._log(req).error("cannot run", error=f"{type(err).__name__}: {err}")
            raise
        if self.debug:
            ms = round((time.perf_counter() - start) * 1000, 3)
            self._log(req).debug("ran", ms=ms, **_outcome(rsp))
        return rsp

    def _log(self, req: fnv1.RunFunctionRequest) -> "BoundLogger":
        # Read only when a line is written: the hot path never looks at the XR's metadata.
        meta = StructView(req.observed.composite.resource).get("metadata")
        if not isinstance(meta, Mapping):
            meta = {}
        return self.log.bind(
            tag=req.meta.tag, namespace=meta.get("namespace"), name=meta.get("name")
        )

    def _run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        try:
            ws, platform, observed, required = _read(req)
            out = render(ws, platform, observed, self.clock(), required)
        except FieldError as err:
            self._log(req).info("cannot render", path=err.path)
            rsp.results.append(
                fnv1.Result(
                    severity=fnv1.SEVERITY_FATAL,
                    message=str(err),
                    reason="InvalidInput" if err.path.startswith("input") else "InvalidSpec",
                )
            )
            return rsp
        _write(rsp, out)
        if out.requirements and not _supports(req, fnv1.CAPABILITY_REQUIRED_RESOURCES):
            rsp.results.append(
                fnv1.Result(
                    severity=fnv1.SEVERITY_WARNING,
                    message=out.unfetched,
                    reason="RequiredResourcesUnsupported",
                )
            )
        if (unstated := platform.network.unstated_warning) is not None:
            rsp.results.append(
                fnv1.Result(
                    severity=fnv1.SEVERITY_WARNING,
                    message=unstated,
                    reason="SiteAddressesNotStated",
                )
            )
        return rsp


def _outcome(rsp: fnv1.RunFunctionResponse) -> dict[str, Any]:
    """What a call answered, for its debug line."""
    results = [
        f"{fnv1.Severity.Name(r.severity).removeprefix('SEVERITY_')} {r.reason}".rstrip()
        for r in rsp.results
    ]
    if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
        state = "fatal"
    else:
        state = "ready" if rsp.desired.composite.ready == fnv1.READY_TRUE else "not ready"
    return {"resources": len(rsp.desired.resources), "state": state, "results": results}
