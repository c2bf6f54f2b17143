"""ComputePlane placements: from a missing plane to a running, suspended and grown sandbox.

A simulated provider-kubernetes stands in for the plane. Each composed Object is observed as
the provider reports it: the wrapped object as it exists inside the plane under
`status.atProvider.manifest`, and a Ready condition derived from the Object's own readiness
query, evaluated with cel-python over that object. So the staging tests also exercise the
queries the provider will run.
"""

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

import jsonschema
import pytest
from celpy import celtypes
from celpy.adapter import json_to_cel
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import given, settings
from hypothesis import strategies as st

from function.compose.guard import guard_policy
from function.compose.kubernetes_object import (
    CEL_READY,
    GROWN,
    STATEFULSET_RUNNING,
    STATEFULSET_STOPPED,
    condition_query,
)
from function.compose.names import (
    EGRESS_LABEL,
    WORKSPACE_LABEL,
    new_identity,
    object_name,
    plane_name,
    plane_namespace,
    provider_config_name,
    service_account_name,
    snapshot_name,
    workspace_volume_name,
)
from function.errors import FieldError
from function.fn import FunctionRunner
from function.model import Manifest
from function.model.platform import SandboxPlatform
from function.policy import (
    Environment,
    Flow,
    cozystack_baseline,
    cozystack_environment,
    deletion,
    evaluate,
    outlives,
)
from function.policy.environment import PLANE_CLUSTER
from function.render import Rendered, render
from tests.pod_security import all_violations
from tests.policy.test_isolation import ALICE_POD, POD_TABLE
from tests.schemas import _compile_rule, crds_root, validate
from tests.strategies import allowlists, specs, xr_names
from tests.support import (
    AGENT_IMAGE,
    AGENT_PLATFORM,
    NAMESPACE,
    NOW,
    PLATFORM,
    owned,
    platform,
    platform_input,
    request,
    results,
    workspace,
)

Observed = dict[str, Manifest]
Required = dict[str, list[Manifest]]

OBJECT_API = "kubernetes.m.crossplane.io/v1alpha1"
PLANE_API = "apps.cozystack.io/v1alpha1"
# The names a new sandbox alice-api gets (they don't depend on its spec).
_ALICE = workspace()
IN_PLANE = plane_namespace(_ALICE)  # the sandbox's own namespace inside the plane
IDENTITY = new_identity("alice-api")
CLAIM = workspace_volume_name(_ALICE)
PROVIDER_CONFIG = provider_config_name(_ALICE)
LABELS = {
    "app.kubernetes.io/managed-by": "function-workspace-sandbox",
    "sandbox.cozystack.io/workspace": IDENTITY,
}
DEDICATED_MANAGEMENT = ["Observe", "Create", "Update"]
STAGE_ONE = ["plane-access", "plane-guard", "plane-namespace"]
STAGE_TWO = [
    "cilium-policy",
    "network-policy",
    "plane-limits",
    "plane-quota",
    "service",
    "service-account",
    "workspace-claim",
]


def _with_agent_sandbox() -> SandboxPlatform:
    presets = platform_input()["presets"]
    changed = {
        name: {
            **presets[name],
            "computePlane": {**presets[name]["computePlane"], "agentSandbox": True},
        }
        for name in ("shared-plane", "dedicated-plane")
    }
    return platform(presets={**presets, **changed})


AGENT_SANDBOX = _with_agent_sandbox()


@dataclass(frozen=True)
class Placement:
    preset: str
    plane: str
    """The ComputePlane's name: the tenant's shared one, or the one composed per sandbox."""
    platform: SandboxPlatform = field(compare=False)  # pydantic models with dicts don't hash
    workload: str = "statefulset"
    """The key of the workload: a StatefulSet, or an agent-sandbox Sandbox."""

    def __repr__(self) -> str:
        return f"Placement({self.preset}, {self.workload})"

    @property
    def dedicated(self) -> bool:
        return self.preset == "dedicated-plane"

    @property
    def workload_kind(self) -> str:
        return "StatefulSet" if self.workload == "statefulset" else "Sandbox"

    @property
    def secret(self) -> str:
        return f"{self.plane}-cluster-admin-kubeconfig"

    @property
    def runtime(self) -> str:
        return "container" if self.dedicated else "gvisor"

    @property
    def placement(self) -> str:
        return "DedicatedComputePlane" if self.dedicated else "SharedComputePlane"

    @property
    def own(self) -> list[str]:
        """What the XR composes outside the plane whatever the plane's state."""
        if self.dedicated:
            # The plane's workers keep their policy while the plane exists.
            return ["compute-plane", "plane-workers", "usage-plane-workers"]
        return ["plane-workers"]

    @property
    def stage_one(self) -> list[str]:
        """The first placement: the workers' policy stays while the namespace's Object does."""
        return STAGE_ONE if self.dedicated else [*STAGE_ONE, "usage-plane-workers"]

    @property
    def with_workload(self) -> list[str]:
        """The workload, and in a shared plane what must outlive its Object."""
        if self.dedicated:
            return [self.workload]
        used = ["cilium-policy", "network-policy", "plane-namespace"]
        return [self.workload, *(f"usage-{k}" for k in used)]


SHARED = Placement("shared-plane", "computeplane", PLATFORM, "statefulset")
DEDICATED = Placement("dedicated-plane", plane_name(workspace()), PLATFORM, "statefulset")
PLACEMENTS = [
    pytest.param(SHARED, id="shared-statefulset"),
    pytest.param(DEDICATED, id="dedicated-statefulset"),
    pytest.param(replace(SHARED, platform=AGENT_SANDBOX, workload="sandbox"), id="shared-sandbox"),
    pytest.param(
        replace(DEDICATED, platform=AGENT_SANDBOX, workload="sandbox"), id="dedicated-sandbox"
    ),
]
BOTH = [pytest.param(SHARED, id="shared"), pytest.param(DEDICATED, id="dedicated")]


# --- The world outside the function: the plane, its Secret, the provider --------------------


def compute_plane(p: Placement, ready: Mapping[str, str] | None) -> Manifest:
    """The ComputePlane as observed, with `ready` as its Ready condition (None: none yet)."""
    status = {"conditions": [{"type": "Ready", **ready}]} if ready is not None else {}
    return {
        "apiVersion": PLANE_API,
        "kind": "ComputePlane",
        "metadata": {"name": p.plane, "namespace": NAMESPACE},
        "status": status,
    }


READY = {"status": "True", "reason": "ReconciliationSucceeded"}


def plane_world(
    p: Placement,
    plane: Mapping[str, str] | None = READY,
    *,
    exists: bool = True,
    secret: bool = True,
    name: str = "alice-api",
) -> tuple[Observed, Required]:
    """What Crossplane observes of a dedicated plane and answers to the requirements.

    A dedicated plane is a composed resource, so it is observed; a shared one is the tenant's
    and only ever a required resource. The Secret is answered by name, without data.
    """
    if p.dedicated:
        p = replace(p, plane=plane_name(workspace(name=name)))
    found = [compute_plane(p, plane)] if exists else []
    kubeconfig: Manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": p.secret, "namespace": NAMESPACE},
    }
    required: Required = {"plane-kubeconfig": [kubeconfig] if secret else []}
    if p.dedicated:
        return {"compute-plane": found[0]} if found else {}, required
    return {}, {**required, "compute-plane": found}


@cache
def _query(text: str) -> Any:
    return _compile_rule(text).runner


def cel(query: str, obj: Mapping[str, Any]) -> bool:
    """The provider's verdict: `query` over the wrapped object as observed."""
    result = _query(query).evaluate({"object": json_to_cel(dict(obj))})
    assert isinstance(result, celtypes.BoolType), query
    return bool(result)


def settled(manifest: Manifest) -> dict[str, Any] | None:
    """The status a wrapped object reaches in a healthy plane; None for kinds without one."""
    kind, spec = manifest["kind"], manifest.get("spec", {})
    if kind == "Namespace":
        return {"phase": "Active"}
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
        return _condition("Ready", "True", "DependenciesReady")
    return _condition("Ready", "False", "SandboxSuspended")


def _sandbox_suspended(held: bool) -> dict[str, str]:
    return _condition("Suspended", str(held), "Suspended" if held else "Running")


def _condition(kind: str, status: str, reason: str = "") -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "reason": reason or kind,
        "message": "",
        "lastTransitionTime": "2026-11-29T11:59:00Z",
    }


def seen(obj: Manifest, status: Mapping[str, Any] | None, *, applied: bool = True) -> Manifest:
    """An Object as provider-kubernetes reports it once it has applied the wrapped object.

    Ready follows the Object's readiness policy over the wrapped object; `applied=False` is an
    Object whose apply failed, never Ready.
    """
    inner = obj["spec"]["forProvider"]["manifest"]
    observed = {**inner, "status": dict(status)} if status is not None else dict(inner)
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


def provide(out: Rendered, *, hold: Iterable[str] = (), failed: Iterable[str] = ()) -> Observed:
    """What Crossplane observes after applying `out`: every resource but the plane itself.

    Objects in `hold` exist but their wrapped object has no status yet; those in `failed`
    could not be applied.
    """
    hold, failed = set(hold), set(failed)
    observed: Observed = {}
    for key, m in out.resources.items():
        if m["kind"] == "ComputePlane":
            continue  # the plane's state is the world's: plane_world()
        if m["kind"] != "Object":
            observed[key] = {**m, "metadata": {**m["metadata"], "namespace": NAMESPACE}}
            if m["kind"] == "Usage":
                # Crossplane's usage controller, once it has labelled what is used.
                available = {"type": "Ready", "status": "True", "reason": "Available"}
                observed[key]["status"] = {"conditions": [available]}
            continue
        inner = m["spec"]["forProvider"]["manifest"]
        status = None if key in hold else settled(inner)
        observed[key] = seen(m, status, applied=key not in failed)
    return observed


