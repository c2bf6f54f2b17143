"""Files in, a RunFunctionRequest out; a response out as `crossplane render` prints it.

The `render` command runs the same FunctionRunner in-process that `serve` puts behind gRPC, so
what it prints is what Crossplane would apply.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.fn import FunctionRunner, to_dict

RESOURCE_NAME = "crossplane.io/composition-resource-name"
INPUT_KIND = ("sandbox.fn.cozystack.io/v1beta1", "SandboxPlatform")
# Crossplane stops after a few rounds of changing requirements; so do we.
_MAX_ROUNDS = 5


class InputError(Exception):
    """A file given to `render` is missing, unreadable or of the wrong shape."""


def _documents(path: Path) -> list[dict[str, Any]]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (OSError, yaml.YAMLError) as err:
        raise InputError(f"{path}: {err}") from None
    for d in docs:
        if not isinstance(d, dict) or "apiVersion" not in d or "kind" not in d:
            raise InputError(f"{path}: every document must be a Kubernetes object")
    return docs


def _step(composition: Path) -> tuple[str, dict[str, Any]]:
    for doc in _documents(composition):
        for step in (doc.get("spec") or {}).get("pipeline") or ():
            step_input = step.get("input") or {}
            if (step_input.get("apiVersion"), step_input.get("kind")) == INPUT_KIND:
                return str(step.get("step", "")), step_input
    raise InputError(f"{composition}: no pipeline step has a SandboxPlatform input")


def _same_object(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def ident(o: dict[str, Any]) -> tuple[Any, ...]:
        meta = o.get("metadata") or {}
        return o.get("apiVersion"), o.get("kind"), meta.get("name"), meta.get("namespace")

    return ident(a) == ident(b)


@dataclass(frozen=True)
class Offline:
    req: fnv1.RunFunctionRequest
    step: str
    pool: list[dict[str, Any]]
    """Required resources on offer, matched against what the function asks for."""


def request(
    xr_path: Path, composition: Path, observed: Path | None, required: Path | None
) -> Offline:
    xrs = _documents(xr_path)
    if len(xrs) != 1:
        raise InputError(f"{xr_path}: expected exactly one composite resource")
    xr = xrs[0]
    step, step_input = _step(composition)
    req = fnv1.RunFunctionRequest(
        meta=fnv1.RequestMeta(tag="render"),
        input=resource.dict_to_struct(step_input),
        observed=fnv1.State(composite=fnv1.Resource(resource=resource.dict_to_struct(xr))),
    )
    for doc in _documents(observed) if observed else ():
        if _same_object(doc, xr):
            req.observed.composite.resource.update(doc)
            continue
        name = ((doc.get("metadata") or {}).get("annotations") or {}).get(RESOURCE_NAME)
        if not name:
            raise InputError(
                f"{observed}: a composed resource lacks the {RESOURCE_NAME} annotation"
            )
        req.observed.resources[name].resource.update(doc)
    return Offline(req, step, _documents(required) if required else [])


def _matches(selector: fnv1.ResourceSelector, doc: dict[str, Any]) -> bool:
    meta = doc.get("metadata") or {}
    if (doc.get("apiVersion"), doc.get("kind")) != (selector.api_version, selector.kind):
        return False
    if selector.HasField("namespace") and meta.get("namespace") != selector.namespace:
        return False
    if selector.WhichOneof("match") == "match_name":
        return bool(meta.get("name") == selector.match_name)
    labels = meta.get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.match_labels.labels.items())


async def run(runner: FunctionRunner, offline: Offline) -> fnv1.RunFunctionResponse:
    """Call the function until what it requires stops changing, as Crossplane does."""
    req = offline.req
    for _ in range(_MAX_ROUNDS):
        rsp = await runner.RunFunction(req, None)
        changed = False
        for key, selector in sorted(rsp.requirements.resources.items()):
            found = fnv1.Resources(
                items=[
                    fnv1.Resource(resource=resource.dict_to_struct(d))
                    for d in offline.pool
                    if _matches(selector, d)
                ]
            )
            if key not in req.required_resources or req.required_resources[key] != found:
                req.required_resources[key].CopyFrom(found)
                changed = True
        if not changed:
            return rsp
    return rsp


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def fatal(rsp: fnv1.RunFunctionResponse) -> str | None:
    for r in rsp.results:
        if r.severity == fnv1.SEVERITY_FATAL:
            return r.message
    return None


_CONDITION_STATUS = {
    fnv1.STATUS_CONDITION_TRUE: "True",
    fnv1.STATUS_CONDITION_FALSE: "False",
    fnv1.STATUS_CONDITION_UNKNOWN: "Unknown",
}


def stream(
    req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, step: str, *, include_results: bool
) -> str:
    """The XR with the status the function set, then each composed resource, then results."""
    xr = _plain(to_dict(req.observed.composite.resource))
    meta = xr.get("metadata") or {}
    out: list[dict[str, Any]] = []
    if fatal(rsp) is None:
        status = {
            **(xr.get("status") or {}),
            **_plain(to_dict(rsp.desired.composite.resource)).get("status", {}),
        }
        conditions = [
            {
                "type": c.type,
                "status": _CONDITION_STATUS[c.status],
                "reason": c.reason,
                "message": c.message,
            }
            for c in rsp.conditions
        ]
        if conditions:
            status["conditions"] = conditions
        out.append({**xr, "status": status})
        owner = {
            "apiVersion": xr.get("apiVersion"),
            "kind": xr.get("kind"),
            "name": meta.get("name"),
            "uid": meta.get("uid", ""),
            "controller": True,
            "blockOwnerDeletion": True,
        }
        for name in sorted(rsp.desired.resources):
            obj = _plain(to_dict(rsp.desired.resources[name].resource))
            m = obj.setdefault("metadata", {})
            if meta.get("namespace"):
                m["namespace"] = meta["namespace"]
            m.setdefault("annotations", {})[RESOURCE_NAME] = name
            m.setdefault("labels", {})["crossplane.io/composite"] = meta.get("name")
            m["ownerReferences"] = [owner]
            out.append(obj)
    if include_results:
        for r in rsp.results:
            result = {
                "apiVersion": "render.crossplane.io/v1beta1",
                "kind": "Result",
                "step": step,
                "severity": fnv1.Severity.Name(r.severity),
                "message": r.message,
            }
            if r.HasField("reason"):
                result["reason"] = r.reason
            out.append(result)
    return yaml.dump_all(out, Dumper=_Dumper, sort_keys=True, explicit_start=True) if out else ""


class _Dumper(yaml.SafeDumper):
    """Prints multi-line strings (cloud-init user data) as readable literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)
