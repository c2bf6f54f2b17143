"""An older agent-sandbox Sandbox, whose workspace is the claim made from its template.

Such a Sandbox keeps its claim templates (they are immutable and hold the workspace), so its
disk can't grow, and no claim is composed beside it.
"""

from decimal import Decimal

from function.compose.names import claim_name
from function.compose.observed import dig, requested_storage
from function.compose.service_account import service_account
from function.compose.workload import Build, Origin
from function.compose.workloads.agent_sandbox import sandbox
from function.compose.workloads.agent_sandbox.workload import AgentSandbox
from function.model import Manifest, Observed
from function.model.platform import SandboxPlatform
from function.model.spec import WorkspaceSandbox


def _workspace(observed: Observed) -> object:
    claims = sandbox.observed_claims(observed)
    return claims[0] if claims else None


class ClaimTemplateSandbox(AgentSandbox):
    def compose(self, build: Build) -> dict[str, Manifest]:
        ws = build.ws
        pod = sandbox.sandbox(ws, build.preset, build.platform, build.image, build.size)
        return {**service_account(ws), **sandbox.keep_claim_templates(pod, build.observed)}

    def claim_name(self, ws: WorkspaceSandbox) -> str:
        return claim_name(ws, templated=True)

    def has_claim(self, observed: Observed) -> bool:
        return bool(sandbox.observed_claims(observed))

    def current_size(self, observed: Observed) -> Decimal | None:
        return requested_storage(_workspace(observed), "spec")

    def fixed_size(self, _platform: SandboxPlatform, /) -> str | None:
        return "this Sandbox's claim template can't change after creation"

    def restored_from(self, observed: Observed) -> Origin | None:
        claims = sandbox.observed_claims(observed)
        return Origin(bool(claims), dig(_workspace(observed), "spec", "dataSource", "name"))