def run(
    p: Placement,
    spec: Mapping[str, Any] | None = None,
    observed: Observed | None = None,
    required: Required | None = None,
    name: str = "alice-api",
) -> Rendered:
    ws = workspace({"preset": p.preset, **(spec or {})}, name)
    return render(ws, p.platform, owned(observed, name), NOW, required)


def converge(
    p: Placement,
    spec: Mapping[str, Any] | None = None,
    observed: Observed | None = None,
    name: str = "alice-api",
) -> tuple[Rendered, Observed]:
    """Render and apply until nothing changes, with the plane ready: the settled sandbox."""
    world, required = plane_world(p, name=name)
    now = dict(observed or {})
    for _ in range(8):
        out = run(p, spec, {**now, **world}, required, name)
        after = provide(out)
        if after == now:
            return out, {**now, **world}
        now = after
    raise AssertionError("the placement never settled")


def inner(out: Rendered, key: str) -> Manifest:
    manifest: Manifest = out.resources[key]["spec"]["forProvider"]["manifest"]
    return manifest


def provisioned(out: Rendered) -> tuple[str, str, str]:
    c = out.conditions[0]
    assert c.type == "Provisioned"
    return c.status, c.reason, c.message


def pod_template(manifest: Manifest) -> Manifest:
    """A StatefulSet's or a Sandbox's pod template."""
    template: Manifest = manifest["spec"][
        "template" if manifest["kind"] == "StatefulSet" else "podTemplate"
    ]
    return template


def pod_spec(manifest: Manifest) -> Manifest:
    spec: Manifest = pod_template(manifest)["spec"]
    return spec


def expected_violations(p: Placement) -> list[str]:
    # Runtime `container` is for dedicated planes only, whose own VMs isolate the pod: it runs
    # with the plane's default runtime, so it has no runtime class to name.
    return ["Runtime Class: spec.runtimeClassName must be set"] if p.runtime == "container" else []


# --- 1. Every state of both placements -------------------------------------------------------


def _status(p: Placement, phase: str, **extra: Any) -> dict[str, Any]:
    return {
        "phase": phase,
        "preset": p.preset,
        "runtime": p.runtime,
        "placement": p.placement,
        "snapshots": [],
        "computePlane": p.plane,
        **extra,
    }


def asked(out: Rendered) -> dict[str, dict[str, str]]:
    """What the render requires besides the look-ups of the names it is about to take."""
    return {k: v for k, v in out.requirements.items() if not k.startswith("existing-")}


def _requirements(p: Placement) -> dict[str, dict[str, str]]:
    secret = {"apiVersion": "v1", "kind": "Secret", "name": p.secret, "namespace": NAMESPACE}
    if p.dedicated:
        return {"plane-kubeconfig": secret}
    plane = {"apiVersion": PLANE_API, "kind": "ComputePlane", "name": p.plane}
    return {"plane-kubeconfig": secret, "compute-plane": {**plane, "namespace": NAMESPACE}}


@pytest.mark.parametrize(
    ("p", "message"),
    [
        pytest.param(
            SHARED,
            "ComputePlane 'computeplane' does not exist in namespace 'tenant-acme'; preset "
            "'shared-plane' places sandboxes into it, so create it first",
            id="shared-requirement-answered-empty",
        ),
        pytest.param(
            DEDICATED,
            f"waiting for ComputePlane {DEDICATED.plane!r} to be created",
            id="dedicated-not-observed-yet",
        ),
    ],
)
def test_a_missing_plane_gets_nothing_placed_into_it(p: Placement, message: str) -> None:
    observed, required = plane_world(p, exists=False)
    out = run(p, {}, observed, required)
    assert sorted(out.resources) == p.own
    assert out.status == _status(p, "Pending")
    assert provisioned(out) == ("False", "WaitingForComputePlane", message)
    assert asked(out) == _requirements(p)
    assert out.composite_ready is False
    # Crossplane's first call carries no required resources at all: the same answer.
    assert run(p, {}, observed).resources == out.resources


def test_a_dedicated_plane_is_composed_from_the_preset() -> None:
    out = run(DEDICATED)
    assert out.resources["compute-plane"] == {
        "apiVersion": PLANE_API,
        "kind": "ComputePlane",
        "metadata": {"name": DEDICATED.plane, "labels": LABELS},
        "spec": {
            "nodeGroups": {
                "md0": {
                    "minReplicas": 1,
                    "maxReplicas": 1,
                    "instanceType": "u1.xlarge",
                    "diskSize": "40Gi",
                    "roles": ["ingress-nginx"],
                    "storageClass": "replicated",
                }
            }
        },
    }
    assert out.ready == {
        "compute-plane": False,
        "plane-workers": False,
        "usage-plane-workers": False,
    }


@pytest.mark.parametrize("p", BOTH)
@pytest.mark.parametrize(
    ("condition", "why"),
    [
        pytest.param(
            {"status": "False", "reason": "Reconciling", "message": "HelmRelease is installing"},
            "HelmRelease is installing",
            id="its-message",
        ),
        pytest.param({"status": "False", "reason": "Reconciling"}, "Reconciling", id="its-reason"),
        pytest.param({"status": "Unknown"}, "not reported yet", id="unknown"),
        pytest.param(None, "not reported yet", id="no-condition"),
    ],
)
def test_an_unready_plane_gets_nothing_placed_into_it(
    p: Placement, condition: dict[str, str] | None, why: str
) -> None:
    observed, required = plane_world(p, condition)
    out = run(p, {}, observed, required)
    assert sorted(out.resources) == p.own
    assert out.status == _status(p, "Pending")
    message = f"waiting for ComputePlane {p.plane!r} to be ready: {why}"
    assert provisioned(out) == ("False", "WaitingForComputePlane", message)
    assert asked(out) == _requirements(p)


@pytest.mark.parametrize("p", BOTH)
def test_a_ready_plane_without_its_kubeconfig_gets_nothing_placed(p: Placement) -> None:
    observed, required = plane_world(p, secret=False)
    out = run(p, {}, observed, required)
    assert sorted(out.resources) == p.own
    message = f"waiting for ComputePlane {p.plane!r}'s kubeconfig Secret {p.secret!r}"
    assert provisioned(out) == ("False", "WaitingForComputePlane", message)
    assert out.status["phase"] == "Pending"


@pytest.mark.parametrize("p", BOTH)
def test_a_ready_plane_gets_its_access_and_the_namespace_first(p: Placement) -> None:
    observed, required = plane_world(p)
    out = run(p, {}, observed, required)
    assert sorted(out.resources) == sorted(p.own + p.stage_one)
    assert out.resources["plane-access"] == {
        "apiVersion": OBJECT_API,
        "kind": "ProviderConfig",
        "metadata": {
            "name": PROVIDER_CONFIG,
            "labels": LABELS,
            # The plane it was placed in, which it never leaves.
            "annotations": {"sandbox.cozystack.io/compute-plane": p.plane},
        },
        "spec": {
            "credentials": {
                "source": "Secret",
                "secretRef": {"namespace": NAMESPACE, "name": p.secret, "key": "super-admin.svc"},
            }
        },
    }
    management = {"managementPolicies": DEDICATED_MANAGEMENT} if p.dedicated else {}
    assert out.resources["plane-namespace"] == {
        "apiVersion": OBJECT_API,
        "kind": "Object",
        "metadata": {"name": object_name(_ALICE, "plane-namespace"), "labels": LABELS},
        "spec": {
            "forProvider": {
                "manifest": {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": IN_PLANE,
                        "labels": {
                            **LABELS,
                            "pod-security.kubernetes.io/enforce": "restricted",
                            "pod-security.kubernetes.io/audit": "restricted",
                            "pod-security.kubernetes.io/warn": "restricted",
                        },
                    },
                }
            },
            "providerConfigRef": {"kind": "ProviderConfig", "name": PROVIDER_CONFIG},
            "readiness": {
                "policy": "DeriveFromCelQuery",
                "celQuery": "has(object.status) && object.status.phase == 'Active'",
            },
            **management,
        },
    }
    assert out.ready == dict.fromkeys(p.own + p.stage_one, False) | (
        {"compute-plane": True} if p.dedicated else {}
    )
    assert out.status == _status(p, "Provisioning")


def _after(p: Placement, spec: Mapping[str, Any], steps: int, **provider: Any) -> Rendered:
    """Render, apply and observe `steps` times, the last observation shaped by `provider`."""
    world, required = plane_world(p)
    observed: Observed = {}
    for i in range(steps + 1):
        out = run(p, spec, {**observed, **world}, required)
        observed = provide(out, **(provider if i == steps - 1 else {}))
    return out


@pytest.mark.parametrize("p", PLACEMENTS)
def test_an_unready_namespace_holds_everything_else_back(p: Placement) -> None:
    out = _after(p, {}, 1, hold=["plane-namespace"])
    assert sorted(out.resources) == sorted(p.own + p.stage_one)


