"""Which composed resources are ready, judged by kind from their observed state.

Crossplane doesn't derive readiness: the function marks each composed resource. An unobserved
resource is never ready; kinds with a known shape get a check of their own; anything else is
ready when its Ready condition is True (the order function-auto-ready uses).
"""

from collections.abc import Callable, Mapping
from typing import Any

from function.compose.observed import condition, dig
from function.model import Manifest, Observed

Seen = Mapping[str, Any]

# A DataVolume waiting for its first consumer is as ready as it can be until the VM starts.
DISK_READY_PHASES = frozenset({"Succeeded", "WaitForFirstConsumer", "PendingPopulation"})


def _vm(desired: Manifest, observed: Seen) -> bool:
    if dig(desired, "spec", "runStrategy") == "Halted":
        return bool(dig(observed, "status", "printableStatus") == "Stopped")
    return bool(dig(observed, "status", "ready") is True or _condition_true(desired, observed))


def _sandbox(desired: Manifest, observed: Seen) -> bool:
    if dig(desired, "spec", "operatingMode") == "Suspended":
        return _has(observed, "Suspended")
    return _has(observed, "Ready")


def _has(observed: Seen, kind: str) -> bool:
    found = condition(observed, kind)
    return found is not None and found.get("status") == "True"


def _data_volume(_: Manifest, observed: Seen) -> bool:
    return dig(observed, "status", "phase") in DISK_READY_PHASES


def _claim(_: Manifest, observed: Seen) -> bool:
    # Bound, or waiting for the pod that will be its first consumer.
    return dig(observed, "status", "phase") in ("Bound", "Pending")


def _volume_snapshot(_: Manifest, observed: Seen) -> bool:
    return dig(observed, "status", "readyToUse") is True


def _exists(_: Manifest, __: Seen) -> bool:
    return True


def _condition_true(_: Manifest, observed: Seen) -> bool:
    return _has(observed, "Ready")


CHECKS: dict[tuple[str, str], Callable[[Manifest, Seen], bool]] = {
    ("kubevirt.io/v1", "VirtualMachine"): _vm,
    ("cdi.kubevirt.io/v1beta1", "DataVolume"): _data_volume,
    ("agents.x-k8s.io/v1beta1", "Sandbox"): _sandbox,
    ("snapshot.storage.k8s.io/v1", "VolumeSnapshot"): _volume_snapshot,
    ("v1", "Service"): _exists,
    ("v1", "ServiceAccount"): _exists,
    ("networking.k8s.io/v1", "NetworkPolicy"): _exists,
    ("cilium.io/v2", "CiliumNetworkPolicy"): _exists,
    ("v1", "PersistentVolumeClaim"): _claim,
    # A ProviderConfig has no status to wait for; Objects using it report their own.
    ("kubernetes.m.crossplane.io/v1alpha1", "ProviderConfig"): _exists,
}


def is_ready(desired: Manifest, observed: Seen | None) -> bool:
    if observed is None:
        return False
    check = CHECKS.get((desired.get("apiVersion", ""), desired.get("kind", "")), _condition_true)
    return check(desired, observed)


def readiness(desired: dict[str, Manifest], observed: Observed) -> dict[str, bool]:
    return {name: is_ready(m, observed.get(name)) for name, m in desired.items()}
