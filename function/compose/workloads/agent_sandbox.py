"""An agent-sandbox Sandbox, its workspace a claim composed beside it so that it can grow."""

from decimal import Decimal

from function.compose import sandbox, workspace_claim
from function.compose.conditions import RUNNING, Progress, done, not_created, pending
from function.compose.names import claim_name
from function.compose.observed import condition
from function.compose.service_account import service_account
from function.compose.workload import Build, Origin
from function.model import Manifest, Observed
from function.model.platform import SandboxPlatform
from function.model.spec import WorkspaceSandbox

# Ready reasons of an agent-sandbox Sandbox that need a human, not patience.
POD_FAILURES = frozenset({"PodFailed", "PodSucceeded", "ReconcilerError", "MultiplePods"})


def _true(observed: Observed, kind: str) -> bool:
    found = condition(observed.get(sandbox.KEY), kind)
    return found is not None and found.get("status") == "True"


class AgentSandbox:
    key = sandbox.KEY

    def compose(self, build: Build) -> dict[str, Manifest]:
        ws, preset, size = build.ws, build.preset, build.size
        return {
            **service_account(ws),
            workspace_claim.KEY: workspace_claim.claim(ws, preset, size, build.observed),
            **sandbox.sandbox(ws, preset, build.platform, build.image, size),
        }

    def progress(self, ws: WorkspaceSandbox, observed: Observed) -> Progress:
        pod = observed.get(sandbox.KEY)
        if pod is None:
            return not_created(ws, "the Sandbox")
        ready, held = condition(pod, "Ready") or {}, condition(pod, "Suspended") or {}
        if ready.get("reason") in POD_FAILURES:
            why = f"Sandbox is {ready['reason']}: {ready.get('message') or 'see its events'}"
            return Progress("Failed", pending("Provisioned", "SandboxFailed", why), RUNNING)
        if ws.spec.power == "Suspended":
            kept = done("Provisioned", "Provisioned", "the workspace claim is kept")
            if held.get("status") == "True":
                stopped = done("Suspended", "Suspended", "the pod is gone; the workspace is kept")
                return Progress("Suspended", kept, stopped)
            why = f"waiting for the pod to terminate ({held.get('reason') or 'not reported yet'})"
            return Progress("Suspending", kept, pending("Suspended", "Suspending", why))
        if ready.get("status") == "True":
            up = done("Provisioned", "Provisioned", "the pod is running and ready")
            return Progress("Running", up, RUNNING)
        why = ready.get("message") or ready.get("reason") or "not reported yet"
        return Progress(
            "Provisioning", pending("Provisioned", "StartingPod", f"waiting: {why}"), RUNNING
        )

    def disk_ready(self, observed: Observed) -> bool:
        # The claim is bound once the pod has been scheduled; it holds data once the pod has run.
        return _true(observed, "Ready") or _true(observed, "Suspended")

    def stopped(self, observed: Observed) -> bool:
        return _true(observed, "Suspended")

    def claim_name(self, ws: WorkspaceSandbox) -> str:
        return claim_name(ws)

    def has_claim(self, observed: Observed) -> bool:
        return workspace_claim.composed(observed)

    def guest_account(self, _observed: Observed, _restored: str | None, /) -> str | None:
        return None

    def current_size(self, observed: Observed) -> Decimal | None:
        return workspace_claim.current_size(observed)

    def fixed_size(self, _platform: SandboxPlatform, /) -> str | None:
        return None

    def restored_from(self, observed: Observed) -> Origin | None:
        found = workspace_claim.restored_from(observed)
        if found is None and sandbox.KEY in observed:
            # A Sandbox without its claim observed: nothing tells where its disk came from.
            return Origin(readable=False, snapshot=None)
        return found