@pytest.mark.parametrize("p", PLACEMENTS)
def test_a_ready_namespace_lets_policies_quota_and_claim_in(p: Placement) -> None:
    out = _after(p, {}, 1)
    assert sorted(out.resources) == sorted(p.own + p.stage_one + STAGE_TWO)
    namespaces = {inner(out, k)["metadata"].get("namespace") for k in STAGE_TWO}
    assert namespaces == {IN_PLANE}
    assert out.status["phase"] == "Provisioning"


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize(
    ("steps", "provider", "waiting"),
    [
        pytest.param(
            0, {}, ["plane-guard", "plane-namespace", "plane-workers"], id="nothing-observed"
        ),
        pytest.param(1, {"hold": ["plane-namespace"]}, ["plane-namespace"], id="namespace-unready"),
        pytest.param(1, {}, STAGE_TWO, id="stage-two-not-observed"),
        pytest.param(
            2,
            {"failed": ["cilium-policy", "plane-quota"]},
            ["cilium-policy", "plane-quota"],
            id="stage-two-partly-unready",
        ),
    ],
)
def test_placing_says_what_it_waits_for(
    p: Placement, steps: int, provider: dict[str, list[str]], waiting: list[str]
) -> None:
    out = _after(p, {}, steps, **provider)
    shown = ", ".join(sorted(waiting))
    message = f"placing the sandbox into ComputePlane {p.plane!r}: waiting for {shown}"
    assert provisioned(out) == ("False", "PlacingInComputePlane", message)
    assert out.status["phase"] == "Provisioning"


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize(
    ("provider", "placed"),
    [
        pytest.param({}, True, id="all-ready"),
        # A WaitForFirstConsumer claim binds only once its pod exists.
        pytest.param({"hold": ["workspace-claim"]}, True, id="claim-pending-is-enough"),
        pytest.param({"hold": ["plane-quota"]}, True, id="quota-without-status-is-applied"),
        pytest.param({"failed": ["cilium-policy"]}, False, id="policy-not-applied"),
        pytest.param({"failed": ["network-policy"]}, False, id="network-policy-not-applied"),
        pytest.param({"failed": ["service-account"]}, False, id="service-account-not-applied"),
        pytest.param({"failed": ["plane-limits"]}, False, id="limits-not-applied"),
    ],
)
def test_the_workload_waits_for_every_part_of_stage_two(
    p: Placement, provider: dict[str, list[str]], placed: bool
) -> None:
    out = _after(p, {}, 2, **provider)
    assert (p.workload in out.resources) is placed
    if not placed:
        assert sorted(out.resources) == sorted(p.own + p.stage_one + STAGE_TWO)


@pytest.mark.parametrize("p", PLACEMENTS)
def test_the_workload_comes_last_and_runs_one_pod(p: Placement) -> None:
    out = _after(p, {}, 2)
    assert sorted(out.resources) == sorted(p.own + p.stage_one + STAGE_TWO + p.with_workload)
    workload = inner(out, p.workload)
    assert workload["metadata"]["namespace"] == IN_PLANE
    assert pod_template(workload)["metadata"]["labels"] == {
        WORKSPACE_LABEL: IDENTITY,
        EGRESS_LABEL: "Internet",
    }
    if p.workload == "statefulset":
        # A StatefulSet's selector can't change: it stays the identity alone.
        assert workload["spec"]["selector"] == {"matchLabels": {WORKSPACE_LABEL: IDENTITY}}
    if p.workload == "statefulset":
        assert workload["spec"]["replicas"] == 1
        assert out.resources[p.workload]["spec"]["readiness"]["celQuery"] == STATEFULSET_RUNNING
    else:
        assert workload["spec"]["operatingMode"] == "Running"
        assert out.resources[p.workload]["spec"]["readiness"]["celQuery"] == condition_query(
            "Ready"
        )
    volumes = pod_spec(workload)["volumes"]
    assert volumes[0] == {
        "name": "workspace",
        "persistentVolumeClaim": {"claimName": CLAIM},
    }
    assert inner(out, "workspace-claim")["metadata"]["name"] == CLAIM


@pytest.mark.parametrize("p", PLACEMENTS)
def test_a_ready_workload_makes_the_sandbox_running(p: Placement) -> None:
    out, _ = converge(p)
    assert out.status == _status(
        p,
        "Running",
        endpoint=f"{IDENTITY}.{IN_PLANE}.svc",
        workspaceVolume=CLAIM,
    )
    assert [(c.type, c.status, c.reason, c.message) for c in out.conditions] == [
        ("Provisioned", "True", "Provisioned", "the pod is running and ready"),
        ("Suspended", "False", "PowerRunning", "spec.power is Running"),
        ("Snapshots", "True", "Ready", "none requested"),
    ]
    assert out.composite_ready is True
    assert set(out.ready.values()) == {True}


@pytest.mark.parametrize("p", PLACEMENTS)
def test_dedicated_plane_objects_never_delete_but_snapshots_still_do(
    p: Placement,
) -> None:
    out, _ = converge(p, {"snapshots": [{"name": "nightly"}]})
    assert "snapshot-nightly" in out.resources
    for key, m in out.resources.items():
        if m["kind"] != "Object":
            continue
        # The guard in the plane is never deleted, in any plane.
        keep = key == "plane-guard" or (p.dedicated and not key.startswith("snapshot-"))
        assert m["spec"].get("managementPolicies") == (DEDICATED_MANAGEMENT if keep else None), key


@pytest.mark.parametrize("p", PLACEMENTS)
def test_a_snapshot_waits_for_the_workspace_claim_then_snapshots_it(p: Placement) -> None:
    spec = {"snapshots": [{"name": "nightly"}]}
    early = _after(p, spec, 2)
    assert p.workload in early.resources
    assert "snapshot-nightly" not in early.resources
    entry = {"name": "nightly", "volumeSnapshot": snapshot_name(_ALICE, "nightly")}
    assert early.status["snapshots"] == [
        {
            **entry,
            "readyToUse": False,
            "state": "Waiting",
            "message": "waiting for the workspace disk to be created",
        }
    ]
    out, _ = converge(p, spec)
    assert inner(out, "snapshot-nightly") == {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": snapshot_name(_ALICE, "nightly"),
            "labels": LABELS,
            "annotations": {"sandbox.cozystack.io/consistency": "Crash"},
            "namespace": IN_PLANE,
        },
        "spec": {
            "volumeSnapshotClassName": "kubevirt",
            "source": {"persistentVolumeClaimName": CLAIM},
        },
    }
    assert out.status["snapshots"] == [
        {
            **entry,
            "readyToUse": True,
            "restoreSize": "20Gi",
            "creationTime": "2026-11-29T11:00:00Z",
            "consistency": "Crash",
            "state": "Ready",
        }
    ]


@pytest.mark.parametrize("p", PLACEMENTS)
def test_suspending_scales_the_pod_away_and_keeps_the_claim(p: Placement) -> None:
    _, running = converge(p)
    world, required = plane_world(p)
    out = run(p, {"power": "Suspended"}, running, required)
    assert sorted(out.resources) == sorted(running)
    if p.workload == "statefulset":
        assert inner(out, "statefulset")["spec"]["replicas"] == 0
        assert out.resources["statefulset"]["spec"]["readiness"]["celQuery"] == STATEFULSET_STOPPED
        stopping = "waiting for the StatefulSet to scale to zero"
    else:
        assert inner(out, "sandbox")["spec"]["operatingMode"] == "Suspended"
        query = out.resources["sandbox"]["spec"]["readiness"]["celQuery"]
        assert query == condition_query("Suspended")
        stopping = "waiting for the pod to terminate (Running)"
    assert inner(out, "workspace-claim") == inner(converge(p)[0], "workspace-claim")
    assert out.status["phase"] == "Suspending"
    assert [(c.type, c.status, c.reason, c.message) for c in out.conditions[:2]] == [
        ("Provisioned", "True", "Provisioned", "the workspace claim is kept"),
        ("Suspended", "False", "Suspending", stopping),
    ]

    stopped = run(p, {"power": "Suspended"}, {**provide(out), **world}, required)
    assert stopped.status == _status(
        p,
        "Suspended",
        endpoint=f"{IDENTITY}.{IN_PLANE}.svc",
        workspaceVolume=CLAIM,
    )
    assert [(c.type, c.status, c.reason, c.message) for c in stopped.conditions[:2]] == [
        ("Provisioned", "True", "Provisioned", "the workspace claim is kept"),
        ("Suspended", "True", "Suspended", "the pod is gone; the workspace is kept"),
    ]
    assert "workspace-claim" in stopped.resources
    assert stopped.composite_ready is False


GONE = {
    "shared-plane": "ComputePlane 'computeplane' does not exist in namespace 'tenant-acme'; preset "
    "'shared-plane' places sandboxes into it, so create it first",
    "dedicated-plane": f"waiting for ComputePlane {DEDICATED.plane!r} to be created",
}


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize(
    ("world", "why"),
    [
        pytest.param(
            {"plane": {"status": "False", "reason": "Upgrading"}},
            "waiting for ComputePlane {plane!r} to be ready: Upgrading",
            id="plane-unready",
        ),
        pytest.param(
            {"secret": False},
            "waiting for ComputePlane {plane!r}'s kubeconfig Secret {secret!r}",
            id="kubeconfig-gone",
        ),
        pytest.param({"exists": False}, "{gone}", id="plane-gone"),
    ],
)
def test_a_plane_that_stops_being_ready_never_shrinks_the_desired_state(
    p: Placement, world: dict[str, Any], why: str
) -> None:
    spec = {"snapshots": [{"name": "nightly"}], "ports": [{"name": "preview", "port": 3000}]}
    settled_out, running = converge(p, spec)
    observed, required = plane_world(p, **world)
    placed = {k: v for k, v in running.items() if k != "compute-plane"}
    out = run(p, spec, {**placed, **observed}, required)
    assert out.resources == settled_out.resources
    assert out.status["phase"] == "Pending"
    message = why.format(plane=p.plane, secret=p.secret, gone=GONE[p.preset])
    assert provisioned(out) == ("False", "WaitingForComputePlane", message)
    assert out.composite_ready is False


@pytest.mark.parametrize("p", PLACEMENTS)
def test_a_larger_disk_grows_the_claim(p: Placement) -> None:
    _, running = converge(p, {"resources": {"disk": "20Gi"}})
    _, required = plane_world(p)
    out = run(p, {"resources": {"disk": "30Gi"}}, running, required)
    assert out.warnings == []
    claim = inner(out, "workspace-claim")
    assert claim == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM, "labels": LABELS, "namespace": IN_PLANE},
        "spec": {
            "resources": {"requests": {"storage": "30Gi"}},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "kubevirt",
        },
    }
    # The quota and limit range make room for it.
    assert inner(out, "plane-quota")["spec"]["hard"]["requests.storage"] == "30Gi"
    assert inner(out, "plane-limits")["spec"]["limits"][1] == {
        "type": "PersistentVolumeClaim",
        "max": {"storage": "30Gi"},
    }
    # Leaving the size out later keeps the grown size.
    _, grown = converge(p, {"resources": {"disk": "30Gi"}}, running)
    kept = run(p, {}, grown, required)
    assert inner(kept, "workspace-claim")["spec"]["resources"] == {"requests": {"storage": "30Gi"}}


