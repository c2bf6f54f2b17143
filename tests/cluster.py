"""A simulated cluster: composed objects as the API server and their controllers report them.

The state-machine tests and the plane tests observe what they render through it. Every kind
reaches the status it has in a healthy cluster once it settles: disks cloned, claims bound,
workloads running or stopped as their spec asks, snapshots ready. A provider-kubernetes Object
carries the wrapped object as the provider reports it under `status.atProvider.manifest`, and
a Ready condition from the Object's own readiness query, evaluated with cel-python over that
object: so these tests also exercise the queries the provider will run.
"""

import copy
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any

from celpy import celtypes
from celpy.adapter import json_to_cel

from function.model import Manifest
from function.render import Rendered
from tests.schemas import compile_rule
from tests.support import NAMESPACE

Observed = dict[str, Manifest]


@cache
def _query(text: str) -> Any:
    return compile_rule(text).runner


def cel(query: str, obj: Mapping[str, Any]) -> bool:
    """The provider's verdict: `query` over the wrapped object as observed."""
    result = _query(query).evaluate({"object": json_to_cel(dict(obj))})
    assert isinstance(result, celtypes.BoolType), query
    return bool(result)


def settled(manifest: Manifest) -> dict[str, Any] | None:  # noqa: PLR0911  # one return per kind
    """The status an object reaches in a healthy cluster; None for kinds without one."""
    kind, spec = manifest["kind"], manifest.get("spec", {})
    if kind == "Namespace":
        return {"phase": "Active"}
    if kind == "DataVolume":
        return {"phase": "Succeeded"}
    if kind == "VirtualMachine":
        if spec["runStrategy"] == "Halted":
            return {"printableStatus": "Stopped"}
        return {"printableStatus": "Running", "ready": True}
    if kind == "PersistentVolumeClaim":
        size = spec["resources"]["requests"]["storage"]
        return {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": size}}
    if kind == "StatefulSet":
        # The API server omits zero counts but not `replicas`.
        n = spec["replicas"]
        return {"replicas": n, "readyReplicas": n, "availableReplicas": n} if n else {"replicas": 0}
    if kind == "Sandbox":
        running = spec["operatingMode"] == "Running"
        return {"conditions": [_sandbox_ready(running), _sandbox_suspended(not running)]}
    if kind == "VolumeSnapshot":
        return {"readyToUse": True, "restoreSize": "20Gi", "creationTime": "2026-11-29T11:00:00Z"}
    return None


def _sandbox_ready(ready: bool) -> dict[str, str]:
    if ready:
        return api_condition("Ready", "True", "DependenciesReady")
    return api_condition("Ready", "False", "SandboxSuspended")


def _sandbox_suspended(held: bool) -> dict[str, str]:
    return api_condition("Suspended", str(held), "Suspended" if held else "Running")


def api_condition(kind: str, status: str, reason: str = "") -> dict[str, str]:
    """A condition as a controller writes it."""
    return {
        "type": kind,
        "status": status,
        "reason": reason or kind,
        "message": "",
        "lastTransitionTime": "2026-11-29T11:59:00Z",
    }


def stored(
    manifest: Manifest, status: Mapping[str, Any] | None, *, defaulted: bool = True
) -> Manifest:
    """`manifest` as the API server returns it, with `status` (None: none yet).

    `defaulted=False` leaves out the API server's defaults: a wrapped object is reported as
    rendered, which the plane tests' expected claims pin.
    """
    obj = copy.deepcopy(dict(manifest))
    if defaulted and obj["kind"] == "PersistentVolumeClaim":
        obj["spec"].setdefault("volumeMode", "Filesystem")
    if status is not None:
        obj["status"] = dict(status)
    return obj


def seen(obj: Manifest, status: Mapping[str, Any] | None, *, applied: bool = True) -> Manifest:
    """An Object as provider-kubernetes reports it once it has applied the wrapped object.

    Ready follows the Object's readiness policy over the wrapped object; `applied=False` is an
    Object whose apply failed, never Ready.
    """
    observed = stored(obj["spec"]["forProvider"]["manifest"], status, defaulted=False)
    readiness = obj["spec"]["readiness"]
    ready = applied and (
        readiness["policy"] == "SuccessfulCreate" or cel(readiness["celQuery"], observed)
    )
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "Available" if ready else "Unavailable",
        "lastTransitionTime": "2026-11-29T11:59:00Z",
    }
    return {
        **obj,
        "metadata": {**obj["metadata"], "namespace": NAMESPACE},
        "status": {"atProvider": {"manifest": observed}, "conditions": [condition]},
    }


def applied(out: Rendered, *, hold: Iterable[str] = (), failed: Iterable[str] = ()) -> Observed:
    """What Crossplane observes after applying `out`: every resource but a ComputePlane's Object.

    A plane's state is the world's, which each test states. Objects in `hold` exist but their
    wrapped object has no status yet; those in `failed` could not be applied.
    """
    hold, failed = set(hold), set(failed)
    observed: Observed = {}
    for key, m in out.resources.items():
        if m["kind"] == "Object":
            inner = m["spec"]["forProvider"]["manifest"]
            if inner["kind"] == "ComputePlane":
                continue
            inner = m["spec"]["forProvider"]["manifest"]
            status = None if key in hold else settled(inner)
            observed[key] = seen(m, status, applied=key not in failed)
            continue
        status = settled(m)
        if m["kind"] == "Usage":
            # Crossplane's usage controller, once it has labelled what is used.
            status = {"conditions": [{"type": "Ready", "status": "True", "reason": "Available"}]}
        observed[key] = stored({**m, "metadata": {**m["metadata"], "namespace": NAMESPACE}}, status)
    return observed


SETTLE_STEPS = 8  # renders before a sandbox that keeps changing fails its test


def steps(
    step: Callable[[Observed], Rendered],
    observed: Observed | None = None,
    world: Observed | None = None,
) -> list[tuple[Rendered, Observed]]:
    """Each render with what it observed, from `observed` until applying it changes nothing.

    `step` renders from what Crossplane observes: what the last render composed, as `applied`
    reports it, beside `world` (what the test states of the cluster, such as a ComputePlane).
    """
    now, world = dict(observed or {}), dict(world or {})
    seen: list[tuple[Rendered, Observed]] = []
    for _ in range(SETTLE_STEPS):
        out = step({**now, **world})
        seen.append((out, {**now, **world}))
        after = applied(out)
        if after == now:
            return seen
        now = after
    raise AssertionError(f"the sandbox never settled in {SETTLE_STEPS} renders")


def converge(
    step: Callable[[Observed], Rendered],
    observed: Observed | None = None,
    world: Observed | None = None,
) -> tuple[Rendered, Observed]:
    """The settled sandbox: its last render and what that render observed (see `steps`)."""
    return steps(step, observed, world)[-1]
