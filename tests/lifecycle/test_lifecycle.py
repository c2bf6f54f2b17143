"""The sandbox's life: suspend and resume, snapshots, restore and fork, auto-suspend, no loss."""

from datetime import timedelta
from typing import Any

import pytest
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.compose.names import snapshot_name
from function.errors import FieldError
from function.fn import FunctionRunner
from function.render import Rendered, render
from tests.schemas import validate
from tests.strategies import KEYS
from tests.support import (
    NAMESPACE,
    NOW,
    PLATFORM,
    owned,
    owner_reference,
    platform,
    platform_input,
    request,
    workspace,
    xr,
)

DISK_READY = {"status": {"phase": "Succeeded"}}
RUNNING = {"status": {"printableStatus": "Running", "ready": True}}
STOPPED = {"status": {"printableStatus": "Stopped"}}
CLEAN_ONLY = platform(
    presets={"standard": {**platform_input()["presets"]["standard"], "cleanSnapshotsOnly": True}}
)
CAPPED = platform(
    presets={"standard": {**platform_input()["presets"]["standard"], "maxLifetime": "8h"}}
)


def run(spec: dict[str, Any], observed: dict[str, Any] | None = None, **kw: Any) -> Rendered:
    return render(
        workspace(spec),
        kw.pop("p", PLATFORM),
        owned(observed),
        kw.pop("now", NOW),
        kw.pop("required", None),
    )


def phase(out: Rendered) -> tuple[str, str]:
    suspended = next(c for c in out.conditions if c.type == "Suspended")
    return out.status["phase"], suspended.reason


# --- suspend and resume -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("power", "vm", "want"),
    [
        pytest.param("Running", RUNNING, ("Running", "PowerRunning"), id="running"),
        pytest.param(
            "Suspended", RUNNING, ("Suspending", "Suspending"), id="suspend-asked-vm-still-up"
        ),
        pytest.param(
            "Suspended",
            {"status": {"printableStatus": "Stopping"}},
            ("Suspending", "Suspending"),
            id="suspending",
        ),
        pytest.param("Suspended", STOPPED, ("Suspended", "Suspended"), id="suspended"),
        pytest.param("Running", STOPPED, ("Provisioning", "PowerRunning"), id="resuming"),
        pytest.param(
            "Running",
            {"status": {"printableStatus": "Starting"}},
            ("Provisioning", "PowerRunning"),
            id="resuming-starting",
        ),
        pytest.param("Running", RUNNING, ("Running", "PowerRunning"), id="resumed"),
    ],
)
def test_suspend_and_resume_follow_the_observed_vm(
    power: str, vm: dict[str, Any], want: tuple[str, str]
) -> None:
    out = run({"power": power}, {"workspace-volume": DISK_READY, "vm": vm})
    assert phase(out) == want
    assert (
        out.resources["vm"]["spec"]["runStrategy"]
        == {"Running": "Always", "Suspended": "Halted"}[power]
    )
    assert (
        out.resources["workspace-volume"]["spec"]["storage"]["resources"]["requests"]["storage"]
        == "20Gi"
    )


def test_resuming_says_which_step_is_pending() -> None:
    out = run({}, {"workspace-volume": DISK_READY, "vm": STOPPED})
    provisioned = next(c for c in out.conditions if c.type == "Provisioned")
    assert (provisioned.reason, provisioned.message) == (
        "StartingVM",
        "waiting for the VM to become ready (printableStatus Stopped)",
    )


# --- snapshots ----------------------------------------------------------------------------

SNAP = {"snapshots": [{"name": "nightly"}]}


def snapshot_entry(out: Rendered) -> dict[str, Any]:
    entry: dict[str, Any] = out.status["snapshots"][0]
    return entry


def test_no_snapshot_is_taken_of_a_disk_still_being_created() -> None:
    out = run(SNAP, {"workspace-volume": {"status": {"phase": "CloneInProgress"}}})
    assert "snapshot-nightly" not in out.resources
    assert snapshot_entry(out)["state"] == "Waiting"
    snapshots = next(c for c in out.conditions if c.type == "Snapshots")
    assert (snapshots.reason, snapshots.message) == (
        "WaitingToSnapshot",
        "nightly: waiting for the workspace disk to be created",
    )


