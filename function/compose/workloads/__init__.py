"""Which kind of workload a sandbox has, decided here and nowhere else; a module per kind.

Adding a runtime means adding a module that answers `Workload` (`compose/workload.py`) and a
line in `of`.
"""

from function.compose import sandbox
from function.compose.workload import Workload
from function.compose.workloads.agent_sandbox import AgentSandbox
from function.compose.workloads.claim_template import ClaimTemplateSandbox
from function.compose.workloads.kubevirt import VirtualMachine
from function.compose.workloads.plane_statefulset import StatefulSet
from function.model import Observed
from function.model.platform import Preset

__all__ = ["of"]


def of(preset: Preset, observed: Observed) -> Workload:
    """The preset's workload; `observed` is what is observed where it runs (inside a plane's).

    A Sandbox observed with claim templates was made before claims were composed beside it,
    and keeps them.
    """
    if preset.runtime == "kubevirt":
        return VirtualMachine()
    if preset.compute_plane is not None and not preset.compute_plane.agent_sandbox:
        return StatefulSet()
    if sandbox.observed_claims(observed):
        return ClaimTemplateSandbox()
    return AgentSandbox()
