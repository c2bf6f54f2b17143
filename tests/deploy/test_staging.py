"""The platform guide's way to stage a change, checked against the admission policy."""

import copy
import re
from typing import Any

import yaml

from function.model import parse
from function.model.platform import SandboxPlatform
from function.render import render
from tests.deploy.admission import COMPOSITION_MESSAGE, PLATFORM_CHOICE, sandbox_request, verdict
from tests.deploy.install import TENANT, xrd
from tests.schemas import apply_defaults, generated_xr_schema
from tests.support import (
    EXAMPLES,
    NOW,
    PLATFORM,
    ROOT,
    load_stream,
    observed_of,
    platform_input,
    required_of,
    workspace,
    xr,
)

GUIDE = ROOT / "docs" / "platform-guide.md"
POLICY = "workspacesandbox-composition"


def admission(obj: dict[str, Any], old: dict[str, Any] | None = None) -> str | list[str]:
    """The composition policy's verdict on a tenant writing this WorkspaceSandbox."""
    meta = obj["metadata"]
    operation = "CREATE" if old is None else "UPDATE"
    request = sandbox_request(operation, TENANT, meta["namespace"], meta["name"])
    return verdict(POLICY, request, obj, old)


def stored(obj: dict[str, Any], default_update_policy: str) -> dict[str, Any]:
    """`obj` after Crossplane selected its Composition, defaulted by the API server."""
    staged = copy.deepcopy(xrd())
    staged["spec"]["defaultCompositionUpdatePolicy"] = default_update_policy
    schema = generated_xr_schema(staged, "v1alpha1")
    selected = copy.deepcopy(obj)
    selected["spec"]["crossplane"] = copy.deepcopy(PLATFORM_CHOICE)
    out: dict[str, Any] = apply_defaults(selected, schema)
    return out


def suspended(obj: dict[str, Any]) -> dict[str, Any]:
    """The owner's next write: suspend the sandbox, everything else as read from the cluster."""
    out = copy.deepcopy(obj)
    out["spec"]["power"] = "Suspended"
    return out


def test_a_manual_default_update_policy_would_lock_tenants_out_of_new_sandboxes() -> None:
    # Why the guide doesn't stage with the update policy: the sandbox is created fine...
    created = xr()
    assert admission(created) == []
    # ...but once Crossplane selects its Composition the API server stores Manual, and every
    # later write of its owner carries it.
    manual = stored(created, "Manual")
    assert manual["spec"]["crossplane"]["compositionUpdatePolicy"] == "Manual"
    refused = [COMPOSITION_MESSAGE.format("compositionUpdatePolicy")]
    assert admission(suspended(manual), manual) == refused
    # With the shipped default, the same write is admitted.
    automatic = stored(created, "Automatic")
    assert admission(suspended(automatic), automatic) == []


def canary_presets() -> dict[str, Any]:
    """The preset the guide's staging step adds, as its YAML block shows it."""
    section = GUIDE.read_text().split("## Roll out a change safely", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL)
    presets: dict[str, Any] = yaml.safe_load(block)["presets"]
    return presets


def test_the_guides_canary_preset_changes_no_other_sandbox() -> None:
    presets = canary_presets()
    assert not presets.keys() & platform_input()["presets"].keys()
    staged_input = {
        **platform_input(),
        "presets": {**platform_input()["presets"], **presets},
    }
    staged = parse(SandboxPlatform, staged_input, "input")
    for case in EXAMPLES:
        (composite,) = load_stream(case / "xr.yaml")
        ws = workspace(composite["spec"], composite["metadata"]["name"])
        observed = observed_of(case)
        before = render(ws, PLATFORM, observed, NOW)
        required = required_of(case, before.requirements)
        after = render(ws, staged, observed, NOW, required)
        assert after == render(ws, PLATFORM, observed, NOW, required), case.name
    for name in presets:
        canary = xr({"preset": name}, name="canary")
        out = render(workspace(canary["spec"], "canary"), staged, {}, NOW)
        assert out.resources
        # A tenant (or the platform, in its own namespace) creates and then changes a canary:
        # both pass the admission policy, since nothing about revisions is pinned.
        assert admission(canary) == []
        automatic = stored(canary, "Automatic")
        assert admission(suspended(automatic), automatic) == []
