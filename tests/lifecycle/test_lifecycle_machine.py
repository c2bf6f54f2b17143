"""Random lives of one sandbox: spec edits with simulated cluster feedback never lose data."""

from datetime import timedelta
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from function.errors import FieldError
from function.model.platform import SandboxPlatform
from function.model.quantity import parse_bytes
from function.render import Rendered, render
from tests.cluster import applied
from tests.support import NOW, owned, platform, platform_input, workspace

DEBIAN = "docker.io/library/debian@sha256:" + "ab" * 32


def _platform(base: str) -> SandboxPlatform:
    """The shipped platform reduced to one runtime: preset `base`, and a larger copy of it."""
    preset = platform_input()["presets"][base]
    return platform(
        defaultPreset="standard",
        presets={
            "standard": preset,
            "large": {
                **preset,
                "resources": {
                    **preset["resources"],
                    "max": {"cpu": "16", "memory": "64Gi", "disk": "500Gi"},
                },
            },
        },
        images={
            **platform_input()["images"],
            "debian-13": {
                "kubevirt": {
                    "pvc": {"namespace": "cozy-public", "name": "vm-default-images-debian-13"}
                },
                "oci": DEBIAN,
            },
        },
    )


snapshot_names = st.sampled_from(["a", "b", "c", "nightly"])


def _carried(manifest: dict[str, Any]) -> dict[str, Any]:
    """A resource as composed, or what its provider-kubernetes Object carries."""
    if manifest["kind"] == "Object":
        inner: dict[str, Any] = manifest["spec"]["forProvider"]["manifest"]
        return inner
    return manifest


def _disk(resources: dict[str, Any]) -> tuple[str, Any, int] | None:
    """The workspace disk's name, source and size, whichever kind holds it; None: not yet."""
    if "workspace-volume" in resources:
        dv = _carried(resources["workspace-volume"])
        sizes = [dv["spec"]["storage"]["resources"]["requests"]["storage"]]
        if "workspace-volume-size" in resources:
            patch = resources["workspace-volume-size"]["spec"]["forProvider"]["manifest"]
            sizes.append(patch["spec"]["resources"]["requests"]["storage"])
        source = dv["spec"].get("source") or dv["spec"].get("sourceRef")
        return dv["metadata"]["name"], source, max(int(parse_bytes(s)) for s in sizes)
    if "workspace-claim" not in resources:
        return None
    claim = _carried(resources["workspace-claim"])
    size = int(parse_bytes(claim["spec"]["resources"]["requests"]["storage"]))
    return claim["metadata"]["name"], claim["spec"].get("dataSource"), size


