"""The API server refusing a create: a ResourceQuota is E2B's 429, admission the tenant's 403/400.

Through the real client, the fake API server answering every create of a WorkspaceSandbox as a
quota, an admission webhook or RBAC would.
"""

import pytest
from workspace_gateway.kubernetes.objects import PLURAL

from tests.gateway import kube_fake, stand_in
from tests.gateway.stand_in import KEY_A, World

pytestmark = pytest.mark.e2e  # starts agents or gateways

world = stand_in.world  # the fake cluster and a gateway with API keys

WEBHOOK = 'admission webhook "sizes.sandbox.cozystack.io" denied the request: no GPUs in team-a'
POLICY = (
    'workspacesandboxes.sandbox.cozystack.io "x" is forbidden: ValidatingAdmissionPolicy '
    "'images' with binding 'images' denied request: image not allowed"
)
RBAC = (
    'workspacesandboxes.sandbox.cozystack.io is forbidden: User "system:serviceaccount:'
    'sandbox-gateway:gateway" cannot create resource "workspacesandboxes" in API group '
    '"sandbox.cozystack.io" in the namespace "team-a"'
)


async def test_an_exceeded_quota_is_e2b_s_429(world: World) -> None:
    world.cluster.authority.refusals[PLURAL] = kube_fake.quota_exceeded(PLURAL)
    answer = await world.call("POST", "/v2/sandboxes", KEY_A, json={})
    assert answer.status_code == 429
    body = answer.json()
    assert set(body) == {"code", "message"}
    assert body["code"] == 429
    assert body["message"].startswith("the namespace's sandbox quota is used up: ")
    assert "exceeded quota: sandboxes" in body["message"]
    assert world.cluster.written == []


@pytest.mark.parametrize(
    ("refusal", "status", "message"),
    [
        (kube_fake.admission_denied(WEBHOOK), 403, WEBHOOK),
        (kube_fake.admission_denied(POLICY), 403, POLICY),
        (kube_fake.admission_denied(WEBHOOK, 400), 400, WEBHOOK),
        (kube_fake.admission_denied("x" * 2000, 422), 400, "x" * 500),
    ],
)
async def test_an_admission_refusal_is_the_tenant_s_with_its_message(
    world: World, refusal: kube_fake.Answer, status: int, message: str
) -> None:
    world.cluster.authority.refusals[PLURAL] = refusal
    answer = await world.call("POST", "/sandboxes", KEY_A, json={})
    assert answer.status_code == status
    assert answer.json() == {
        "code": status,
        "message": f"the platform refused the sandbox: {message}",
    }


async def test_rbac_refusing_the_gateway_is_its_own_fault_and_names_no_identity(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.cluster.authority.refusals[PLURAL] = kube_fake.admission_denied(RBAC)
    answer = await world.call("POST", "/sandboxes", KEY_A, json={})
    assert answer.status_code == 500
    assert answer.json() == {
        "code": 500,
        "message": "the gateway may not do that in this namespace",
    }
    assert "cannot create resource" in caplog.text
