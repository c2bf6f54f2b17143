from typing import Any

import pytest

from function.compose.readiness import is_ready

VM_RUNNING = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "spec": {"runStrategy": "Always"},
}
VM_HALTED = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "spec": {"runStrategy": "Halted"},
}
DV = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume"}
SNAP = {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot"}
SVC = {"apiVersion": "v1", "kind": "Service"}
OTHER = {"apiVersion": "example.org/v1", "kind": "Thing"}


@pytest.mark.parametrize(
    ("desired", "observed", "ready"),
    [
        pytest.param(VM_RUNNING, None, False, id="unobserved-vm"),
        pytest.param(VM_RUNNING, {"status": {"ready": True}}, True, id="vm-reports-ready"),
        pytest.param(
            VM_RUNNING,
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            True,
            id="vm-ready-condition",
        ),
        pytest.param(
            VM_RUNNING, {"status": {"printableStatus": "Starting"}}, False, id="vm-starting"
        ),
        pytest.param(
            VM_RUNNING,
            {"status": {"printableStatus": "Stopped"}},
            False,
            id="vm-stopped-but-wanted-running",
        ),
        pytest.param(
            VM_HALTED, {"status": {"printableStatus": "Stopped"}}, True, id="halted-vm-stopped"
        ),
        pytest.param(
            VM_HALTED,
            {"status": {"printableStatus": "Stopping", "ready": True}},
            False,
            id="halted-vm-still-stopping",
        ),
        pytest.param(DV, {"status": {"phase": "Succeeded"}}, True, id="disk-succeeded"),
        pytest.param(
            DV, {"status": {"phase": "WaitForFirstConsumer"}}, True, id="disk-waits-for-vm"
        ),
        pytest.param(DV, {"status": {"phase": "CloneInProgress"}}, False, id="disk-cloning"),
        pytest.param(DV, {"status": {"phase": "Failed"}}, False, id="disk-failed"),
        pytest.param(DV, {}, False, id="disk-without-status"),
        pytest.param(SNAP, {"status": {"readyToUse": True}}, True, id="snapshot-ready"),
        pytest.param(SNAP, {"status": {"readyToUse": False}}, False, id="snapshot-not-ready"),
        pytest.param(
            SNAP,
            {"status": {"readyToUse": "true"}},
            False,
            id="snapshot-ready-as-string-is-not-trusted",
        ),
        pytest.param(SVC, {}, True, id="service-observed"),
        pytest.param(SVC, None, False, id="service-unobserved"),
        pytest.param(
            OTHER,
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            True,
            id="other-kind-by-ready-condition",
        ),
        pytest.param(OTHER, {"status": {}}, False, id="other-kind-without-condition"),
        pytest.param(VM_RUNNING, {"status": "garbage"}, False, id="malformed-status"),
    ],
)
def test_readiness_by_kind(
    desired: dict[str, Any], observed: dict[str, Any] | None, ready: bool
) -> None:
    assert is_ready(desired, observed) is ready