SHRUNK = (
    "spec.resources.disk: 25Gi is smaller than the workspace disk already is (30Gi); "
    "disks never shrink"
)


@pytest.mark.parametrize("p", PLACEMENTS)
def test_a_smaller_disk_is_refused(p: Placement) -> None:
    _, running = converge(p, {"resources": {"disk": "30Gi"}})
    _, required = plane_world(p)
    with pytest.raises(FieldError) as err:
        run(p, {"resources": {"disk": "25Gi"}}, running, required)
    assert str(err.value) == SHRUNK


def _required_request(
    composite: Manifest, observed: Observed, required: Required, step_input: Manifest
) -> fnv1.RunFunctionRequest:
    req = request(composite, observed, step_input)
    for name, found in required.items():
        items = req.required_resources[name].items
        for obj in found:
            items.add().resource.update(obj)
    return req


@pytest.mark.parametrize("p", BOTH)
async def test_a_smaller_disk_is_one_fatal_result_at_the_edge(p: Placement) -> None:
    _, running = converge(p, {"resources": {"disk": "30Gi"}})
    _, required = plane_world(p)
    composite = {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": "alice-api", "namespace": NAMESPACE},
        "spec": {"image": "ubuntu-24.04", "preset": p.preset, "resources": {"disk": "25Gi"}},
    }
    req = _required_request(composite, running, required, platform_input())
    rsp = await FunctionRunner(clock=lambda: NOW).RunFunction(req, None)
    assert [(r.severity, r.message) for r in results(rsp)] == [(fnv1.SEVERITY_FATAL, SHRUNK)]


@pytest.mark.parametrize("p", BOTH)
async def test_the_edge_renders_a_placed_sandbox_as_the_core_does(p: Placement) -> None:
    spec = {"snapshots": [{"name": "nightly"}], "resources": {"disk": "30Gi"}}
    out, running = converge(p, spec)
    _, required = plane_world(p)
    composite = {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": "alice-api", "namespace": NAMESPACE},
        "spec": {"image": "ubuntu-24.04", "preset": p.preset, **spec},
    }
    req = _required_request(composite, running, required, platform_input())
    rsp = await FunctionRunner(clock=lambda: NOW).RunFunction(req, None)
    assert results(rsp) == []
    desired = {k: resource.struct_to_dict(v.resource) for k, v in rsp.desired.resources.items()}
    assert desired == out.resources
    assert {k: v.ready == fnv1.READY_TRUE for k, v in rsp.desired.resources.items()} == out.ready


UNFETCHED = {
    "shared": (
        "spec.preset: this Crossplane doesn't fetch required resources, so ComputePlane "
        "'computeplane' and Secret 'computeplane-cluster-admin-kubeconfig' can't be looked "
        "up; the sandbox can't be placed into ComputePlane 'computeplane' until they can"
    ),
    "dedicated": (
        "spec.preset: this Crossplane doesn't fetch required resources, so Secret "
        f"'{plane_name(_ALICE)}-cluster-admin-kubeconfig' can't be looked up; the sandbox "
        f"can't be placed into ComputePlane '{plane_name(_ALICE)}' until it can"
    ),
}


@pytest.mark.parametrize("p", BOTH)
async def test_a_crossplane_without_required_resources_is_told_what_the_plane_needs(
    p: Placement,
) -> None:
    """The warning names what was required: the plane and its Secret, not a restore."""
    world, _ = plane_world(p)
    composite = {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": "alice-api", "namespace": NAMESPACE},
        "spec": {"image": "ubuntu-24.04", "preset": p.preset},
    }
    req = request(composite, world)
    req.meta.capabilities.extend([fnv1.CAPABILITY_CAPABILITIES, fnv1.CAPABILITY_CONDITIONS])
    rsp = await FunctionRunner(clock=lambda: NOW).RunFunction(req, None)
    unsupported = [r for r in results(rsp) if r.reason == "RequiredResourcesUnsupported"]
    assert [(r.severity, r.message) for r in unsupported] == [
        (fnv1.SEVERITY_WARNING, UNFETCHED["dedicated" if p.dedicated else "shared"])
    ]


RESTORE_REFUSED = (
    "spec.restoreFrom: preset {preset!r} places each sandbox in its own namespace of a "
    "ComputePlane, and a claim can only be restored from a snapshot in its own namespace; "
    "restore into a sandbox of a Namespace preset"
)


@pytest.mark.parametrize("p", BOTH)
@pytest.mark.parametrize(
    "world",
    [
        pytest.param({}, id="plane-ready"),
        # Refused at once: a dedicated plane would otherwise be built for a spec it can't run.
        pytest.param({"exists": False}, id="plane-missing"),
        pytest.param({"plane": {"status": "False"}}, id="plane-unready"),
    ],
)
def test_a_restore_is_refused_in_a_plane(p: Placement, world: dict[str, Any]) -> None:
    observed, required = plane_world(p, **world)
    with pytest.raises(FieldError) as err:
        run(p, {"restoreFrom": {"snapshot": "bob-frontend-nightly"}}, observed, required)
    assert str(err.value) == RESTORE_REFUSED.format(preset=p.preset)


@pytest.mark.parametrize(
    ("was", "now"),
    [
        # Dropping the composed plane would delete it, and the workspace in it.
        pytest.param(DEDICATED, SHARED, id="dedicated-to-shared"),
        pytest.param(SHARED, DEDICATED, id="shared-to-dedicated"),
    ],
)
def test_a_placed_sandbox_stays_in_its_plane(was: Placement, now: Placement) -> None:
    _, running = converge(was)
    observed, required = plane_world(now)
    with pytest.raises(FieldError) as err:
        run(now, {}, {**running, **observed}, required)
    assert str(err.value) == (
        f"spec.preset: preset {now.preset!r} places sandboxes in ComputePlane {now.plane!r}, but "
        f"this sandbox's workspace is in ComputePlane {was.plane!r}; moving would leave it "
        "behind. Keep the preset, or create a new sandbox"
    )


LEAVING = "but this sandbox's workspace lives on a ComputePlane; switching would leave it behind"


@pytest.mark.parametrize(
    ("preset", "runs"),
    [pytest.param("gvisor", "gvisor", id="pod"), pytest.param("standard", "kubevirt", id="vm")],
)
@pytest.mark.parametrize("p", BOTH)
def test_a_placed_sandbox_cannot_leave_for_a_namespace_preset(
    p: Placement, preset: str, runs: str
) -> None:
    _, running = converge(p)
    with pytest.raises(FieldError) as err:
        render(workspace({"preset": preset}), p.platform, owned(running), NOW, {})
    assert err.value.path == "spec.preset"
    assert err.value.message.startswith(f"preset {preset!r} runs {runs}, {LEAVING}.")


@pytest.mark.parametrize("p", BOTH)
def test_leaving_a_plane_is_not_advised_through_a_restore_that_cannot_work(p: Placement) -> None:
    _, running = converge(p)
    with pytest.raises(FieldError) as err:
        render(workspace({"preset": "gvisor"}), p.platform, owned(running), NOW, {})
    assert "restore" not in err.value.message
    assert err.value.message.endswith("Keep the preset, or create a new sandbox")


def test_a_plane_is_also_known_from_the_secret_of_an_unannotated_provider_config() -> None:
    _, running = converge(SHARED)
    access = running["plane-access"]
    bare = {
        **access,
        "metadata": {k: v for k, v in access["metadata"].items() if k != "annotations"},
    }
    _, required = plane_world(DEDICATED)
    with pytest.raises(FieldError) as err:
        run(DEDICATED, {}, {**running, "plane-access": bare}, required)
    assert err.value.path == "spec.preset"
    assert "sandbox's workspace is in ComputePlane 'computeplane'" in err.value.message


# --- 2. Every rendered object is schema valid; every pod passes Pod Security -----------------

RICH = {
    "resources": {"cpu": "1500m", "memory": "4096Mi", "disk": "50Gi"},
    "ports": [{"name": "preview", "port": 3000}, {"name": "api", "port": 8080}],
    "snapshots": [{"name": "nightly"}, {"name": "before-refactor"}],
    "network": {
        "egress": "Allowlist",
        "allow": [
            {"fqdn": "pypi.org"},
            {"fqdn": "*.pythonhosted.org", "ports": [443]},
            {"cidr": "140.82.121.0/24", "ports": [22, 443]},
            {"cidr": "2606:4700::/32"},
        ],
    },
}
SPECS = [
    pytest.param({}, id="defaults"),
    pytest.param(RICH, id="rich"),
    pytest.param({**RICH, "power": "Suspended"}, id="rich-suspended"),
    pytest.param({"network": {"egress": "None"}}, id="egress-none"),
]


def _strict(schema: Any) -> Any:
    """A copy in which every object with listed properties allows no others.

    The chart's schema leaves unknown node-group fields to pass through unvalidated; a
    misspelt field would then validate and be silently ignored.
    """
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


@cache
def _plane_values() -> jsonschema.protocols.Validator:
    path = crds_root() / "cozystack" / "apps" / "computeplane" / "values.schema.json"
    schema = _strict(json.loads(path.read_text()))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def plane_values_errors(values: Mapping[str, Any]) -> list[str]:
    return sorted(
        f"{'.'.join(str(x) for x in e.absolute_path)}: {e.message}"
        for e in _plane_values().iter_errors(values)
    )


