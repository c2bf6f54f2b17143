"""Which kind of workload a sandbox has, decided here and nowhere else; a folder per kind.

Each kind's folder holds what only it composes, and a `workload.py` that answers `Workload`
(`compose/workload.py`). Adding a runtime means adding such a folder and a line in `kind_of`.
"""

from function.compose.workload import Workload
from function.compose.workloads.agent_sandbox import sandbox
from function.compose.workloads.agent_sandbox.claim_template import ClaimTemplateSandbox
from function.compose.workloads.agent_sandbox.workload import AgentSandbox
from function.compose.workloads.kubevirt.workload import VirtualMachine
from function.compose.workloads.plane_statefulset.workload import StatefulSet
from function.model import Observed
from function.model.platform import Preset

__all__ = ["kind_of", "of"]


def kind_of(preset: Preset) -> type[Workload]:
    """The kind of workload the preset runs, for what is asked before one exists.

    The kinds of one preset answer those questions alike: `of` only tells an older Sandbox
    from a new one.
    """
    if preset.runtime == "kubevirt":
        return VirtualMachine
    if preset.compute_plane is not None and not preset.compute_plane.agent_sandbox:
        return StatefulSet
    return AgentSandbox


def of(preset: Preset, observed: Observed) -> Workload:
    """The preset's workload; `observed` is what is observed where it runs (inside a plane's).

    A Sandbox observed with claim templates was made before claims were composed beside it,
    and keeps them.
    """
    kind = kind_of(preset)
    if kind is AgentSandbox and sandbox.observed_claims(observed):
        return ClaimTemplateSandbox()
    return kind()
