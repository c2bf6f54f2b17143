"""What may still exist while a WorkspaceSandbox is deleted: every moment of its deletion.

Deleting the XR deletes everything it composed at once, as Kubernetes' garbage collector does,
in no particular order, except where something holds a deletion back. For a ComputePlane
placement, what matters is which policies certainly still stand while the sandbox's pod may
still run. `deletion` enumerates every moment a deletion can pass through, under these rules:

* Each composed resource is present (no delete accepted yet), terminating (accepted; what it
  carries may already be partly gone) or gone.
* A Usage (`protection.crossplane.io`) refuses the delete of the resource its `of` names while
  the resource its `by` names is not gone; a composed Usage itself stays until then (Crossplane
  v2.3, `internal/controller/protection/usage`).
* A provider-kubernetes Object whose managementPolicies allow Delete (`*`, the default, or
  `Delete`) deletes what it carries, and is gone only once that is. One that does not leaves
  what it carries where it is.
* Deleting a namespace deletes what is in it in no particular order, and the namespace is gone
  only once every pod in it is. So what is in a terminating namespace may be gone, and a
  namespace whose Object is gone holds no pod.
* The workload's Object deletes its StatefulSet or Sandbox with background propagation: the
  pod may outlive it, until its namespace is gone.
* A ComputePlane the XR composed (through the Object that carries it, which is gone only once
  the plane is) is torn down as a whole: its control plane and workers go,
  and nothing inside its cluster is deleted one by one (the workers' Cilium keeps enforcing
  what it has). Once it is gone, nothing in it, the pod included, outlives it.
* A policy composed directly (on the host) stands while present; deleting it is immediate.

`deletion(resources)` takes what a render composed (composition-resource name -> manifest).
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import product
from typing import Any, Literal

from function.compose.cilium_policy import CCNP, CNP

State = Literal["present", "terminating", "gone"]
_STATES: tuple[State, ...] = ("present", "terminating", "gone")
_OBJECT = ("kubernetes.m.crossplane.io/v1alpha1", "Object")
_USAGE = ("protection.crossplane.io/v1beta1", "Usage")
_POLICIES = frozenset({CNP, CCNP, "NetworkPolicy"})
_WORKLOADS = frozenset({"StatefulSet", "Sandbox"})

Manifest = Mapping[str, Any]


@dataclass(frozen=True)
class Moment:
    """One moment of a deletion, as far as isolation is concerned."""

    states: Mapping[str, State]
    pod: bool
    """Whether the sandbox's pod may still run."""
    inside: tuple[Manifest, ...]
    """The policies that certainly still stand inside the plane."""
    host: tuple[Manifest, ...]
    """The policies composed on the host that certainly still stand."""

    def holding(self) -> tuple[str, ...]:
        """The policies inside and on the host, by name: what this moment is judged by."""
        names = [f"{m['kind']} {m['metadata']['name']}" for m in (*self.inside, *self.host)]
        return tuple(sorted(names))


def _kind(manifest: Manifest) -> tuple[str, str]:
    return str(manifest.get("apiVersion", "")), str(manifest.get("kind", ""))


def _carried(manifest: Manifest) -> Manifest | None:
    if _kind(manifest) != _OBJECT:
        return None
    found = manifest.get("spec", {}).get("forProvider", {}).get("manifest")
    return found if isinstance(found, Mapping) else None


def _deletes(manifest: Manifest) -> bool:
    policies = manifest.get("spec", {}).get("managementPolicies") or ["*"]
    return "*" in policies or "Delete" in policies


@dataclass(frozen=True)
class _Plan:
    """The composed resources that matter, and the Usages between them."""

    tracked: tuple[str, ...]
    waits: tuple[tuple[str, str], ...]  # (used, user): `used` stays while `user` is not gone
    namespace: str | None  # the Object carrying the sandbox's namespace in the plane
    plane: str | None  # a ComputePlane the XR composed (the Object carrying it)


def _plan(resources: Mapping[str, Manifest]) -> _Plan:
    by_name: dict[tuple[Any, ...], str] = {
        (*_kind(m), m.get("metadata", {}).get("name")): key
        for key, m in resources.items()
        if _kind(m) != _USAGE
    }
    waits: list[tuple[str, str]] = []
    for manifest in resources.values():
        if _kind(manifest) != _USAGE:
            continue
        spec = manifest["spec"]
        ends = [
            by_name.get((ref.get("apiVersion"), ref.get("kind"), ref["resourceRef"]["name"]))
            for ref in (spec["of"], spec.get("by") or {"resourceRef": {}})
        ]
        used, user = ends
        if used is not None and user is not None:
            waits.append((used, user))
    namespace = plane = None
    tracked: list[str] = []
    for key, manifest in resources.items():
        carried = _carried(manifest)
        kind = (carried or manifest).get("kind")
        if carried is not None and kind == "Namespace":
            namespace = key
        if kind == "ComputePlane":
            plane = key
        if kind in _POLICIES | _WORKLOADS | {"Namespace", "ComputePlane"}:
            tracked.append(key)
    tracked += [k for pair in waits for k in pair if k not in tracked]
    return _Plan(tuple(sorted(tracked)), tuple(waits), namespace, plane)


def _assignments(plan: _Plan) -> Iterator[dict[str, State]]:
    for states in product(_STATES, repeat=len(plan.tracked)):
        state = dict(zip(plan.tracked, states, strict=True))
        if all(state[used] == "present" or state[user] == "gone" for used, user in plan.waits):
            yield state


def _moment(resources: Mapping[str, Manifest], plan: _Plan, state: dict[str, State]) -> Moment:
    plane_alive = plan.plane is None or state[plan.plane] != "gone"
    namespace = resources[plan.namespace] if plan.namespace is not None else None
    if plan.namespace is None or namespace is None:
        namespace_intact = namespace_alive = True
    else:
        keeps = not _deletes(namespace)
        namespace_intact = keeps or state[plan.namespace] == "present"
        namespace_alive = keeps or state[plan.namespace] != "gone"
    inside: list[Manifest] = []
    host: list[Manifest] = []
    for key in plan.tracked:
        manifest = resources[key]
        carried = _carried(manifest)
        if carried is None:
            if manifest.get("kind") in _POLICIES and state[key] == "present":
                host.append(manifest)
            continue
        if carried.get("kind") not in _POLICIES:
            continue
        stands = state[key] == "present" or not _deletes(manifest)
        contained = namespace_intact or not carried.get("metadata", {}).get("namespace")
        if stands and contained and plane_alive:
            inside.append(carried)
    pod = plane_alive and namespace_alive
    return Moment(dict(state), pod, tuple(inside), tuple(host))


def deletion(resources: Mapping[str, Manifest]) -> tuple[Moment, ...]:
    """Every distinct moment a deletion of these composed resources can pass through."""
    plan = _plan(resources)
    seen: dict[tuple[bool, tuple[str, ...]], Moment] = {}
    for state in _assignments(plan):
        moment = _moment(resources, plan, state)
        seen.setdefault((moment.pod, moment.holding()), moment)
    return tuple(seen.values())


def outlives(resources: Mapping[str, Manifest], survivor: str, lost: str) -> bool:
    """Whether `survivor` can still exist once the delete of `lost` has been accepted."""
    plan = _plan(resources)
    if survivor not in plan.tracked or lost not in plan.tracked:
        raise LookupError(f"{survivor!r} or {lost!r} is not a tracked composed resource")
    return any(s[survivor] != "gone" and s[lost] != "present" for s in _assignments(plan))
