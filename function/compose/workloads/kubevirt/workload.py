"""A KubeVirt VirtualMachine booting from a standalone DataVolume, which outlives it."""

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, ClassVar

from function.compose.conditions import RUNNING, Condition, Progress, done, not_created, pending
from function.compose.names import claim_name
from function.compose.observed import condition, dig, requested_storage
from function.compose.readiness import DISK_READY_PHASES
from function.compose.sizing import Size
from function.compose.workload import Build, Origin, Room
from function.compose.workloads.kubevirt import account, virtual_machine, workspace_volume
from function.model import Manifest, Observed
from function.model.platform import Preset, SandboxPlatform
from function.model.quantity import format_bytes, format_cpu
from function.model.spec import WorkspaceSandbox

# printableStatus values that need a human, not patience.
VM_FAILURES = frozenset(
    {
        "CrashLoopBackOff",
        "ErrorUnschedulable",
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrorPvcNotFound",
        "ErrorDataVolumeNotFound",
        "DataVolumeError",
    }
)
# CDI fills a DataVolume's claim through a second, "prime" claim of the same size, and may
# run an importer or clone pod beside the VM.
_DISK_COPIES = 2
_MIGRATING = frozenset({"LiveMigrate", "LiveMigrateIfPossible"})


def _message(obj: Any, *kinds: str) -> str:
    for kind in kinds:
        c = condition(obj, kind)
        if c and c.get("message"):
            return str(c["message"])
    return ""


def _disk_step(dv: Any) -> str:
    phase = dig(dv, "status", "phase") or "Pending"
    progress = dig(dv, "status", "progress")
    shown = f" ({progress})" if isinstance(progress, str) and progress not in ("", "N/A") else ""
    return f"waiting for the workspace disk: DataVolume phase {phase}{shown}"


def _failed(vm: Any, dv: Any) -> Condition | None:
    if dig(dv, "status", "phase") == "Failed":
        msg = _message(dv, "Running", "Ready") or "the DataVolume failed"
        return pending("Provisioned", "DiskFailed", msg)
    printable = dig(vm, "status", "printableStatus")
    if printable in VM_FAILURES:
        why = _message(vm, "Failure", "Ready") or "see its events"
        return pending(
            "Provisioned", "VirtualMachineFailed", f"VirtualMachine is {printable}: {why}"
        )
    return None


class VirtualMachine:
    key = virtual_machine.KEY
    serves_ssh: ClassVar[bool] = True
    agent_from_input: ClassVar[bool] = True
    disk_lives_on: ClassVar[str] = "kubevirt"
    keeps_its_grace: ClassVar[bool] = True

    def compose(self, build: Build) -> dict[str, Manifest]:
        ws, preset, platform, size, observed = (
            build.ws,
            build.preset,
            build.platform,
            build.size,
            build.observed,
        )
        assert build.account is not None  # noqa: S101  # guest_account always names one.
        out = workspace_volume.workspace_volume(
            ws, preset, build.image, size, observed, build.account
        )
        out |= workspace_volume.growth(ws, platform, size, observed)
        out |= virtual_machine.virtual_machine(ws, preset, platform, size, build.account)
        return out

    def progress(  # noqa: PLR0911  # a phase each
        self,
        ws: WorkspaceSandbox,
        observed: Observed,
        now: datetime,  # noqa: ARG002  # the protocol's; a VM's progress needs no clock
    ) -> Progress:
        vm, dv = observed.get(virtual_machine.KEY), observed.get(workspace_volume.KEY)
        printable = dig(vm, "status", "printableStatus") or "unknown"
        suspend = ws.spec.power == "Suspended"

        failed = _failed(vm, dv)
        if failed is not None:
            return Progress("Failed", failed, RUNNING)
        if vm is None and dv is None:
            return not_created(ws, "the disk and VM")
        if dig(dv, "status", "phase") not in DISK_READY_PHASES:
            waiting = pending("Provisioned", "WaitingForDisk", _disk_step(dv))
            not_yet = pending("Suspended", "WaitingForDisk", "the workspace disk is not ready yet")
            return Progress("Provisioning", waiting, not_yet if suspend else RUNNING)
        disk_ready = done("Provisioned", "Provisioned", "the workspace disk is ready")
        if suspend and printable == "Stopped":
            stopped = done(
                "Suspended", "Suspended", "the VM is stopped; the workspace disk is kept"
            )
            return Progress("Suspended", disk_ready, stopped)
        if suspend:
            waiting_msg = f"waiting for the VM to stop (printableStatus {printable})"
            return Progress(
                "Suspending", disk_ready, pending("Suspended", "Suspending", waiting_msg)
            )
        if dig(vm, "status", "ready") is True:
            ready = done("Provisioned", "Provisioned", "the disk is ready and the VM is running")
            return Progress("Running", ready, RUNNING)
        waiting_msg = f"waiting for the VM to become ready (printableStatus {printable})"
        return Progress("Provisioning", pending("Provisioned", "StartingVM", waiting_msg), RUNNING)

    def disk_ready(self, observed: Observed) -> bool:
        return dig(observed.get(workspace_volume.KEY), "status", "phase") in DISK_READY_PHASES

    def stopped(self, observed: Observed) -> bool:
        return bool(
            dig(observed.get(virtual_machine.KEY), "status", "printableStatus") == "Stopped"
        )

    def claim_name(self, ws: WorkspaceSandbox) -> str:
        # A DataVolume's PVC has the DataVolume's name.
        return claim_name(ws)

    def has_claim(self, observed: Observed) -> bool:
        return workspace_volume.KEY in observed

    def guest_account(self, observed: Observed, restored: str | None, /) -> str | None:
        return account.guest_account(observed, restored)

    def current_size(self, observed: Observed) -> Decimal | None:
        sizes = [
            requested_storage(observed.get(workspace_volume.KEY), "spec", "storage"),
            workspace_volume.grown(observed),
        ]
        known = [s for s in sizes if s is not None]
        return max(known) if known else None

    def fixed_size(self, platform: SandboxPlatform, /) -> str | None:
        if platform.disk_expansion is not None:
            return None
        return "the platform sets no diskExpansion, and a DataVolume can't change after creation"

    def restored_from(self, observed: Observed) -> Origin | None:
        disk = observed.get(workspace_volume.KEY)
        if disk is None:
            return None
        source, ref = dig(disk, "spec", "source"), dig(disk, "spec", "sourceRef")
        readable = isinstance(source, Mapping) or isinstance(ref, Mapping)
        return Origin(readable, dig(source, "snapshot", "name"))

    def sized_by_instancetype(self, preset: Preset, /) -> bool:
        return preset.kubevirt.instancetype is not None

    def room(self, preset: Preset, size: Size, /) -> Room:
        """Two VM pods while a live migration runs, and two claims, CDI's "prime" one too.

        A VM's pod asks KubeVirt's overhead beyond the guest, and a live migration runs a second
        one for a while; CDI fills the disk through a second claim.
        """
        headroom = preset.quota_headroom
        copies = 2 if preset.kubevirt.eviction_strategy in _MIGRATING else 1
        cpu = size.cpu * copies + headroom.cpu
        memory = size.memory * copies + headroom.memory
        compute = {"requests.cpu": format_cpu(cpu), "requests.memory": format_bytes(memory)}
        return Room(compute, claims=_DISK_COPIES, disk=size.disk * _DISK_COPIES, pods=copies + 1)

    def container_limits(self, _preset: Preset, _size: Size, /) -> dict[str, str] | None:
        return None
