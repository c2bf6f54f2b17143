"""The guest account on a VM's workspace disk: `user` on a new disk, `sandbox` on an old one.

The account lives on the disk, so it is recorded (annotation `sandbox.cozystack.io/guest-user`)
on the VM, on the disk's DataVolume and on the disk's snapshots. A VM or a disk observed
without it was made before accounts were named `user`, and keeps `sandbox`; a disk restored
from a snapshot has the account the snapshot records (`restore.py`). So the boot script never
makes a second account on a disk.
"""

from function.compose.observed import dig
from function.compose.workload import ACCOUNTS, GUEST_USER, LEGACY_USER, USER
from function.compose.workloads.kubevirt import virtual_machine, workspace_volume
from function.errors import FieldError
from function.model import Observed


def guest_account(observed: Observed, restored: str | None = None) -> str:
    """The account on the workspace disk: what the VM or the disk records, else what it had.

    `restored` is the account of the disk a restored disk was made from; a new disk gets `user`.
    """
    seen = [(key, observed.get(key)) for key in (virtual_machine.KEY, workspace_volume.KEY)]
    for key, found in seen:
        recorded = dig(found, "metadata", "annotations", GUEST_USER)
        if recorded is None:
            continue
        if recorded not in ACCOUNTS:
            # Only the function writes it; anything else would make the boot script create an
            # account the disk never had, or name one the script must not touch.
            raise FieldError(
                "spec.crossplane.resourceRefs",
                f"{key} is {dig(found, 'kind')} {dig(found, 'metadata', 'name')!r}, whose "
                f"annotation {GUEST_USER} names the guest account {recorded!r}, which this "
                f"function never writes ({' or '.join(ACCOUNTS)}); set it back to the account "
                "the workspace disk holds",
            )
        return str(recorded)
    if any(found is not None for _, found in seen):
        return LEGACY_USER
    return restored or USER
