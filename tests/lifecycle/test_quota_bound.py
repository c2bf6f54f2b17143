"""The tenant's bill stays bounded when its sandboxes run in namespaces of their own.

What runs in a sandbox namespace escapes the tenant namespace's ResourceQuota. Each sandbox
namespace carries a quota of its own (`sandbox_namespace.quota`), and these tests hold it under
a bound computed here from the preset's maxima alone, independently of the function:
`resources.max` plus `quotaHeadroom`, the VM twice where it live-migrates (a second pod runs
during the migration), the disk twice (CDI fills it through a second, "prime" claim), a pod's
RuntimeClass overhead on top. A tenant's total is then at most its number of sandboxes times
the largest bound of the presets it may use, and the number is what a `count/` quota on
WorkspaceSandboxes in the tenant namespace caps: the platform guide's worked example, which
these tests read and check.
"""

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from function.model.platform import Preset, SandboxPlatform
from function.model.quantity import parse_quantity
from function.render import render
from tests.cluster import applied
from tests.schemas import validate
from tests.support import NOW, ROOT, owned, platform, platform_input, workspace

QUOTA_KEY = "namespace-quota"
MIGRATING = {"LiveMigrate", "LiveMigrateIfPossible"}
GUIDE = ROOT / "docs" / "platform-guide.md"


def bound(preset: Preset) -> dict[str, Decimal]:
    """The most one sandbox namespace of `preset` may hold, from the preset's maxima."""
    most, headroom = preset.resources.max, preset.quota_headroom
    fixed = {
        "services": Decimal(1),
        "services.loadbalancers": Decimal(0),
        "services.nodeports": Decimal(0),
    }
    if preset.runtime == "kubevirt":
        vms = 2 if preset.kubevirt.eviction_strategy in MIGRATING else 1
        return fixed | {
            "requests.cpu": most.cpu * vms + headroom.cpu,
            "requests.memory": most.memory * vms + headroom.memory,
            "requests.storage": most.disk * 2,
            "persistentvolumeclaims": Decimal(2),
            # The VM's pods, and CDI's clone or import worker.
            "pods": Decimal(vms + 1),
        }
    overhead = preset.pod.overhead
    cpu = most.cpu + headroom.cpu + (overhead.cpu if overhead else 0)
    memory = most.memory + headroom.memory + (overhead.memory if overhead else 0)
    compute = {"cpu": cpu, "memory": memory, "ephemeral-storage": preset.pod.ephemeral_storage}
    return (
        fixed
        | {f"{kind}.{r}": v for kind in ("requests", "limits") for r, v in compute.items()}
        | {
            "requests.storage": most.disk,
            "persistentvolumeclaims": Decimal(1),
            "pods": Decimal(1),
        }
    )


def _presets(p: SandboxPlatform) -> dict[str, Preset]:
    return {n: x for n, x in p.presets.items() if x.placement == "SandboxNamespace"}


def namespace_quota(p: SandboxPlatform, spec: dict[str, Any]) -> dict[str, Decimal]:
    """The ResourceQuota the function composes into the sandbox's namespace, as amounts."""
    first = render(workspace(spec), p, {}, NOW)
    # The namespace comes first; its quota follows once the namespace is observed.
    out = render(workspace(spec), p, owned(applied(first)), NOW)
    quota = out.resources[QUOTA_KEY]["spec"]["forProvider"]["manifest"]
    assert quota["kind"] == "ResourceQuota"
    return {k: parse_quantity(v) for k, v in quota["spec"]["hard"].items()}


def _within(quota: Mapping[str, Decimal], most: Mapping[str, Decimal]) -> list[str]:
    """What `quota` leaves unbounded or allows beyond `most`."""
    missing = [f"{k} unbounded" for k in most if k not in quota]
    over = [f"{k}: {v} > {most.get(k)}" for k, v in quota.items() if k not in most or v > most[k]]
    return missing + over


# Sizes a tenant may ask for: within the shipped maxima, or left to the default.
sizes = st.fixed_dictionaries(
    {},
    optional={
        "cpu": st.sampled_from(["500m", "1", "2", "3500m", "8", 4.0]),
        "memory": st.sampled_from(["1Gi", "1536Mi", "4Gi", "16Gi"]),
        "disk": st.sampled_from(["10Gi", "20Gi", "64Gi", "200Gi"]),
    },
)

# Presets as a platform may tune them: the shipped SandboxNamespace presets, with other
# eviction strategies, headroom, overhead and maxima, and a gVisor one.
_tuned = st.fixed_dictionaries(
    {
        "base": st.sampled_from(["isolated", "isolated-kata", "isolated-gvisor"]),
        "eviction": st.sampled_from(["LiveMigrate", "LiveMigrateIfPossible", "External", "None"]),
        "headroom": st.sampled_from(
            [{"cpu": "100m", "memory": "64Mi"}, {"cpu": "1", "memory": "1Gi"}]
        ),
        "overhead": st.sampled_from([None, {"cpu": "250m", "memory": "320Mi"}]),
        "max": st.sampled_from(
            [
                {"cpu": "8", "memory": "16Gi", "disk": "200Gi"},
                {"cpu": "16", "memory": "64Gi", "disk": "500Gi"},
            ]
        ),
    }
)


