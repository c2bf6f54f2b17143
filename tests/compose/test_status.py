from typing import Any

import pytest

from function.compose.names import snapshot_name
from function.compose.status import Condition
from function.render import render
from tests.support import NOW, PLATFORM, owned, workspace


def rendered_status(
    ws: Any, observed: dict[str, Any]
) -> tuple[dict[str, Any], tuple[Condition, ...], bool]:
    """The XR status, conditions and readiness a whole render reports for `observed`."""
    out = render(ws, PLATFORM, owned(observed), NOW)
    return out.status, out.conditions, out.composite_ready


def dv(phase: str, **status: Any) -> dict[str, Any]:
    return {"status": {"phase": phase, **status}}


def vm(printable: str, **status: Any) -> dict[str, Any]:
    return {"status": {"printableStatus": printable, **status}}


@pytest.mark.parametrize(
    ("power", "observed", "phase", "provisioned", "suspended"),
    [
        pytest.param(
            "Running",
            {},
            "Pending",
            ("False", "Creating"),
            ("False", "PowerRunning"),
            id="nothing-observed",
        ),
        pytest.param(
            "Running",
            {"workspace-volume": dv("CloneInProgress", progress="45.00%")},
            "Provisioning",
            ("False", "WaitingForDisk"),
            ("False", "PowerRunning"),
            id="disk-cloning",
        ),
        pytest.param(
            "Running",
            {"workspace-volume": dv("Succeeded"), "vm": vm("Starting")},
            "Provisioning",
            ("False", "StartingVM"),
            ("False", "PowerRunning"),
            id="vm-starting",
        ),
        pytest.param(
            "Running",
            {"workspace-volume": dv("Succeeded"), "vm": vm("Running", ready=True)},
            "Running",
            ("True", "Provisioned"),
            ("False", "PowerRunning"),
            id="running",
        ),
        pytest.param(
            "Running",
            {"workspace-volume": dv("Failed"), "vm": vm("Provisioning")},
            "Failed",
            ("False", "DiskFailed"),
            ("False", "PowerRunning"),
            id="disk-failed",
        ),
        pytest.param(
            "Running",
            {"workspace-volume": dv("Succeeded"), "vm": vm("ErrorUnschedulable")},
            "Failed",
            ("False", "VirtualMachineFailed"),
            ("False", "PowerRunning"),
            id="vm-unschedulable",
        ),
        pytest.param(
            "Suspended",
            {},
            "Pending",
            ("False", "Creating"),
            ("False", "Creating"),
            id="suspended-before-creation",
        ),
        pytest.param(
            "Suspended",
            {"workspace-volume": dv("Succeeded"), "vm": vm("Stopping")},
            "Suspending",
            ("True", "Provisioned"),
            ("False", "Suspending"),
            id="suspending",
        ),
        pytest.param(
            "Suspended",
            {"workspace-volume": dv("Succeeded"), "vm": vm("Stopped")},
            "Suspended",
            ("True", "Provisioned"),
            ("True", "Suspended"),
            id="suspended",
        ),
        pytest.param(
            "Suspended",
            {"workspace-volume": dv("Succeeded"), "vm": vm("Running", ready=True)},
            "Suspending",
            ("True", "Provisioned"),
            ("False", "Suspending"),
            id="suspend-requested-vm-still-up",
        ),
    ],
)
def test_phase_follows_observed_state(
    power: str,
    observed: dict[str, Any],
    phase: str,
    provisioned: tuple[str, str],
    suspended: tuple[str, str],
) -> None:
    status, conditions, usable = rendered_status(workspace({"power": power}), observed)
    assert status["phase"] == phase
    assert [(c.type, c.status, c.reason) for c in conditions[:2]] == [
        ("Provisioned", *provisioned),
        ("Suspended", *suspended),
    ]
    assert usable is (phase == "Running")


def test_disk_progress_is_shown_while_cloning() -> None:
    observed = {"workspace-volume": dv("CloneInProgress", progress="45.00%")}
    _, conditions, _ = rendered_status(workspace(), observed)
    assert (
        conditions[0].message
        == "waiting for the workspace disk: DataVolume phase CloneInProgress (45.00%)"
    )


def test_status_reports_snapshots_in_name_order_with_what_was_observed() -> None:
    ws = workspace({"snapshots": [{"name": "nightly"}, {"name": "before-refactor"}]})
    # One taken before composed names carried a hash, under the name it has; one not taken yet.
    observed = {
        "snapshot-nightly": {
            "metadata": {"name": "alice-api-nightly"},
            "status": {
                "readyToUse": True,
                "restoreSize": "20Gi",
                "creationTime": "2026-11-28T01:00:00Z",
            },
        }
    }
    status, _, _ = rendered_status(ws, observed)
    assert status["snapshots"] == [
        {
            "name": "before-refactor",
            "volumeSnapshot": snapshot_name(ws, "before-refactor"),
            "readyToUse": False,
            "state": "Waiting",
            "message": "waiting for the workspace disk to be created",
        },
        {
            "name": "nightly",
            "volumeSnapshot": "alice-api-nightly",
            "readyToUse": True,
            "restoreSize": "20Gi",
            "creationTime": "2026-11-28T01:00:00Z",
            "consistency": "Crash",
            "state": "Ready",
        },
    ]


def test_status_names_preset_runtime_placement_and_suspend_deadline_in_utc() -> None:
    ws = workspace({"lifetime": {"suspendAt": "2026-12-01T19:00:00+01:00"}})
    status, _, _ = rendered_status(ws, {})
    assert status == {
        "phase": "Pending",
        "preset": "standard",
        "runtime": "kubevirt",
        "placement": "Namespace",
        "snapshots": [],
        "suspendAt": "2026-12-01T18:00:00Z",
    }