class SandboxLife(RuleBasedStateMachine):
    PLATFORM = _platform("standard")

    def __init__(self) -> None:
        super().__init__()
        self.spec: dict[str, Any] = {"image": "ubuntu-24.04"}
        self.observed: dict[str, Any] = {}
        self.now = NOW
        self.first_source: Any = None
        self.first_name: str | None = None
        self.largest_disk = 0
        self.last: Rendered | None = None
        self.refused = False
        self.disk_was_ready = False
        self.taken_before: set[str] = set()

    def _reconcile(self) -> None:
        try:
            out = render(workspace(self.spec), self.PLATFORM, owned(self.observed), self.now)
        except FieldError:
            self.refused = True  # a FATAL result applies and deletes nothing
            return
        self.refused = False
        self.disk_was_ready = bool({"workspace-volume", "workspace-claim"} & set(self.observed))
        self.taken_before = {k for k in self.observed if k.startswith("snapshot-")}
        self.last = out
        self.observed = applied(out)

    @rule(power=st.sampled_from(["Running", "Suspended"]))
    def set_power(self, power: str) -> None:
        self.spec["power"] = power
        self._reconcile()

    @rule(name=snapshot_names)
    def add_snapshot(self, name: str) -> None:
        entries = [s for s in self.spec.get("snapshots", []) if s["name"] != name]
        self.spec["snapshots"] = [*entries, {"name": name}]
        self._reconcile()

    @rule(name=snapshot_names)
    def remove_snapshot(self, name: str) -> None:
        self.spec["snapshots"] = [s for s in self.spec.get("snapshots", []) if s["name"] != name]
        self._reconcile()

    @rule(disk=st.sampled_from([None, "10Gi", "20Gi", "30Gi", "50Gi", "200Gi"]))
    def set_disk(self, disk: str | None) -> None:
        resources = {k: v for k, v in self.spec.get("resources", {}).items() if k != "disk"}
        self.spec["resources"] = resources | ({"disk": disk} if disk else {})
        self._reconcile()

    @rule(
        cpu=st.sampled_from([None, "1", "4", "500m"]), memory=st.sampled_from([None, "2Gi", "8Gi"])
    )
    def set_size(self, cpu: str | None, memory: str | None) -> None:
        disk = self.spec.get("resources", {}).get("disk")
        given = {"cpu": cpu, "memory": memory, "disk": disk}
        self.spec["resources"] = {k: v for k, v in given.items() if v}
        self._reconcile()

    @rule(image=st.sampled_from(["ubuntu-24.04", "debian-13"]))
    def set_image(self, image: str) -> None:
        self.spec["image"] = image
        self._reconcile()

    @rule(preset=st.sampled_from([None, "standard", "large"]))
    def set_preset(self, preset: str | None) -> None:
        self.spec.pop("preset", None)
        if preset:
            self.spec["preset"] = preset
        self._reconcile()

    @rule(minutes=st.integers(-120, 600))
    def set_deadline(self, minutes: int) -> None:
        deadline = self.now + timedelta(minutes=minutes)
        self.spec["lifetime"] = {"suspendAt": deadline.strftime("%Y-%m-%dT%H:%M:%SZ")}
        self._reconcile()

    @rule(minutes=st.integers(1, 240))
    def time_passes(self, minutes: int) -> None:
        self.now += timedelta(minutes=minutes)
        self._reconcile()

    @precondition(lambda self: self.last is not None and not self.refused)
    @invariant()
    def the_disk_is_always_there_with_its_first_source_and_never_smaller(self) -> None:
        assert self.last is not None
        disk = _disk(self.last.resources)
        if disk is None:
            # Placed in stages in a namespace of its own, the disk comes with the workload.
            assert self.first_name is None
            assert self.PLATFORM.presets["standard"].placement == "SandboxNamespace"
            return
        name, source, size = disk
        if self.first_source is None:
            self.first_source = source or "none"
        assert (source or "none") == self.first_source
        assert size >= self.largest_disk
        self.largest_disk = size
        # Once made, the disk keeps its name: a new name would be a new, empty disk.
        self.first_name = self.first_name or name
        assert name == self.first_name

    @precondition(lambda self: self.last is not None and not self.refused)
    @invariant()
    def a_disk_asked_for_is_the_disk_composed(self) -> None:
        assert self.last is not None
        asked = self.spec.get("resources", {}).get("disk")
        disk = _disk(self.last.resources)
        if asked is not None and disk is not None:
            assert disk[2] == int(parse_bytes(asked))

    @precondition(lambda self: self.last is not None and not self.refused)
    @invariant()
    def every_listed_snapshot_that_was_taken_stays_composed(self) -> None:
        assert self.last is not None
        listed = {f"snapshot-{s['name']}" for s in self.spec.get("snapshots", [])}
        taken = self.taken_before
        # Once the disk exists every listed snapshot is taken, and a taken one is never dropped.
        if self.disk_was_ready:
            assert listed <= set(self.last.resources)
        assert listed & taken <= set(self.last.resources)

    @precondition(lambda self: self.refused)
    @invariant()
    def a_refusal_is_only_ever_a_shrink(self) -> None:
        try:
            render(workspace(self.spec), self.PLATFORM, owned(self.observed), self.now)
        except FieldError as err:
            assert err.path == "spec.resources.disk"
            assert "disks never shrink" in err.message


class PodSandboxLife(SandboxLife):
    """The same life for a Kata sandbox, whose workspace is a claim composed beside it."""

    PLATFORM = _platform("kata")


class IsolatedSandboxLife(SandboxLife):
    """The same life for a VM in a namespace of its own, its parts carried by Objects."""

    PLATFORM = _platform("isolated")


class IsolatedPodSandboxLife(SandboxLife):
    """The same life for a Kata sandbox in a namespace of its own."""

    PLATFORM = _platform("isolated-kata")


SETTINGS = settings(max_examples=60, stateful_step_count=25, deadline=None)
LIVES = (SandboxLife, PodSandboxLife, IsolatedSandboxLife, IsolatedPodSandboxLife)
for life in LIVES:
    life.TestCase.settings = SETTINGS
test_random_lives_never_lose_data = SandboxLife.TestCase
test_random_pod_lives_never_lose_data = PodSandboxLife.TestCase
test_random_isolated_lives_never_lose_data = IsolatedSandboxLife.TestCase
test_random_isolated_pod_lives_never_lose_data = IsolatedPodSandboxLife.TestCase