def _preset_input(tuned: Mapping[str, Any]) -> dict[str, Any]:
    shipped = platform_input()["presets"]
    if tuned["base"] == "isolated-gvisor":
        preset = {**shipped["isolated-kata"], "runtime": "gvisor", "runtimeClassName": "gvisor"}
    else:
        preset = dict(shipped[tuned["base"]])
    preset["resources"] = {**preset["resources"], "max": tuned["max"]}
    preset["quotaHeadroom"] = tuned["headroom"]
    if preset["runtime"] == "kubevirt":
        preset["kubevirt"] = {**preset["kubevirt"], "evictionStrategy": tuned["eviction"]}
    else:
        pod = {k: v for k, v in preset["pod"].items() if k != "overhead"}
        preset["pod"] = pod | ({"overhead": tuned["overhead"]} if tuned["overhead"] else {})
    return dict(preset)


def _tuned_platform(presets: list[Mapping[str, Any]]) -> SandboxPlatform:
    shipped = platform_input()["presets"]
    chosen = {f"tuned-{i}": _preset_input(t) for i, t in enumerate(presets)}
    return platform(presets={"standard": shipped["standard"], **chosen})


@pytest.mark.parametrize("name", ["isolated", "isolated-kata"])
def test_the_shipped_presets_quota_at_most_sizes_reaches_their_bound(name: str) -> None:
    """The largest sandbox's quota is the bound itself: the bound is tight, not just safe."""
    p = platform()
    most = p.presets[name].resources.max
    spec = {
        "preset": name,
        "resources": {"cpu": str(most.cpu), "memory": f"{most.memory}", "disk": f"{most.disk}"},
    }
    assert namespace_quota(p, spec) == bound(p.presets[name])


@settings(max_examples=60, deadline=None)
@given(tuned=_tuned, size=sizes)
def test_a_sandbox_namespace_quota_never_exceeds_its_presets_bound(
    tuned: Mapping[str, Any], size: dict[str, Any]
) -> None:
    p = _tuned_platform([tuned])
    quota = namespace_quota(p, {"preset": "tuned-0", "resources": size})
    assert _within(quota, bound(p.presets["tuned-0"])) == []


def test_the_bound_catches_a_quota_beyond_it() -> None:
    most = bound(platform().presets["isolated"])
    assert _within({**most, "requests.cpu": most["requests.cpu"] + 1}, most) == [
        f"requests.cpu: {most['requests.cpu'] + 1} > {most['requests.cpu']}"
    ]
    assert _within({k: v for k, v in most.items() if k != "pods"}, most) == ["pods unbounded"]


@settings(max_examples=25, deadline=None)
@given(
    tuned=st.lists(_tuned, min_size=1, max_size=3),
    sandboxes=st.lists(st.tuples(st.integers(0, 2), sizes), min_size=1, max_size=5),
)
def test_a_tenants_total_is_at_most_its_sandbox_count_times_the_largest_bound(
    tuned: list[Mapping[str, Any]], sandboxes: list[tuple[int, dict[str, Any]]]
) -> None:
    p = _tuned_platform(tuned)
    offered = _presets(p)
    largest: dict[str, Decimal] = {}
    for preset in offered.values():
        for k, v in bound(preset).items():
            largest[k] = max(largest.get(k, v), v)
    total: dict[str, Decimal] = {}
    for i, size in sandboxes:
        spec = {"preset": f"tuned-{i % len(tuned)}", "resources": size}
        for k, v in namespace_quota(p, spec).items():
            total[k] = total.get(k, Decimal(0)) + v
    n = len(sandboxes)
    assert all(v <= largest[k] * n for k, v in total.items()), (total, largest, n)


def _guide_block(marker: str) -> dict[str, Any]:
    """The YAML block of the platform guide that contains `marker`."""
    blocks = re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, marker
    doc: dict[str, Any] = yaml.safe_load(found[0])
    return doc


def _count_key() -> str:
    xrd = yaml.safe_load((ROOT / "deploy" / "xrd.yaml").read_text())
    assert xrd["spec"]["scope"] == "Namespaced"
    return f"count/{xrd['spec']['names']['plural']}.{xrd['spec']['group']}"


def test_the_guides_sandbox_count_quota_is_a_valid_resource_quota_on_the_xr() -> None:
    quota = _guide_block("count/workspacesandboxes")
    assert validate(quota) == []
    assert quota["kind"] == "ResourceQuota"
    assert list(quota["spec"]["hard"]) == [_count_key()]


def test_the_guides_worked_example_is_the_bound_times_the_count() -> None:
    """The figures the guide states for ten `isolated` sandboxes are the bound times ten."""
    quota = _guide_block("count/workspacesandboxes")
    n = int(quota["spec"]["hard"][_count_key()])
    most = bound(platform().presets["isolated"])
    text = GUIDE.read_text()
    for key, unit, scale in (
        ("requests.cpu", "CPUs", Decimal(1)),
        ("requests.memory", "GiB of memory", Decimal(2**30)),
        ("requests.storage", "GiB of disk", Decimal(2**30)),
    ):
        figure = f"{most[key] * n / scale:.0f} {unit}"
        assert figure in text, figure
