"""Template reads, answered from the gateway's template mapping, with the real SDK over
`workspace-sandbox-gateway --local`; building one is refused with what to do instead."""

import uuid

import httpx
import pytest
from e2b import Template, TemplateException

from tests.gateway.sdk.gateways import (  # noqa: F401  # the fixtures
    Gateway,
    gateway,
    sdk_env,
)

pytestmark = pytest.mark.e2e  # starts agents or gateways


def test_a_template_of_the_mapping_has_one_build_tagged_default() -> None:
    assert Template.exists("code-interpreter-v1") is True
    (tag,) = Template.get_tags("base")
    assert tag.tag == "default"
    assert uuid.UUID(str(tag.build_id)).version == 5  # the same on every replica
    with pytest.raises(TemplateException, match="template 'nope' not found"):
        Template.get_tags("nope")


def test_templates_are_listed_and_read_as_e2b_s_api_answers_them(
    gateway: Gateway,  # noqa: F811  # the fixture
) -> None:
    key = {"X-API-Key": gateway.key}
    listed = httpx.get(f"{gateway.url}/templates", headers=key).json()
    assert [t["templateID"] for t in listed] == ["base", "code-interpreter-v1"]
    base = httpx.get(f"{gateway.url}/templates/base", headers=key).json()
    assert base["aliases"] == ["base"]
    assert base["buildStatus"] == "ready"
    assert base["cpuCount"] >= 1
    (build,) = base["builds"]
    assert build["buildID"] == base["buildID"] == str(Template.get_tags("base")[0].build_id)
    missing = httpx.get(f"{gateway.url}/templates/nope", headers=key)
    assert (missing.status_code, missing.json()["code"]) == (404, 404)
    assert httpx.get(f"{gateway.url}/templates").status_code == 401
