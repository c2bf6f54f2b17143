"""What every kind of workload answers, so that nothing else asks which kind it is.

A workload is what runs the sandbox and holds its workspace: a KubeVirt VM on a DataVolume, an
agent-sandbox Sandbox with a claim composed beside it, an older Sandbox whose claim comes from
its template, or a StatefulSet in a ComputePlane. `workloads.of` decides which, once; status,
snapshots, restore and disk growth ask the answer.
"""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Protocol

from function.compose.conditions import Progress
from function.compose.sizing import Size
from function.model import Manifest, Observed
from function.model.platform import Image, Preset, SandboxPlatform
from function.model.spec import WorkspaceSandbox

# The guest account on a new VM's disk, and on one an earlier release made; the annotation that
# records it on the VM, its disk and the disk's snapshots. Here beside the protocol, not with the
# VM: snapshots record it, and a restore checks it, whichever kind took the snapshot.
USER = "user"
LEGACY_USER = "sandbox"
ACCOUNTS = (USER, LEGACY_USER)
GUEST_USER = "sandbox.cozystack.io/guest-user"


@dataclass(frozen=True)
class Origin:
    """What an existing workspace disk was made from, as far as it can be read."""

    readable: bool
    """Whether the disk's source can be read at all (an older Sandbox's may not be)."""
    snapshot: str | None
    """The VolumeSnapshot it was restored from; None when made from the image."""


@dataclass(frozen=True)
class Build:
    """What composing a workload takes."""

    ws: WorkspaceSandbox
    preset: Preset
    platform: SandboxPlatform
    image: Image
    size: Size
    observed: Observed
    account: str | None = None
    """The guest account on a VM's disk (`account.py`); None for a pod's."""


class Workload(Protocol):
    key: str
    """The composition-resource name of the object that runs the sandbox."""

    def compose(self, build: Build) -> dict[str, Manifest]:
        """The workload and its workspace disk, keyed by composition-resource name."""
        ...

    def progress(self, ws: WorkspaceSandbox, observed: Observed, now: datetime) -> Progress:
        """The phase, and the Provisioned and Suspended conditions, from observed state."""
        ...

    def disk_ready(self, observed: Observed) -> bool:
        """Whether the workspace disk is done being created, and so may be snapshotted."""
        ...

    def stopped(self, observed: Observed) -> bool:
        """Whether it is observed stopped: nothing writes to the disk."""
        ...

    def claim_name(self, ws: WorkspaceSandbox) -> str:
        """The PVC that holds the workspace."""
        ...

    def has_claim(self, observed: Observed) -> bool:
        """Whether that PVC is known to exist."""
        ...

    def guest_account(self, observed: Observed, restored: str | None, /) -> str | None:
        """The guest account on the disk; None where the disk holds none."""
        ...

    def current_size(self, observed: Observed) -> Decimal | None:
        """The existing disk's size, as last asked for; None before it exists."""
        ...

    def fixed_size(self, platform: SandboxPlatform, /) -> str | None:
        """Why a larger size can't reach the existing disk; None where it can."""
        ...

    def restored_from(self, observed: Observed) -> Origin | None:
        """What the existing disk was made from; None while there is no disk."""
        ...
