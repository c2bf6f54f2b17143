"""A one-replica StatefulSet in a ComputePlane without agent-sandbox, beside its claim."""

from datetime import datetime

from function.compose import workspace_claim
from function.compose.conditions import RUNNING, Progress, done, not_created, pending
from function.compose.observed import dig
from function.compose.service_account import service_account
from function.compose.workload import Build
from function.compose.workloads.agent_sandbox.workload import AgentSandbox
from function.compose.workloads.plane_statefulset import statefulset
from function.model import Manifest, Observed
from function.model.spec import WorkspaceSandbox


class StatefulSet(AgentSandbox):
    """The claim's answers are the Sandbox's; the pod's are its own."""

    key = statefulset.KEY

    def compose(self, build: Build) -> dict[str, Manifest]:
        ws, preset, size = build.ws, build.preset, build.size
        return {
            **service_account(ws),
            workspace_claim.KEY: workspace_claim.claim(ws, preset, size, build.observed),
            **statefulset.statefulset(ws, preset, build.platform, build.image, size),
        }

    def progress(
        self,
        ws: WorkspaceSandbox,
        observed: Observed,
        now: datetime,  # noqa: ARG002  # the protocol's; a StatefulSet's needs no clock
    ) -> Progress:
        sts = observed.get(statefulset.KEY)
        if sts is None:
            return not_created(ws, "the StatefulSet")
        if ws.spec.power == "Suspended":
            kept = done("Provisioned", "Provisioned", "the workspace claim is kept")
            if statefulset.stopped(sts):
                stopped = done("Suspended", "Suspended", "the pod is gone; the workspace is kept")
                return Progress("Suspended", kept, stopped)
            why = "waiting for the StatefulSet to scale to zero"
            return Progress("Suspending", kept, pending("Suspended", "Suspending", why))
        if statefulset.ready(sts):
            up = done("Provisioned", "Provisioned", "the pod is running and ready")
            return Progress("Running", up, RUNNING)
        phase = dig(observed.get(workspace_claim.KEY), "status", "phase") or "not reported yet"
        why = f"waiting for the pod to become ready (workspace claim {phase})"
        return Progress("Provisioning", pending("Provisioned", "StartingPod", why), RUNNING)

    def disk_ready(self, observed: Observed) -> bool:
        if statefulset.KEY not in observed:
            return False
        return bool(dig(observed.get(workspace_claim.KEY), "status", "phase") == "Bound")

    def stopped(self, observed: Observed) -> bool:
        sts = observed.get(statefulset.KEY)
        return sts is not None and statefulset.stopped(sts)