def test_a_snapshot_of_a_running_sandbox_is_crash_consistent_and_stays_so() -> None:
    out = run(SNAP, {"workspace-volume": DISK_READY, "vm": RUNNING})
    snap = out.resources["snapshot-nightly"]
    # The observed VM records no account: an earlier release made it, with `sandbox`.
    assert snap["metadata"]["annotations"] == {
        "sandbox.cozystack.io/consistency": "Crash",
        "sandbox.cozystack.io/guest-user": "sandbox",
    }
    assert snapshot_entry(out)["state"] == "Creating"
    # Suspending later doesn't make the snapshot taken earlier clean.
    later = run(
        {**SNAP, "power": "Suspended"},
        {"workspace-volume": DISK_READY, "vm": STOPPED, "snapshot-nightly": snap},
    )
    assert snapshot_entry(later)["consistency"] == "Crash"


def test_a_snapshot_of_a_suspended_sandbox_is_clean_and_stays_so() -> None:
    out = run({**SNAP, "power": "Suspended"}, {"workspace-volume": DISK_READY, "vm": STOPPED})
    snap = out.resources["snapshot-nightly"]
    assert snapshot_entry(out)["consistency"] == "Clean"
    taken = {
        **snap,
        "status": {
            "readyToUse": True,
            "restoreSize": "20Gi",
            "creationTime": "2026-11-29T11:00:00Z",
        },
    }
    later = run(SNAP, {"workspace-volume": DISK_READY, "vm": RUNNING, "snapshot-nightly": taken})
    assert (
        later.resources["snapshot-nightly"]["metadata"]["annotations"][
            "sandbox.cozystack.io/consistency"
        ]
        == "Clean"
    )
    assert snapshot_entry(later) == {
        "name": "nightly",
        "volumeSnapshot": snapshot_name(workspace(SNAP), "nightly"),
        "readyToUse": True,
        "restoreSize": "20Gi",
        "creationTime": "2026-11-29T11:00:00Z",
        "consistency": "Clean",
        "state": "Ready",
    }
    assert later.ready["snapshot-nightly"] is True


def test_clean_only_presets_hold_new_snapshots_until_suspended() -> None:
    running = run(SNAP, {"workspace-volume": DISK_READY, "vm": RUNNING}, p=CLEAN_ONLY)
    assert "snapshot-nightly" not in running.resources
    assert (
        snapshot_entry(running)["message"]
        == "preset 'standard' takes clean snapshots only: suspend the sandbox to take it"
    )
    suspended = run(
        {**SNAP, "power": "Suspended"},
        {"workspace-volume": DISK_READY, "vm": STOPPED},
        p=CLEAN_ONLY,
    )
    assert "snapshot-nightly" in suspended.resources


def test_a_snapshot_already_taken_stays_when_the_sandbox_runs_on_a_clean_only_preset() -> None:
    taken = {
        "metadata": {"annotations": {"sandbox.cozystack.io/consistency": "Clean"}},
        "spec": {"source": {"persistentVolumeClaimName": "alice-api-workspace"}},
    }
    out = run(
        SNAP,
        {"workspace-volume": DISK_READY, "vm": RUNNING, "snapshot-nightly": taken},
        p=CLEAN_ONLY,
    )
    assert "snapshot-nightly" in out.resources


def test_a_failed_snapshot_reports_the_storage_error() -> None:
    failed = {"status": {"readyToUse": False, "error": {"message": "snapshot quota exceeded"}}}
    out = run(SNAP, {"workspace-volume": DISK_READY, "snapshot-nightly": failed})
    assert snapshot_entry(out)["state"] == "Failed"
    assert snapshot_entry(out)["message"] == "snapshot quota exceeded"
    snapshots = next(c for c in out.conditions if c.type == "Snapshots")
    assert (snapshots.status, snapshots.reason) == ("False", "SnapshotFailed")


def test_a_snapshot_source_never_moves() -> None:
    taken = {
        "spec": {
            "volumeSnapshotClassName": "old-class",
            "source": {"persistentVolumeClaimName": "old-pvc"},
        }
    }
    out = run(SNAP, {"workspace-volume": DISK_READY, "snapshot-nightly": taken})
    assert out.resources["snapshot-nightly"]["spec"] == taken["spec"]


def test_removing_an_entry_deletes_only_that_snapshot() -> None:
    before = run({"snapshots": [{"name": "a"}, {"name": "b"}]}, {"workspace-volume": DISK_READY})
    observed = {
        "workspace-volume": DISK_READY,
        **{k: v for k, v in before.resources.items() if k.startswith("snapshot-")},
    }
    after = run({"snapshots": [{"name": "b"}]}, observed)
    assert sorted(k for k in after.resources if k.startswith("snapshot-")) == ["snapshot-b"]


# --- restore and fork ---------------------------------------------------------------------

