"""What every kind of workload answers, so that nothing else asks which kind it is.

A workload is what runs the sandbox and holds its workspace: a KubeVirt VM on a DataVolume, an
agent-sandbox Sandbox with a claim composed beside it, an older Sandbox whose claim comes from
its template, or a StatefulSet in a ComputePlane. `workloads.of` decides which, once; status,
snapshots, restore, disk growth and the placements ask the answer. What is asked before a
workload exists (whether SSH keys can reach it, where its disk lives) its class answers, from
`workloads.kind_of`.
"""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import ClassVar, Protocol

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


@dataclass(frozen=True)
class Room:
    """What a namespace of the sandbox's own must have room for, beyond one ClusterIP Service."""

    compute: dict[str, str]
    """The quota's CPU and memory (and ephemeral storage), by quota key."""
    claims: int
    disk: Decimal
    """All the claims' storage together."""
    pods: int


class Workload(Protocol):
    key: str
    """The composition-resource name of the object that runs the sandbox."""
    serves_ssh: ClassVar[bool]
    """Whether SSH keys reach it and an SSH server serves them: a VM's boot script installs
    them; nothing delivers them into a pod, which a key would silently miss."""
    agent_from_input: ClassVar[bool]
    """Whether only `input.agent` gives it an agent (a VM's agent disk); a pod without it runs
    its image's own."""
    disk_lives_on: ClassVar[str]
    """Where its workspace disk lives, as `never_moves` tells them apart: `kubevirt` (a
    DataVolume) or `pod` (a claim)."""
    keeps_its_grace: ClassVar[bool]
    """Whether its pod's termination grace is the preset's (a VM's, for the guest to shut
    down), which a placement leaves alone rather than shortening."""

    def sized_by_instancetype(self, preset: Preset, /) -> bool:
        """Whether the preset's instance type sizes its CPU and memory, not spec.resources."""
        ...

    def room(self, preset: Preset, size: Size, /) -> Room:
        """What it needs in a namespace of its own, the preset's headroom included."""
        ...

    def container_limits(self, preset: Preset, size: Size, /) -> dict[str, str] | None:
        """What bounds each container in a namespace of its own; None: nothing.

        A VM's pod sizes itself (the guest plus KubeVirt's overhead): a bound would cut it short.
        """
        ...

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