def schema_errors(out: Rendered) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    for key, m in out.resources.items():
        found = validate({**m, "metadata": {**m["metadata"], "namespace": NAMESPACE}})
        if m["kind"] == "ComputePlane":
            found += [f"values: {e}" for e in plane_values_errors(m["spec"])]
        if m["kind"] == "Object":
            found += [f"manifest: {e}" for e in validate(m["spec"]["forProvider"]["manifest"])]
        if found:
            errors[key] = found
    return errors


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize("spec", SPECS)
def test_every_object_and_every_wrapped_manifest_is_schema_valid(
    p: Placement, spec: dict[str, Any]
) -> None:
    out, _ = converge(p, spec)
    kinds = {inner(out, k)["kind"] for k, m in out.resources.items() if m["kind"] == "Object"}
    assert p.workload_kind in kinds
    if spec.get("snapshots"):
        assert "VolumeSnapshot" in kinds
    assert schema_errors(out) == {}


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize("spec", SPECS)
def test_the_simulated_provider_reports_objects_the_api_server_would(
    p: Placement, spec: dict[str, Any]
) -> None:
    _, observed = converge(p, spec)
    for key, m in observed.items():
        if m["kind"] == "Object":
            assert validate(m) == [], key
            assert validate(m["status"]["atProvider"]["manifest"]) == [], key


def test_the_checks_would_catch_a_broken_render() -> None:
    out, _ = converge(DEDICATED)
    broken = copy.deepcopy(out.resources)
    broken["compute-plane"]["spec"]["nodeGroups"]["md0"]["instancetype"] = "u1.xlarge"
    broken["plane-namespace"]["spec"]["readiness"] = {"policy": "DeriveFromCelQuery"}
    broken["statefulset"]["spec"]["forProvider"]["manifest"]["spec"]["replicas"] = "one"
    broken["plane-access"]["spec"]["credentials"]["source"] = "Kubeconfig"
    errors = schema_errors(replace(out, resources=broken))
    assert sorted(errors) == ["compute-plane", "plane-access", "plane-namespace", "statefulset"]
    unknown = "Additional properties are not allowed ('instancetype' was unexpected)"
    assert errors["compute-plane"] == [
        "spec.nodeGroups.md0.instancetype: unknown field",
        f"values: nodeGroups.md0: {unknown}",
    ]


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize("spec", SPECS)
def test_every_wrapped_pod_passes_pod_security(p: Placement, spec: dict[str, Any]) -> None:
    out, _ = converge(p, spec)
    pod = pod_spec(inner(out, p.workload))
    account = inner(out, "service-account")["metadata"]["name"]
    assert account == service_account_name(_ALICE)
    assert all_violations(pod, service_account=account) == expected_violations(p)


@pytest.mark.parametrize("p", PLACEMENTS)
def test_a_delivered_agent_reaches_the_wrapped_pod_hardened_and_schema_valid(p: Placement) -> None:
    delivering = replace(p, platform=p.platform.model_copy(update={"agent": AGENT_PLATFORM.agent}))
    out, _ = converge(delivering)
    assert schema_errors(out) == {}
    pod = pod_spec(inner(out, p.workload))
    (copy_in,) = pod["initContainers"]
    assert copy_in["image"] == AGENT_IMAGE
    assert pod["containers"][0]["command"][:3] == [
        "python3",
        "-I",
        "/opt/workspace-sandbox-agent/workspace-sandbox-agent",
    ]
    assert pod["containers"][0]["readinessProbe"]["httpGet"] == {"path": "/health", "port": 49983}
    account = inner(out, "service-account")["metadata"]["name"]
    assert all_violations(pod, service_account=account) == expected_violations(p)


# --- 3. The readiness queries, as the provider evaluates them --------------------------------


def _meta(kind: str, api: str = "v1", **extra: Any) -> Manifest:
    metadata = {
        "name": "alice-api",
        "namespace": IN_PLANE,
        "uid": "5a1c4e1e-0b5e-4f0e-9c53-2d1f0c9c8b11",
        "resourceVersion": "48213",
        "generation": 2,
        "creationTimestamp": "2026-11-29T11:58:00Z",
        "labels": LABELS,
    }
    return {"apiVersion": api, "kind": kind, "metadata": metadata, **extra}


def namespace(phase: str | None) -> Manifest:
    ns = _meta("Namespace", spec={"finalizers": ["kubernetes"]})
    return ns if phase is None else {**ns, "status": {"phase": phase}}


def claim(phase: str | None, *conditions: tuple[str, str]) -> Manifest:
    spec = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "30Gi"}},
        "storageClassName": "kubevirt",
        "volumeMode": "Filesystem",
        "volumeName": "pvc-0d9d1f4e",
    }
    pvc = _meta("PersistentVolumeClaim", spec=spec)
    if phase is None:
        return pvc
    status: dict[str, Any] = {"phase": phase}
    if phase == "Bound":
        status |= {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "20Gi"}}
    if conditions:
        status["conditions"] = [_condition(t, s) for t, s in conditions]
    return {**pvc, "status": status}


# The workloads as rendered, so the observed objects carry everything the API server requires.
_STATEFULSET = inner(converge(SHARED)[0], "statefulset")
_SANDBOX = inner(
    converge(replace(SHARED, platform=AGENT_SANDBOX, workload="sandbox"))[0], "sandbox"
)


def statefulset(desired: int, /, **status: int) -> Manifest:
    spec = {**_STATEFULSET["spec"], "replicas": desired, "podManagementPolicy": "OrderedReady"}
    sts = _meta("StatefulSet", "apps/v1", spec=spec)
    if not status:
        return sts
    counts = {"observedGeneration": 2, "currentRevision": "alice-api-6d5f", "collisionCount": 0}
    return {**sts, "status": {**counts, **status}}


def agent_sandbox(*conditions: tuple[str, str, str], mode: str = "Running") -> Manifest:
    spec = {**_SANDBOX["spec"], "operatingMode": mode}
    box = _meta("Sandbox", "agents.x-k8s.io/v1beta1", spec=spec)
    if not conditions:
        return box
    found = [_condition(t, s, r) for t, s, r in conditions]
    return {**box, "status": {"conditions": found, "nodeName": "alice-plane-md0-x7k2p"}}


def volume_snapshot(**status: Any) -> Manifest:
    spec = {
        "volumeSnapshotClassName": "kubevirt",
        "source": {"persistentVolumeClaimName": CLAIM},
    }
    snap = _meta("VolumeSnapshot", "snapshot.storage.k8s.io/v1", spec=spec)
    if not status:
        return snap
    bound = {"boundVolumeSnapshotContentName": "snapcontent-8f1e", **status}
    return {**snap, "status": bound}


NS_QUERY = CEL_READY["Namespace"]
PVC_QUERY = CEL_READY["PersistentVolumeClaim"]
SNAPSHOT_QUERY = CEL_READY["VolumeSnapshot"]
SANDBOX_READY = condition_query("Ready")
SANDBOX_SUSPENDED = condition_query("Suspended")
_DONE = ("Ready", "True", "DependenciesReady")

READINESS = [
    pytest.param(NS_QUERY, namespace("Active"), True, id="namespace-active"),
    pytest.param(NS_QUERY, namespace("Terminating"), False, id="namespace-terminating"),
    pytest.param(NS_QUERY, namespace(None), False, id="namespace-no-status"),
    pytest.param(PVC_QUERY, claim("Bound"), True, id="claim-bound"),
    pytest.param(PVC_QUERY, claim("Bound", ("Resizing", "True")), True, id="claim-resizing"),
    pytest.param(PVC_QUERY, claim("Pending"), False, id="claim-pending"),
    pytest.param(PVC_QUERY, claim("Lost"), False, id="claim-lost"),
    pytest.param(PVC_QUERY, claim(None), False, id="claim-no-status"),
    pytest.param(
        STATEFULSET_RUNNING,
        statefulset(1, replicas=1, readyReplicas=1, availableReplicas=1, currentReplicas=1),
        True,
        id="statefulset-running",
    ),
    pytest.param(
        STATEFULSET_RUNNING,
        statefulset(1, replicas=1, currentReplicas=1),
        False,
        id="statefulset-pod-not-ready",
    ),
    pytest.param(STATEFULSET_RUNNING, statefulset(1), False, id="statefulset-no-status"),
    pytest.param(
        STATEFULSET_RUNNING,
        statefulset(1, replicas=2, readyReplicas=2),
        False,
        id="statefulset-two-pods",
    ),
    pytest.param(STATEFULSET_STOPPED, statefulset(0, replicas=0), True, id="statefulset-stopped"),
    pytest.param(STATEFULSET_STOPPED, statefulset(0), True, id="stopped-no-status"),
    pytest.param(
        STATEFULSET_STOPPED,
        statefulset(0, replicas=1, readyReplicas=1),
        False,
        id="statefulset-still-running",
    ),
    pytest.param(
        STATEFULSET_STOPPED,
        statefulset(0, replicas=1),
        False,
        id="statefulset-pod-terminating",
    ),
    pytest.param(
        SANDBOX_READY,
        agent_sandbox(_DONE, ("Suspended", "False", "Running")),
        True,
        id="sandbox-running",
    ),
    pytest.param(
        SANDBOX_READY,
        agent_sandbox(("Ready", "False", "DependenciesNotReady")),
        False,
        id="sandbox-starting",
    ),
    pytest.param(
        SANDBOX_READY,
        agent_sandbox(("Suspended", "True", "Suspended")),
        False,
        id="sandbox-only-suspended",
    ),
    pytest.param(SANDBOX_READY, agent_sandbox(), False, id="sandbox-without-status"),
    pytest.param(
        SANDBOX_READY,
        {**agent_sandbox(), "status": {"nodeName": "alice-plane-md0-x7k2p"}},
        False,
        id="sandbox-without-conditions",
    ),
    pytest.param(
        SANDBOX_SUSPENDED,
        agent_sandbox(
            ("Ready", "False", "SandboxSuspended"), ("Suspended", "True", "Done"), mode="Suspended"
        ),
        True,
        id="sandbox-suspended",
    ),
    pytest.param(
        SANDBOX_SUSPENDED,
        agent_sandbox(_DONE, ("Suspended", "False", "Running"), mode="Suspended"),
        False,
        id="sandbox-still-running",
    ),
    pytest.param(
        SANDBOX_SUSPENDED,
        agent_sandbox(_DONE, mode="Suspended"),
        False,
        id="sandbox-not-suspending-yet",
    ),
    pytest.param(
        SNAPSHOT_QUERY,
        volume_snapshot(readyToUse=True, restoreSize="20Gi", creationTime="2026-11-29T12:00:00Z"),
        True,
        id="snapshot-ready",
    ),
    pytest.param(SNAPSHOT_QUERY, volume_snapshot(readyToUse=False), False, id="snapshot-not-ready"),
    pytest.param(
        SNAPSHOT_QUERY,
        volume_snapshot(readyToUse=False, error={"message": "snapshot class not found"}),
        False,
        id="snapshot-failed",
    ),
    pytest.param(
        SNAPSHOT_QUERY,
        volume_snapshot(error={"message": "snapshot class not found"}),
        False,
        id="snapshot-failed-without-ready-flag",
    ),
    pytest.param(SNAPSHOT_QUERY, volume_snapshot(), False, id="snapshot-no-status"),
    pytest.param(GROWN, claim("Bound"), True, id="grown-bound"),
    pytest.param(
        GROWN,
        claim("Bound", ("Resizing", "False"), ("FileSystemResizePending", "False")),
        True,
        id="grown-after-resize",
    ),
    pytest.param(GROWN, claim("Bound", ("Resizing", "True")), False, id="grown-resizing"),
    pytest.param(
        GROWN,
        claim("Bound", ("FileSystemResizePending", "True")),
        False,
        id="grown-filesystem-pending",
    ),
    pytest.param(
        GROWN,
        claim("Bound", ("ModifyingVolume", "True")),
        True,
        id="grown-other-condition",
    ),
    pytest.param(GROWN, claim("Pending"), False, id="grown-unbound"),
    pytest.param(GROWN, claim(None), False, id="grown-no-status"),
]