RESTORE = {"restoreFrom": {"snapshot": "bob-frontend-nightly"}}
READY_SNAPSHOT = {
    "apiVersion": "snapshot.storage.k8s.io/v1",
    "kind": "VolumeSnapshot",
    "metadata": {
        "name": "bob-frontend-nightly",
        "namespace": NAMESPACE,
        "ownerReferences": [owner_reference("bob-frontend")],
    },
    "status": {"readyToUse": True, "restoreSize": "30Gi"},
}


def asked(out: Rendered) -> dict[str, Any]:
    """What the render requires besides the look-ups of the names it is about to take."""
    return {k: v for k, v in out.requirements.items() if not k.startswith("existing-")}


@pytest.mark.parametrize(
    ("required", "message"),
    [
        pytest.param(
            None,
            "waiting for VolumeSnapshot 'bob-frontend-nightly' in 'tenant-acme' to exist",
            id="not-fetched-yet",
        ),
        pytest.param(
            {"restore-snapshot": []},
            "waiting for VolumeSnapshot 'bob-frontend-nightly' in 'tenant-acme' to exist",
            id="missing",
        ),
        pytest.param(
            {"restore-snapshot": [{**READY_SNAPSHOT, "status": {"readyToUse": False}}]},
            "waiting for VolumeSnapshot 'bob-frontend-nightly' to be ready to use",
            id="not-ready",
        ),
    ],
)
def test_restore_composes_no_disk_until_the_snapshot_is_ready(required: Any, message: str) -> None:
    out = run(RESTORE, required=required)
    assert "workspace-volume" not in out.resources
    assert "vm" not in out.resources
    assert asked(out) == {
        "restore-snapshot": {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshot",
            "name": "bob-frontend-nightly",
            "namespace": "tenant-acme",
        }
    }
    provisioned = next(c for c in out.conditions if c.type == "Provisioned")
    assert (out.status["phase"], provisioned.reason, provisioned.message) == (
        "Pending",
        "WaitingForRestoreSnapshot",
        message,
    )


def test_restore_from_a_ready_snapshot_makes_the_disk_from_it_at_least_its_size() -> None:
    out = run(RESTORE, required={"restore-snapshot": [READY_SNAPSHOT]})
    disk = out.resources["workspace-volume"]
    assert disk["spec"]["source"] == {
        "snapshot": {"namespace": "tenant-acme", "name": "bob-frontend-nightly"}
    }
    assert disk["spec"]["storage"]["resources"]["requests"]["storage"] == "30Gi"
    assert validate({**disk, "metadata": {**disk["metadata"], "namespace": NAMESPACE}}) == []
    assert "vm" in out.resources


def test_restore_into_a_disk_smaller_than_the_snapshot_is_refused() -> None:
    with pytest.raises(FieldError) as err:
        run(
            {**RESTORE, "resources": {"disk": "20Gi"}},
            required={"restore-snapshot": [READY_SNAPSHOT]},
        )
    assert (
        str(err.value)
        == "spec.resources.disk: 20Gi is smaller than snapshot 'bob-frontend-nightly' (30Gi)"
    )


def test_once_the_disk_exists_the_snapshot_no_longer_matters() -> None:
    disk = {
        "spec": {
            "source": {"snapshot": {"namespace": "tenant-acme", "name": "bob-frontend-nightly"}}
        }
    }
    out = run(RESTORE, {"workspace-volume": disk}, required={"restore-snapshot": []})
    assert asked(out) == {}
    assert out.resources["workspace-volume"]["spec"] == disk["spec"]


@pytest.mark.parametrize(
    ("spec", "disk_source", "message"),
    [
        pytest.param(
            {"restoreFrom": {"snapshot": "other"}},
            {"snapshot": {"namespace": "tenant-acme", "name": "bob-frontend-nightly"}},
            "spec.restoreFrom.snapshot: is fixed when the sandbox is created; the workspace disk was restored from 'bob-frontend-nightly'",
            id="changed",
        ),
        pytest.param(
            RESTORE,
            {"pvc": {"namespace": "cozy-public", "name": "vm-default-images-ubuntu-2404"}},
            "spec.restoreFrom.snapshot: is fixed when the sandbox is created; the workspace disk was made from the image",
            id="added-after-creation",
        ),
        pytest.param(
            {},
            {"snapshot": {"namespace": "tenant-acme", "name": "bob-frontend-nightly"}},
            "spec.restoreFrom: can't be removed: the workspace disk was restored from 'bob-frontend-nightly'",
            id="removed",
        ),
    ],
)
def test_restore_from_is_fixed_at_creation(
    spec: dict[str, Any], disk_source: dict[str, Any], message: str
) -> None:
    with pytest.raises(FieldError) as err:
        run(spec, {"workspace-volume": {"spec": {"source": disk_source}}})
    assert str(err.value) == message


