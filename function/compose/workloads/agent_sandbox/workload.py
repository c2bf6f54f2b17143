"""An agent-sandbox Sandbox, its workspace a claim composed beside it so that it can grow."""

from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar

from function.compose import workspace_claim
from function.compose.conditions import RUNNING, Progress, done, not_created, pending
from function.compose.names import claim_name
from function.compose.observed import condition
from function.compose.pod import container_resources
from function.compose.service_account import service_account
from function.compose.sizing import Size
from function.compose.workload import Build, Origin, Room
from function.compose.workloads.agent_sandbox import sandbox
from function.model import Manifest, Observed
from function.model.platform import Preset, SandboxPlatform
from function.model.quantity import format_bytes, format_cpu
from function.model.spec import WorkspaceSandbox

# Ready reasons of an agent-sandbox Sandbox that need a human, not patience.
POD_FAILURES = frozenset({"PodFailed", "PodSucceeded", "MultiplePods"})
RETRYING = "ReconcilerError"
"""The controller's reconcile failed and is retried with backoff. Crossplane applies a render's
objects in no set order, and a Sandbox stored before its ServiceAccount is refused its pod
until a retry (tests/control_plane/test_agent_sandbox.py): a failure only once it lasts."""
RETRY_GRACE = timedelta(minutes=2)
"""How long the Sandbox may stay not Ready with `ReconcilerError` before the sandbox is
`Failed`; its retries back off from 5 ms to about 20 s in that time."""


def _true(observed: Observed, kind: str) -> bool:
    found = condition(observed.get(sandbox.KEY), kind)
    return found is not None and found.get("status") == "True"


def _retrying(ready: Mapping[str, Any], now: datetime) -> bool:
    """Whether the Sandbox has been not Ready for less than `RETRY_GRACE`.

    Read from its Ready condition's last transition; a time that can't be read counts as long
    ago.
    """
    try:
        since = datetime.fromisoformat(str(ready.get("lastTransitionTime")))
    except ValueError:
        return False
    return since.tzinfo is not None and now - since < RETRY_GRACE


def _failing(ready: Mapping[str, Any], now: datetime) -> Progress | None:
    """A failure the Sandbox's Ready condition reports, or a retry still in its grace."""
    reason = ready.get("reason")
    if reason == RETRYING and _retrying(ready, now):
        why = f"the agent-sandbox controller retries: {ready.get('message') or RETRYING}"
        return Progress("Provisioning", pending("Provisioned", "ControllerRetrying", why), RUNNING)
    if reason in POD_FAILURES or reason == RETRYING:
        why = f"Sandbox is {reason}: {ready.get('message') or 'see its events'}"
        return Progress("Failed", pending("Provisioned", "SandboxFailed", why), RUNNING)
    return None


class AgentSandbox:
    key = sandbox.KEY
    serves_ssh: ClassVar[bool] = False
    agent_from_input: ClassVar[bool] = False
    disk_lives_on: ClassVar[str] = "pod"
    keeps_its_grace: ClassVar[bool] = False

    def compose(self, build: Build) -> dict[str, Manifest]:
        ws, preset, size = build.ws, build.preset, build.size
        return {
            **service_account(ws),
            workspace_claim.KEY: workspace_claim.claim(ws, preset, size, build.observed),
            **sandbox.sandbox(ws, preset, build.platform, build.image, size),
        }

    def progress(self, ws: WorkspaceSandbox, observed: Observed, now: datetime) -> Progress:
        pod = observed.get(sandbox.KEY)
        if pod is None:
            return not_created(ws, "the Sandbox")
        ready, held = condition(pod, "Ready") or {}, condition(pod, "Suspended") or {}
        if (failing := _failing(ready, now)) is not None:
            return failing
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

    def sized_by_instancetype(self, _preset: Preset, /) -> bool:
        return False

    def room(self, preset: Preset, size: Size, /) -> Room:
        """One pod of its size, the RuntimeClass's overhead included, and its claim."""
        headroom, overhead = preset.quota_headroom, preset.pod.overhead
        cpu = size.cpu + headroom.cpu + (overhead.cpu if overhead else 0)
        memory = size.memory + headroom.memory + (overhead.memory if overhead else 0)
        amounts = {
            "cpu": format_cpu(cpu),
            "memory": format_bytes(memory),
            "ephemeral-storage": format_bytes(preset.pod.ephemeral_storage),
        }
        compute = {f"{k}.{r}": v for k in ("requests", "limits") for r, v in amounts.items()}
        return Room(compute, claims=1, disk=size.disk, pods=1)

    def container_limits(self, preset: Preset, size: Size, /) -> dict[str, str] | None:
        limits: dict[str, str] = container_resources(preset, size)["limits"]
        return limits