@pytest.mark.parametrize(("query", "obj", "ready"), READINESS)
def test_readiness_queries(query: str, obj: Manifest, ready: bool) -> None:
    assert cel(query, obj) is ready


@pytest.mark.parametrize(("query", "obj", "ready"), READINESS)
def test_the_observed_objects_are_ones_the_api_server_would_return(
    query: str, obj: Manifest, ready: bool
) -> None:
    del query, ready
    assert validate(obj) == []


@pytest.mark.parametrize("p", PLACEMENTS)
@pytest.mark.parametrize("power", ["Running", "Suspended"])
def test_every_object_is_judged_by_its_wrapped_kind(p: Placement, power: str) -> None:
    out, _ = converge(p, {"power": power, "snapshots": [{"name": "nightly"}]})
    workload = {
        ("StatefulSet", "Running"): STATEFULSET_RUNNING,
        ("StatefulSet", "Suspended"): STATEFULSET_STOPPED,
        ("Sandbox", "Running"): SANDBOX_READY,
        ("Sandbox", "Suspended"): SANDBOX_SUSPENDED,
    }
    want = {
        "Namespace": NS_QUERY,
        "PersistentVolumeClaim": PVC_QUERY,
        "VolumeSnapshot": SNAPSHOT_QUERY,
        "StatefulSet": workload["StatefulSet", power],
        "Sandbox": workload["Sandbox", power],
    }
    for m in out.resources.values():
        if m["kind"] != "Object":
            continue
        kind = m["spec"]["forProvider"]["manifest"]["kind"]
        expected = (
            {"policy": "DeriveFromCelQuery", "celQuery": want[kind]}
            if kind in want
            else {"policy": "SuccessfulCreate"}
        )
        assert m["spec"]["readiness"] == expected, kind


# --- 4. Isolation inside the plane -----------------------------------------------------------
#
# The plane is a cluster of its own: no Cozystack tenant baseline and no platform guard, only
# the sandbox's own policies. The modelled cluster keeps every workload of the Cozystack model
# (other tenants' pods, platform services, the gateway with its namespace and labels) and moves
# the two sandboxes into their in-plane namespaces, with the pod and namespace labels the render
# gives them. So every row of the Namespace placement's truth table is asked again here.


def _plane_policies(p: Placement, spec: Mapping[str, Any], name: str) -> list[Manifest]:
    out, _ = converge(p, spec, name=name)
    return [
        inner(out, k)
        for k, m in out.resources.items()
        if m["kind"] == "Object"
        and inner(out, k)["kind"] in ("CiliumNetworkPolicy", "NetworkPolicy")
    ]