async def test_the_function_asks_crossplane_for_the_snapshot() -> None:
    runner = FunctionRunner(clock=lambda: NOW)
    first = await runner.RunFunction(request(xr(RESTORE)), None)
    selector = first.requirements.resources["restore-snapshot"]
    assert (selector.api_version, selector.kind, selector.match_name, selector.namespace) == (
        "snapshot.storage.k8s.io/v1",
        "VolumeSnapshot",
        "bob-frontend-nightly",
        "tenant-acme",
    )
    assert "workspace-volume" not in first.desired.resources
    req = request(xr(RESTORE))
    req.required_resources["restore-snapshot"].items.append(
        fnv1.Resource(resource=resource.dict_to_struct(READY_SNAPSHOT))
    )
    second = await runner.RunFunction(req, None)
    disk = resource.struct_to_dict(second.desired.resources["workspace-volume"].resource)
    assert disk["spec"]["source"]["snapshot"]["name"] == "bob-frontend-nightly"


# --- auto-suspend -------------------------------------------------------------------------


def at(delta: timedelta) -> dict[str, Any]:
    return {"lifetime": {"suspendAt": (NOW + delta).strftime("%Y-%m-%dT%H:%M:%SZ")}}


def test_before_the_deadline_the_sandbox_runs_and_crossplane_calls_back_at_it() -> None:
    out = run(at(timedelta(seconds=42)), {"workspace-volume": DISK_READY, "vm": RUNNING})
    assert out.resources["vm"]["spec"]["runStrategy"] == "Always"
    assert out.ttl_seconds == 42
    assert run(at(timedelta(hours=2))).ttl_seconds == 60


def test_past_the_deadline_the_sandbox_is_suspended_for_its_lifetime() -> None:
    out = run(at(-timedelta(seconds=1)), {"workspace-volume": DISK_READY, "vm": STOPPED})
    assert out.resources["vm"]["spec"]["runStrategy"] == "Halted"
    suspended = next(c for c in out.conditions if c.type == "Suspended")
    assert (out.status["phase"], suspended.status, suspended.reason) == (
        "Suspended",
        "True",
        "LifetimeExpired",
    )
    assert (
        suspended.message
        == "spec.lifetime.suspendAt (2026-11-29T11:59:59Z) has passed; move it forward to resume"
    )
    assert out.status["suspendAt"] == "2026-11-29T11:59:59Z"


def test_moving_the_deadline_forward_resumes_the_sandbox() -> None:
    out = run(at(timedelta(hours=1)), {"workspace-volume": DISK_READY, "vm": STOPPED})
    assert out.resources["vm"]["spec"]["runStrategy"] == "Always"
    assert phase(out) == ("Provisioning", "PowerRunning")


def test_a_deadline_beyond_the_preset_cap_is_refused() -> None:
    assert run(at(timedelta(hours=8)), p=CAPPED).ttl_seconds == 60
    with pytest.raises(FieldError) as err:
        run(at(timedelta(hours=9, minutes=30)), p=CAPPED)
    assert (
        str(err.value)
        == "spec.lifetime.suspendAt: is 9h30m ahead; preset 'standard' allows at most 8h"
    )


async def test_the_response_ttl_is_the_time_left() -> None:
    rsp = await FunctionRunner(clock=lambda: NOW).RunFunction(
        request(xr(at(timedelta(seconds=17)))), None
    )
    assert rsp.meta.ttl.seconds == 17


# --- fields a runtime can't honour ---------------------------------------------------------


@pytest.mark.parametrize(("preset", "runtime"), [("kata", "kata"), ("gvisor", "gvisor")])
def test_an_existing_pod_sandbox_with_ssh_keys_is_warned_and_still_reconciled(
    preset: str, runtime: str
) -> None:
    # A new one is refused (test_bad_input); one made before that keeps its power and deadline.
    existing = run({"preset": preset}).resources
    suspended = {"preset": preset, "power": "Suspended"}
    out = run({**suspended, "ssh": {"authorizedKeys": [KEYS[0]]}}, existing)
    assert out.warnings == [
        f"spec.ssh.authorizedKeys: preset '{preset}' runs the sandbox in a pod (runtime {runtime}), which never receives SSH keys and serves no SSH; the keys are ignored, remove them"
    ]
    assert out.resources == run(suspended, existing).resources