@cache
def _sandbox_shape(
    p: Placement, name: str
) -> tuple[str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    out, _ = converge(p, {}, name=name)
    namespace = inner(out, "plane-namespace")["metadata"]
    template = pod_template(inner(out, p.workload))
    return (
        namespace["name"],
        tuple(sorted(namespace["labels"].items())),
        tuple(sorted(template["metadata"]["labels"].items())),
    )


@cache
def plane_environment(p: Placement, local: bool = True) -> Environment:  # noqa: FBT002  # a cache key
    """The plane model; `local` is Cilium's policy-default-local-cluster."""
    env = replace(cozystack_environment(), policy_default_local_cluster=local)
    shapes = {n: _sandbox_shape(p, n) for n in ("alice-api", "bob-frontend")}
    workloads = tuple(
        replace(w, namespace=shapes[w.name][0], labels=dict(shapes[w.name][2]))
        if w.name in shapes
        else w
        for w in env.workloads
    )
    services = tuple(
        replace(s, namespace=shapes[s.name][0]) if s.name in shapes else s for s in env.services
    )
    namespaces = {ns: dict(labels) for ns, labels, _ in shapes.values()}
    return replace(
        env,
        workloads=workloads,
        services=services,
        namespace_labels={**env.namespace_labels, **namespaces},
    )


def plane_world_policies(p: Placement, spec: Mapping[str, Any]) -> list[Manifest]:
    return _plane_policies(p, {**ALICE_POD, **spec}, "alice-api") + _plane_policies(
        p, {}, "bob-frontend"
    )


@cache
def _internet_policies(p: Placement) -> tuple[Manifest, ...]:
    return tuple(plane_world_policies(p, {}))


def test_the_plane_model_places_both_sandboxes_in_their_own_namespaces() -> None:
    env = plane_environment(SHARED)
    bob = plane_namespace(workspace(name="bob-frontend"))
    assert env.workload("alice-api").namespace == IN_PLANE
    assert env.workload("bob-frontend").namespace == bob
    assert env.workload("alice-api").labels == {
        WORKSPACE_LABEL: IDENTITY,
        EGRESS_LABEL: "Internet",
    }
    assert env.namespace_labels_of(IN_PLANE)["pod-security.kubernetes.io/enforce"] == "restricted"
    policies = _internet_policies(SHARED)
    assert sorted((m["kind"], m["metadata"]["namespace"]) for m in policies) == [
        ("CiliumNetworkPolicy", IN_PLANE),
        ("CiliumNetworkPolicy", bob),
        ("NetworkPolicy", IN_PLANE),
        ("NetworkPolicy", bob),
    ]


# Cilium's policy-default-local-cluster, on and off: the verdicts may not depend on it.
LOCAL_CLUSTER = pytest.mark.parametrize(
    "local", [True, False], ids=["local-cluster-default", "no-local-cluster-default"]
)


@LOCAL_CLUSTER
@pytest.mark.parametrize("p", BOTH)
@pytest.mark.parametrize(("flow", "allowed"), POD_TABLE)
def test_the_isolation_truth_table_holds_inside_a_plane(
    p: Placement, flow: Flow, allowed: bool, local: bool
) -> None:
    v = evaluate(flow, _internet_policies(p), plane_environment(p, local))
    assert v.allowed is allowed, v.reason


@LOCAL_CLUSTER
@pytest.mark.parametrize("p", BOTH)
def test_the_local_host_may_still_probe_a_sandbox_inside_a_plane(p: Placement, local: bool) -> None:
    # Kubelet probes come from the node's own address, whatever Cilium's local-cluster default.
    for policies in (_internet_policies(p), _allowlist_policies(p)):
        v = evaluate(
            Flow("192.168.100.11", "alice-api", 49983), policies, plane_environment(p, local)
        )
        assert v.allowed, v.reason


def _out(dest: str, port: int | None = 443, protocol: str = "TCP", **kw: Any) -> Flow:
    return Flow("alice-api", dest, port, protocol, **kw)  # type: ignore[arg-type]


def _into(source: str, port: int = 49983) -> Flow:
    return Flow(source, "alice-api", port)


@pytest.mark.parametrize("p", BOTH)
@pytest.mark.parametrize(
    ("flow", "allowed"),
    [
        pytest.param(_out("151.101.0.223"), True, id="public-v4"),
        pytest.param(_out("2a04:4e42::223"), True, id="public-v6"),
        pytest.param(_out("10.0.0.5"), False, id="private"),
        pytest.param(_out("169.254.169.254", 80), False, id="metadata"),
        pytest.param(_out("10.244.1.22", 3000), False, id="other-sandbox"),
        pytest.param(_out("10.244.0.10", 53, "UDP"), False, id="kube-dns"),
        pytest.param(_into("sandbox-gateway"), True, id="gateway"),
        pytest.param(_into("sandbox-gateway", 3000), True, id="gateway-declared-port"),
        pytest.param(_into("sandbox-gateway", 8080), False, id="gateway-undeclared-port"),
        pytest.param(_into("gateway-debug"), False, id="gateway-namespace-without-label"),
        pytest.param(_into("bob-frontend"), False, id="other-sandbox-ingress"),
        pytest.param(_into("mallory-shell"), False, id="other-tenant"),
    ],
)
def test_the_network_policy_alone_isolates_too(p: Placement, flow: Flow, allowed: bool) -> None:
    v = evaluate(flow, _internet_policies(p), plane_environment(p), enforcement="kubernetes")
    assert v.allowed is allowed, v.reason


NAMED = {
    "network": {
        "egress": "Allowlist",
        "allow": [
            {"fqdn": "pypi.org"},
            {"fqdn": "*.pythonhosted.org", "ports": [443]},
            {"fqdn": "rebind.example.net"},
            {"cidr": "140.82.121.0/24", "ports": [22]},
        ],
    }
}


@cache
def _allowlist_policies(p: Placement) -> tuple[Manifest, ...]:
    return tuple(plane_world_policies(p, NAMED))


@LOCAL_CLUSTER
@pytest.mark.parametrize("p", BOTH)
@pytest.mark.parametrize(
    ("flow", "allowed"),
    [
        pytest.param(_out("pypi.org", dns_resolver="9.9.9.9"), True, id="listed-name"),
        pytest.param(
            _out("files.pythonhosted.org", dns_resolver="9.9.9.9"), True, id="wildcard-name"
        ),
        pytest.param(
            _out("files.pythonhosted.org", 80, dns_resolver="9.9.9.9"),
            False,
            id="wildcard-name-other-port",
        ),
        pytest.param(
            _out("upload.pypi.org", dns_resolver="9.9.9.9"), False, id="subdomain-of-exact-name"
        ),
        pytest.param(_out("github.com", dns_resolver="9.9.9.9"), False, id="unlisted-name"),
        pytest.param(
            _out("registry.npmjs.org", dns_resolver="9.9.9.9"), False, id="unlisted-name-2"
        ),
        pytest.param(
            _out("rebind.example.net", dns_resolver="9.9.9.9"),
            False,
            id="listed-name-resolving-private",
        ),
        pytest.param(_out("151.101.0.223"), True, id="address-of-listed-name"),
        pytest.param(_out("140.82.121.4", 22), True, id="listed-cidr-listed-port"),
        pytest.param(_out("140.82.121.4", 443), False, id="listed-cidr-other-port"),
        pytest.param(_out("1.1.1.1"), False, id="unlisted-public"),
        pytest.param(_out("2a04:4e42::223"), True, id="v6-address-of-listed-name"),
        pytest.param(_out("2001:4860:4860::8888"), False, id="unlisted-v6"),
        pytest.param(_out("9.9.9.9", 53, "UDP", dns_name="pypi.org"), True, id="dns-listed"),
        pytest.param(
            _out("9.9.9.9", 53, "UDP", dns_name="github.com"), False, id="dns-unlisted-refused"
        ),
        pytest.param(
            _out("1.1.1.1", 53, "UDP", dns_name="pypi.org"), False, id="dns-other-resolver"
        ),
        pytest.param(_out("10.0.0.5"), False, id="private"),
        pytest.param(_out("169.254.169.254", 80), False, id="metadata"),
        pytest.param(_out("10.244.1.22", 3000), False, id="other-sandbox"),
        pytest.param(_out("10.244.0.10", 53, "UDP"), False, id="cluster-dns"),
        pytest.param(_out("192.168.100.12", 22), False, id="node"),
        pytest.param(_into("sandbox-gateway"), True, id="gateway-still-reaches-agent"),
        pytest.param(_into("mallory-shell"), False, id="other-tenant-ingress"),
    ],
)
def test_an_allowlist_with_names_is_enforced_inside_a_plane(
    p: Placement, flow: Flow, allowed: bool, local: bool
) -> None:
    v = evaluate(flow, _allowlist_policies(p), plane_environment(p, local))
    assert v.allowed is allowed, v.reason


def test_names_are_refused_where_the_namespace_allows_the_internet_but_not_in_a_plane() -> None:
    with pytest.raises(FieldError) as err:
        render(workspace({"preset": "gvisor", **NAMED}), PLATFORM, {}, NOW)
    assert str(err.value) == (
        "spec.network.allow[0].fqdn: names can't be enforced on this platform: its namespaces "
        "already allow all internet egress, and Cilium can only take that away by address; list "
        "the destination's addresses as cidr entries"
    )
    out, _ = converge(SHARED, NAMED)
    cilium = inner(out, "cilium-policy")["spec"]
    assert {"toFQDNs": [{"matchName": "pypi.org"}]} in cilium["egress"]
    # Allows only: nothing in the plane allows the internet, so no deny has to take it away.
    denied = {c["cidr"] for r in cilium["egressDeny"] for c in r.get("toCIDRSet", [])}
    assert {"0.0.0.0/0", "::/0"}.isdisjoint(denied)


# --- 5. Invariants for random specs --------------------------------------------------------

_TOO_BIG = {"cpu": {"8"}, "memory": {"16Gi"}, "disk": {"200Gi"}}


def _fits(spec: Mapping[str, Any]) -> bool:
    """Within the plane presets' maximum (4 CPUs, 8Gi, 100Gi)."""
    return not any(spec.get("resources", {}).get(k) in v for k, v in _TOO_BIG.items())


plane_specs = st.builds(
    lambda spec, allow: {
        **spec,
        **({"network": {"egress": "Allowlist", "allow": allow}} if allow is not None else {}),
    },
    # Plane presets run pods, which take no SSH keys.
    specs.filter(_fits).map(
        lambda spec: {k: v for k, v in spec.items() if k not in {"preset", "ssh"}}
    ),
    st.one_of(st.none(), allowlists()),
)
placements = st.sampled_from([p.values[0] for p in PLACEMENTS])


WORLDS: dict[str, dict[str, Any]] = {
    "ready": {},
    "unready": {"plane": {"status": "False", "reason": "Upgrading"}},
    "no-kubeconfig": {"secret": False},
    "gone": {"exists": False},
}


@settings(max_examples=40, deadline=None)
@given(
    p=placements,
    spec=plane_specs,
    name=xr_names,
    worlds=st.lists(st.sampled_from(sorted(WORLDS)), min_size=1, max_size=8),
)
def test_placed_sandboxes_stay_in_their_namespace_and_keep_their_claim(
    p: Placement, spec: dict[str, Any], name: str, worlds: list[str]
) -> None:
    """Whatever the plane does between calls; then it stays ready until the sandbox settles."""
    observed: Observed = {}
    claimed = False
    namespaces = set()
    for state in [*worlds, "ready", "ready", "ready", "ready"]:
        world, required = plane_world(p, **WORLDS[state], name=name)
        out = run(p, spec, {**observed, **world}, required, name=name)
        # Nothing once placed ever leaves the desired state; the claim least of all.
        assert set(observed) <= set(out.resources)
        claimed = claimed or "workspace-claim" in observed
        objects = [k for k, m in out.resources.items() if m["kind"] == "Object"]
        if objects:
            own = inner(out, "plane-namespace")["metadata"]
            assert "namespace" not in own
            in_plane = own["name"]
            namespaces.add(in_plane)
        for key in objects:
            wrapped = inner(out, key)
            if key in ("plane-namespace", "plane-guard"):
                assert "namespace" not in wrapped["metadata"], key  # cluster-scoped
                continue
            assert wrapped["metadata"]["namespace"] == in_plane, key
            if key == p.workload:
                account = inner(out, "service-account")["metadata"]["name"]
                assert all_violations(pod_spec(wrapped), service_account=account) == (
                    expected_violations(p)
                )
        observed = provide(out)
    assert claimed
    assert len(namespaces) == 1


# --- 6. The plane's guard, the workers' policy, and the order of deletion ---------------------
#
# Inside a plane only the sandbox's own policies and the plane guard stand; the plane's workers
# are VMs in the tenant's namespace on the host. The evaluator's deletion model lists every
# moment a deletion can pass through (function/policy/deletion.py); at each one in which the
# sandbox's pod may still run, the pod must stay isolated inside the plane, and its workers
# (where an escape from the runtime lands) on the host.

HOST = cozystack_environment()
SITE = platform(
    network={
        **platform_input()["network"],
        "siteAddresses": {
            "controlPlaneCidrs": ["185.12.64.100/32"],
            "nodeCidrs": ["185.12.64.16/28"],
            "loadBalancerCidrs": ["185.12.65.0/28"],
            "nat64Prefixes": ["2a01:4f8:c0c:6400::/96"],
        },
    }
)


def _cluster(p: Placement) -> str:
    return f"{p.plane}-cluster"


@cache
def _settled(p: Placement) -> dict[str, Manifest]:
    out, _ = converge(p, ALICE_POD)
    return out.resources


def test_the_guard_is_placed_first_cluster_wide_and_never_deleted() -> None:
    for p in (SHARED, DEDICATED):
        first = run(p, {}, *plane_world(p)).resources
        guard = first["plane-guard"]
        assert guard["spec"]["managementPolicies"] == ["Observe", "Create", "Update"]
        carried = guard["spec"]["forProvider"]["manifest"]
        assert "namespace" not in carried["metadata"]
        assert carried == guard_policy(PLATFORM)
        assert "plane-workers" in first
        assert p.workload not in first


@pytest.mark.parametrize("p", PLACEMENTS)
def test_the_workload_waits_for_the_workers_policy(p: Placement) -> None:
    world, required = plane_world(p)
    observed = provide(run(p, {}, world, required))
    del observed["plane-workers"]
    for _ in range(4):
        out = run(p, {}, {**observed, **world}, required)
        observed = {k: v for k, v in provide(out).items() if k != "plane-workers"}
    assert p.workload not in out.resources
    assert provisioned(out)[2].endswith("waiting for plane-workers")


@pytest.mark.parametrize("p", PLACEMENTS)
def test_the_workload_stops_within_a_short_grace(p: Placement) -> None:
    assert pod_spec(inner(converge(p)[0], p.workload))["terminationGracePeriodSeconds"] == 5


@pytest.mark.parametrize("p", PLACEMENTS)
def test_no_deletion_leaves_the_workload_without_its_policies_or_the_workers_without_theirs(
    p: Placement,
) -> None:
    resources = _settled(p)
    if p.dedicated:
        # Its Objects delete nothing in the plane; its workers keep their policy as long as it.
        assert not outlives(resources, "compute-plane", "plane-workers")
        return
    for used in ("cilium-policy", "network-policy", "plane-namespace"):
        assert not outlives(resources, p.workload, used), used
    # The namespace's Object is gone only once the namespace is, with every pod in it.
    assert not outlives(resources, "plane-namespace", "plane-workers")


def test_without_usages_the_workload_can_outlive_its_policies() -> None:
    resources = {k: m for k, m in _settled(SHARED).items() if not k.startswith("usage-")}
    assert outlives(resources, "statefulset", "cilium-policy")
    assert outlives(resources, "plane-namespace", "plane-workers")


@cache
def workers_environment(p: Placement) -> Environment:
    """The host, its two plane workers labelled with `p`'s cluster."""
    label = "cluster.x-k8s.io/cluster-name"
    workloads = tuple(
        replace(w, labels={**w.labels, label: _cluster(p)}) if label in w.labels else w
        for w in HOST.workloads
    )
    return replace(HOST, workloads=workloads)


def _host_policies(resources: Mapping[str, Manifest]) -> list[Manifest]:
    return [
        {**m, "metadata": {**m["metadata"], "namespace": NAMESPACE}}
        for m in resources.values()
        if m["kind"] in ("CiliumNetworkPolicy", "NetworkPolicy")
    ]


def _from_worker(dest: str, port: int | None = 443, protocol: str = "TCP") -> Flow:
    return Flow(f"tenant-acme/{PLANE_CLUSTER}-md0-x7k2p", dest, port, protocol)  # type: ignore[arg-type]


WORKER_TABLE = [
    pytest.param(_from_worker("151.101.0.223"), True, id="public"),
    pytest.param(_from_worker("2a04:4e42::223"), True, id="public-v6"),
    pytest.param(_from_worker("pypi.org"), True, id="public-name"),
    pytest.param(_from_worker("10.96.0.10", 53, "UDP"), True, id="kube-dns-vip"),
    pytest.param(_from_worker("10.244.1.10", 53, "TCP"), True, id="kube-dns-pod"),
    pytest.param(
        _from_worker(f"{PLANE_CLUSTER}.acme.cozy.example.net"), True, id="control-plane-endpoint"
    ),
    pytest.param(_from_worker("10.244.2.41"), True, id="tenant-root-ingress-pod"),
    pytest.param(_from_worker("10.244.0.73", 6443), True, id="own-control-plane-pod"),
    pytest.param(_from_worker("10.244.2.72", 4240), True, id="other-worker"),
    pytest.param(_from_worker("10.244.0.10", 9153), False, id="kube-dns-metrics"),
    pytest.param(_from_worker("169.254.169.254", 80), False, id="metadata"),
    pytest.param(_from_worker("fd00:ec2::254", 80), False, id="metadata-v6"),
    pytest.param(_from_worker("::ffff:a9fe:a9fe", 80), False, id="metadata-ipv4-mapped"),
    pytest.param(_from_worker("64:ff9b::a9fe:a9fe", 80), False, id="metadata-nat64"),
    pytest.param(_from_worker("10.0.0.5"), False, id="private"),
    pytest.param(_from_worker("100.64.0.2", 22), False, id="node-join-network"),
    pytest.param(_from_worker("192.168.100.12", 10250), False, id="node-internal"),
    pytest.param(_from_worker("185.12.64.12", 22), False, id="node-public"),
    pytest.param(_from_worker("10.96.0.1"), False, id="apiserver-vip"),
    pytest.param(_from_worker("192.168.100.13", 6443), False, id="apiserver-endpoint"),
    pytest.param(_from_worker("10.244.1.61", 5432), False, id="platform-database"),
    pytest.param(_from_worker("10.244.2.62", 8080), False, id="keycloak"),
    pytest.param(_from_worker("10.244.0.63", 80), False, id="dashboard"),
    pytest.param(_from_worker("10.244.2.65"), False, id="cdi-upload-proxy"),
    pytest.param(_from_worker("10.244.2.51", 49983), False, id="gateway"),
    pytest.param(_from_worker("10.244.1.31", 80), False, id="other-tenant"),
    pytest.param(_from_worker("10.244.0.32", 49983), False, id="other-tenant-sandbox"),
]


@pytest.mark.parametrize("p", BOTH)
@pytest.mark.parametrize(("flow", "allowed"), WORKER_TABLE)
def test_the_workers_reach_their_control_plane_and_the_internet_and_nothing_of_the_host(
    p: Placement, flow: Flow, allowed: bool
) -> None:
    policies = [
        *_host_policies(_settled(p)),
        guard_policy(PLATFORM),
        *cozystack_baseline(NAMESPACE),
    ]
    v = evaluate(flow, policies, workers_environment(p))
    assert v.allowed is allowed, v.reason


def test_without_the_workers_policy_the_baseline_lets_a_worker_reach_the_platform() -> None:
    # Why the workers have a policy: an escape onto one lands here.
    baseline = cozystack_baseline(NAMESPACE)
    for flow in (
        _from_worker("169.254.169.254", 80),
        _from_worker("10.0.0.5"),
        _from_worker("10.244.2.62", 8080),
        _from_worker("10.244.0.63", 80),
    ):
        assert evaluate(flow, baseline, HOST).allowed, flow


# (flow, allowed while the site's addresses are unstated, allowed once stated)
WORKER_SITE_TABLE = [
    pytest.param(_from_worker("185.12.64.100", 6443), True, False, id="control-plane-vip"),
    pytest.param(_from_worker("185.12.64.21", 22), True, False, id="unlisted-node-address"),
    pytest.param(
        _from_worker("2a01:4f8:c0c:6400::a9fe:a9fe", 80), True, False, id="nat64-metadata"
    ),
    # Their control plane is behind the cluster's ingress: the load balancers stay open.
    pytest.param(_from_worker("185.12.65.10"), True, True, id="load-balancer"),
]


@pytest.mark.parametrize(("flow", "unstated", "stated"), WORKER_SITE_TABLE)
def test_the_workers_are_kept_from_the_sites_addresses_once_stated(
    flow: Flow, unstated: bool, stated: bool
) -> None:
    def allowed(p: SandboxPlatform) -> bool:
        out, _ = converge(replace(SHARED, platform=p))
        policies = [*_host_policies(out.resources), *cozystack_baseline(NAMESPACE)]
        return evaluate(flow, policies, workers_environment(SHARED)).allowed

    assert (allowed(PLATFORM), allowed(SITE)) == (unstated, stated)


def test_a_load_balancer_inside_a_denied_range_is_carved_out_for_the_workers() -> None:
    private = platform(
        network={
            **platform_input()["network"],
            "siteAddresses": {"loadBalancerCidrs": ["192.168.100.240/28"]},
        }
    )
    out, _ = converge(replace(SHARED, platform=private))
    (cidrs,) = [r["toCIDRSet"] for r in out.resources["plane-workers"]["spec"]["egressDeny"][3:]]
    assert {"cidr": "192.168.0.0/16", "except": ["192.168.100.240/28"]} in cidrs
    sandbox = {
        c["cidr"]
        for r in inner(out, "cilium-policy")["spec"]["egressDeny"]
        for c in r.get("toCIDRSet", [])
    }
    assert "192.168.100.240/28" in sandbox


# Rows a sandbox's pod must be denied at every moment it may still run.
STILL_DENIED = [
    pytest.param(_out("169.254.169.254", 80), id="metadata"),
    pytest.param(_out("10.0.0.5"), id="private"),
    pytest.param(_out("192.168.100.12", 22), id="node"),
    pytest.param(_out("10.96.0.1"), id="apiserver-vip"),
    pytest.param(_out("10.244.1.22", 3000), id="other-sandbox"),
    pytest.param(_out("10.244.0.10", 53, "UDP"), id="kube-dns"),
    pytest.param(_out("10.244.1.61", 5432), id="platform-database"),
    pytest.param(_into("mallory-shell"), id="other-tenant-ingress"),
    pytest.param(_into("151.101.0.223"), id="internet-ingress"),
]
WORKER_DENIED = [r for r in WORKER_TABLE if r.values[1] is False]


@pytest.mark.parametrize("p", PLACEMENTS)
def test_every_moment_of_a_deletion_keeps_the_pod_and_its_workers_isolated(p: Placement) -> None:
    moments = [m for m in deletion(_settled(p)) if m.pod]
    assert moments
    inside_env, host_env = plane_environment(p), workers_environment(p)
    for moment in moments:
        for row in STILL_DENIED:
            (flow,) = row.values
            v = evaluate(flow, moment.inside, inside_env, namespace=IN_PLANE)
            assert not v.allowed, (row.id, moment.holding(), v.reason)
        host = [*_host_policies({m["metadata"]["name"]: m for m in moment.host})]
        for row in WORKER_DENIED:
            flow = row.values[0]
            v = evaluate(flow, [*host, *cozystack_baseline(NAMESPACE)], host_env)
            assert not v.allowed, (row.id, moment.holding(), v.reason)


def test_a_lingering_pod_is_held_by_the_guard_alone() -> None:
    """After its Objects went, a pod that is still terminating has only the guard around it."""
    alone = [m for m in deletion(_settled(SHARED)) if m.pod and len(m.inside) == 1]
    assert [m.inside[0]["kind"] for m in alone] == ["CiliumClusterwideNetworkPolicy"]
    without_guard = {k: m for k, m in _settled(SHARED).items() if k != "plane-guard"}
    exposed = [m for m in deletion(without_guard) if m.pod and not m.inside]
    assert exposed
    verdict = evaluate(_out("169.254.169.254", 80), exposed[0].inside, plane_environment(SHARED))
    assert verdict.allowed
