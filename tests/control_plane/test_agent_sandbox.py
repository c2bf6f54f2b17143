"""What the real agent-sandbox controller does with the Sandboxes the function renders.

Every golden render with a Sandbox (the Kata preset, with and without the agent delivered) is
created in a namespace of the test's own on the installed plane, as Crossplane creates it: by
its ServiceAccount, so the project's admission policies pass it, and the controller, running as
its own ServiceAccount, writes the pod under the same policies. The XR is not on this plane, so
the renders' owner references to it are left out (Crossplane's cascade from the XR is its own
tier's); everything else is the golden's, down to the names. The namespace enforces Pod Security
`restricted`, as a sandbox namespace does.

Nothing schedules or runs pods here: a pod the controller makes stays Pending, and the one test
that needs it Running has `kubelet_runs` play the kubelet. The function's own reading of each
status the controller reports (its readiness check and the workload's progress) is asserted
beside it.
"""

import copy
import datetime as dt
import itertools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from function.compose.readiness import is_ready
from function.compose.workloads.agent_sandbox.workload import RETRY_GRACE, AgentSandbox
from tests.control_plane.agent_sandbox import USER, start_agent_sandbox
from tests.control_plane.install import Installed
from tests.control_plane.replay import clean
from tests.control_plane.server import ControlPlane
from tests.support import ROOT, workspace


def clock() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


pytestmark = pytest.mark.control_plane

SANDBOX = ("agents.x-k8s.io/v1beta1", "Sandbox")
GOLDENS = sorted(
    path
    for path in (ROOT / "tests" / "golden").rglob("*.yaml")
    if any(
        (d.get("apiVersion"), d.get("kind")) == SANDBOX
        for d in yaml.safe_load_all(path.read_text())
        if d
    )
)
CROSSPLANE = "system:serviceaccount:crossplane-system:crossplane"
CROSSPLANE_ROLE = "test-agent-sandbox:crossplane"
NAME_HASH = "agents.x-k8s.io/sandbox-name-hash"
SETTLE_SECONDS = 30.0
"""A write to the controller's answer: well under a second on loopback."""
QUIET_SECONDS = 2.0
"""How long an object must stay as it is to count as left alone."""
POD_IP = "10.244.0.10"
_serial = itertools.count()
T = TypeVar("T")


def until(probe: Callable[[], T | None], what: str, seconds: float = SETTLE_SECONDS) -> T:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if (found := probe()) is not None:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {seconds:.0f} s: {what}")


def name_hash(name: str) -> str:
    """FNV-1a, 32 bits, as hex: the controller's `NameHash`, which names the pod's label."""
    h = 0x811C9DC5
    for byte in name.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{h:08x}"


def differences(want: Any, got: Any, path: str = "") -> list[str]:
    """Where `got` lacks or changes a value `want` has: every field of `want`, field by field
    (lists item by item); `got` may carry more (what the server defaults)."""
    if isinstance(want, Mapping) and isinstance(got, Mapping):
        return [d for k, v in want.items() for d in differences(v, got.get(k), f"{path}.{k}")]
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [d for i, (w, g) in enumerate(zip(want, got, strict=True)) for d in
                differences(w, g, f"{path}[{i}]")]  # fmt: skip
    return [] if want == got else [f"{path}: rendered {want!r}, got {got!r}"]


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector's verdict (matchLabels and matchExpressions; a Service's plain map)."""
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        selector = {"matchLabels": selector}
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    tests = {
        "In": lambda e: labels.get(e["key"]) in e["values"],
        "NotIn": lambda e: labels.get(e["key"]) not in e["values"],
        "Exists": lambda e: e["key"] in labels,
        "DoesNotExist": lambda e: e["key"] not in labels,
    }
    return all(tests[e["operator"]](e) for e in selector.get("matchExpressions", []))


_served: dict[str, dict[tuple[str, str, str], tuple[str, bool]]] = {}


def path_of(plane: ControlPlane, obj: Mapping[str, Any], *, name: bool = True) -> str:
    group, _, version = obj["apiVersion"].rpartition("/")
    served = _served.setdefault(plane.url, plane.resources())
    resource, namespaced = served[group, version, obj["kind"]]
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespaced:
        base += f"/namespaces/{obj['metadata']['namespace']}"
    return f"{base}/{resource}" + (f"/{obj['metadata']['name']}" if name else "")


@pytest.fixture(scope="module")
def controlled(installed: Installed) -> ControlPlane:
    """The installed plane with the controller running, and Crossplane's account allowed what
    Crossplane's Helm chart allows it: every ClusterRole labelled to aggregate to it (here, the
    project's `function-workspace-sandbox:crossplane`), which the aggregation controller fills
    in. The RuntimeClass the Kata preset names is the platform's."""
    plane = installed.plane
    start_agent_sandbox(plane)
    selector = {"matchLabels": {"rbac.crossplane.io/aggregate-to-crossplane": "true"}}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": CROSSPLANE_ROLE},
        "aggregationRule": {"clusterRoleSelectors": [selector]},
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": CROSSPLANE_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": CROSSPLANE_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": "crossplane",
                      "namespace": "crossplane-system"}],
    }  # fmt: skip
    runtime = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "kata-clh"},
        "handler": "kata-clh",
    }
    for obj in (role, binding, runtime):
        status, answer = plane.request("POST", path_of(plane, obj, name=False), obj)
        assert status in {201, 409}, answer

    def filled() -> bool | None:
        _, got = plane.request("GET", path_of(plane, role))
        return (
            True
            if any("sandboxes" in r.get("resources", []) for r in got.get("rules") or [])
            else None
        )

    until(filled, "the aggregation controller fills Crossplane's role")
    return plane


class Rendered:
    """One golden render's objects, created in a namespace of their own."""

    def __init__(self, plane: ControlPlane, golden: Path) -> None:
        self.plane = plane
        self.namespace = f"test-agent-sandbox-{next(_serial)}"
        self.objects: list[dict[str, Any]] = []
        for doc in yaml.safe_load_all(golden.read_text()):
            if doc and doc["kind"] not in {"WorkspaceSandbox", "Result"}:
                obj = clean(doc)
                obj["metadata"].pop("ownerReferences", None)
                obj["metadata"]["namespace"] = self.namespace
                self.objects.append(obj)
        self.sandbox = next(o for o in self.objects if (o["apiVersion"], o["kind"]) == SANDBOX)
        self.name = self.sandbox["metadata"]["name"]

    def create(self, *, but: frozenset[str] = frozenset()) -> None:
        """The namespace, then the objects but the kinds in `but`, the Sandbox last: its pod is
        refused while its ServiceAccount is missing (see the test of that)."""
        enforce = {f"pod-security.kubernetes.io/{m}": "restricted" for m in ("enforce", "warn")}
        namespace = {"metadata": {"name": self.namespace, "labels": enforce}}
        status, answer = self.plane.request("POST", "/api/v1/namespaces", namespace)
        assert status == 201, answer
        for obj in sorted(self.objects, key=lambda o: o is self.sandbox):
            if obj["kind"] not in but:
                self.create_one(obj)

    def create_one(self, obj: Mapping[str, Any]) -> None:
        status, answer = self.as_crossplane("POST", path_of(self.plane, obj, name=False), obj)
        assert status == 201, f"{obj['kind']}: {answer.get('message')}"

    def as_crossplane(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        return self.plane.request(
            method, path, body, user=CROSSPLANE, group="system:serviceaccounts"
        )

    def get(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        status, answer = self.plane.request("GET", path_of(self.plane, obj))
        assert status in {200, 404}, answer
        return answer if status == 200 else None

    def stored(self) -> dict[str, Any]:
        got = self.get(self.sandbox)
        assert got is not None
        return got

    @property
    def pod_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    def pod(self) -> dict[str, Any] | None:
        status, answer = self.plane.request("GET", self.pod_path)
        assert status in {200, 404}, answer
        return answer if status == 200 else None

    def conditions(self) -> dict[str, dict[str, Any]]:
        return {c["type"]: c for c in self.stored().get("status", {}).get("conditions", [])}

    def settled(self, **want: tuple[str, str]) -> dict[str, Any]:
        """The Sandbox once each condition `type=(status, reason)` is as wanted."""

        def probe() -> dict[str, Any] | None:
            sandbox = self.stored()
            conditions = {c["type"]: c for c in sandbox.get("status", {}).get("conditions", [])}
            ok = all((conditions.get(k, {}).get("status"), conditions.get(k, {}).get("reason"))
                     == v for k, v in want.items())  # fmt: skip
            generation = sandbox["metadata"]["generation"]
            current = all(c["observedGeneration"] == generation for c in conditions.values())
            return sandbox if ok and current else None

        return until(probe, f"the Sandbox's conditions {want}:\n{self.plane.logs(10)}")

    def set_mode(self, mode: str) -> None:
        """What Crossplane writes when the function renders `operatingMode: mode` (the only
        field `spec.power` changes in the Sandbox, `compose/workloads/agent_sandbox/sandbox.py`)."""
        sandbox = self.stored()
        sandbox["spec"]["operatingMode"] = mode
        status, answer = self.as_crossplane("PUT", path_of(self.plane, sandbox), sandbox)
        assert status == 200, answer.get("message")


def kubelet_runs(rendered: Rendered) -> None:
    """Plays the kubelet, which this plane has not: the pod Running and Ready, with an IP, as a
    kubelet reports it on the status subresource. Nothing here binds it to a node."""
    pod = rendered.pod()
    assert pod is not None
    true = [{"type": t, "status": "True"} for t in
            ("PodScheduled", "Initialized", "ContainersReady", "Ready")]  # fmt: skip
    pod["status"] = {
        "phase": "Running",
        "conditions": true,
        "podIP": POD_IP,
        "podIPs": [{"ip": POD_IP}],
    }
    status, answer = rendered.plane.request("PUT", f"{rendered.pod_path}/status", pod)
    assert status == 200, answer.get("message")


@pytest.fixture(
    params=GOLDENS, ids=[str(p.relative_to(ROOT / "tests" / "golden")) for p in GOLDENS]
)
def golden(request: pytest.FixtureRequest) -> Path:
    path: Path = request.param
    return path


@pytest.fixture
def rendered(controlled: ControlPlane, golden: Path) -> Rendered:
    made = Rendered(controlled, golden)
    made.create()
    return made


def seen(sandbox: Mapping[str, Any]) -> dict[str, Any]:
    """The function's observed state of the workload: the Sandbox under its key."""
    return {"sandbox": dict(sandbox)}


def test_the_pod_is_what_the_sandbox_asked_for(rendered: Rendered) -> None:
    pod = until(rendered.pod, "the controller makes the pod")
    sandbox = rendered.stored()
    template = sandbox["spec"]["podTemplate"]
    # The CRD keeps every field of the render, and the pod every field of the Sandbox but the
    # host namespaces' `false`: the controller builds the pod from Go's PodSpec, where they are
    # plain bools left out when false, which means the same (nothing reads them as written).
    assert differences(rendered.sandbox["spec"], sandbox["spec"]) == []
    dropped = {f".{f}: rendered False, got None" for f in ("hostIPC", "hostNetwork", "hostPID")}
    assert set(differences(template["spec"], pod["spec"])) == dropped
    spec, want = pod["spec"], template["spec"]
    assert spec["runtimeClassName"] == want["runtimeClassName"]
    assert spec["securityContext"] == want["securityContext"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == want["serviceAccountName"]
    assert spec["volumes"] == want["volumes"]
    for got, asked in zip(spec["containers"], want["containers"], strict=True):
        assert (got["resources"], got["securityContext"]) == (
            asked["resources"], asked["securityContext"])  # fmt: skip
    # Named as the Sandbox, owned by it, labelled with the template's labels and the
    # controller's own, which no template label overrides.
    meta = pod["metadata"]
    assert meta["name"] == rendered.name
    assert meta["labels"] == {**template["metadata"]["labels"], NAME_HASH: name_hash(rendered.name)}
    assert meta["annotations"] == {
        "agents.x-k8s.io/propagated-labels": ",".join(sorted(template["metadata"]["labels"]))
    }
    assert meta["ownerReferences"] == [
        {"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "name": rendered.name,
         "uid": sandbox["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    ]  # fmt: skip
    # Nothing schedules it: Pending, with no conditions.
    assert pod["status"]["phase"] == "Pending"
    assert "conditions" not in pod["status"]


def test_the_projects_selectors_select_the_pod(rendered: Rendered) -> None:
    pod = until(rendered.pod, "the controller makes the pod")
    labels = pod["metadata"]["labels"]
    selectors = {}
    for obj in rendered.objects:
        if obj["kind"] == "NetworkPolicy":
            selectors["NetworkPolicy"] = obj["spec"]["podSelector"]
        if obj["kind"] == "CiliumNetworkPolicy":
            selectors["CiliumNetworkPolicy"] = obj["spec"]["endpointSelector"]
        if obj["kind"] == "Service":
            selectors["Service"] = obj["spec"]["selector"]
    guard = yaml.safe_load((ROOT / "deploy" / "cilium-guard.yaml").read_text())
    selectors["workspace-sandbox-guard"] = guard["spec"]["endpointSelector"]
    assert set(selectors) == {"NetworkPolicy", "CiliumNetworkPolicy", "Service",
                              "workspace-sandbox-guard"}  # fmt: skip
    assert {k: selects(s, labels) for k, s in selectors.items()} == dict.fromkeys(selectors, True)
    # The guard's per-egress specs select on the egress label, which the pod keeps as rendered.
    for spec in guard["specs"]:
        egress = spec["endpointSelector"].get("matchLabels", {}).get("sandbox.cozystack.io/egress")
        assert selects(spec["endpointSelector"], labels) == (
            egress == labels["sandbox.cozystack.io/egress"])  # fmt: skip


def test_a_pending_pod_leaves_the_sandbox_provisioning(rendered: Rendered) -> None:
    until(rendered.pod, "the controller makes the pod")
    sandbox = rendered.settled(
        Ready=("False", "DependenciesNotReady"),
        Suspended=("False", "NotSuspended"),
        PodScheduled=("Unknown", "PodSchedulingUnknown"),
    )
    assert rendered.conditions()["Ready"]["message"] == "Pod exists with phase: Pending"  # type: ignore[index]
    assert sandbox["status"].get("selector") == f"{NAME_HASH}={name_hash(rendered.name)}"
    assert "podIPs" not in sandbox["status"]
    assert sandbox["metadata"]["annotations"]["agents.x-k8s.io/pod-name"] == rendered.name
    # The function waits, and says what for.
    ws = workspace({"preset": "kata"}, name=rendered.name)
    progress = AgentSandbox().progress(ws, seen(sandbox), clock())
    assert (progress.phase, progress.provisioned.reason, progress.provisioned.message) == (
        "Provisioning", "StartingPod", "waiting: Pod exists with phase: Pending")  # fmt: skip
    assert is_ready(rendered.sandbox, sandbox) is False


def test_no_headless_service_and_the_projects_service_left_alone(rendered: Rendered) -> None:
    until(rendered.pod, "the controller makes the pod")
    rendered.settled(Ready=("False", "DependenciesNotReady"))
    service = next(o for o in rendered.objects if o["kind"] == "Service")
    before = rendered.get(service)
    assert before is not None
    time.sleep(QUIET_SECONDS)
    status, services = rendered.plane.request(
        "GET", f"/api/v1/namespaces/{rendered.namespace}/services"
    )
    assert status == 200, services
    assert [s["metadata"]["name"] for s in services["items"]] == [service["metadata"]["name"]]
    after = services["items"][0]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"]["selector"] == service["spec"]["selector"]
    stored = rendered.stored()["status"]
    assert ("service" not in stored, "serviceFQDN" not in stored) == (True, True)


def test_a_running_pod_makes_the_sandbox_ready(rendered: Rendered) -> None:
    until(rendered.pod, "the controller makes the pod")
    kubelet_runs(rendered)
    sandbox = rendered.settled(
        Ready=("True", "DependenciesReady"), PodScheduled=("True", "PodScheduled")
    )
    assert rendered.conditions()["Ready"]["message"] == "Pod is Ready"  # type: ignore[index]
    assert sandbox["status"]["podIPs"] == [POD_IP]
    ws = workspace({"preset": "kata"}, name=rendered.name)
    progress = AgentSandbox().progress(ws, seen(sandbox), clock())
    assert (progress.phase, progress.provisioned.status) == ("Running", "True")
    assert is_ready(rendered.sandbox, sandbox) is True


def test_suspending_deletes_the_pod_and_keeps_the_claim(rendered: Rendered) -> None:
    first = until(rendered.pod, "the controller makes the pod")
    claim = next(o for o in rendered.objects if o["kind"] == "PersistentVolumeClaim")
    kept = rendered.get(claim)
    rendered.set_mode("Suspended")
    until(lambda: True if rendered.pod() is None else None, "the controller deletes the pod")
    sandbox = rendered.settled(
        Suspended=("True", "PodTerminated"), Ready=("False", "SandboxSuspended")
    )
    assert rendered.conditions()["Ready"]["message"] == "Sandbox is suspended"  # type: ignore[index]
    assert "PodScheduled" not in rendered.conditions()
    assert rendered.get(claim) == kept
    ws = workspace({"preset": "kata", "power": "Suspended"}, name=rendered.name)
    assert AgentSandbox().progress(ws, seen(sandbox), clock()).phase == "Suspended"
    suspended = copy.deepcopy(rendered.sandbox)
    suspended["spec"]["operatingMode"] = "Suspended"
    assert is_ready(suspended, sandbox) is True
    # Resumed: a new pod of the same template, on the same claim.
    rendered.set_mode("Running")
    second = until(rendered.pod, "the controller makes the pod again")
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    assert second["spec"]["volumes"] == first["spec"]["volumes"]
    rendered.settled(Suspended=("False", "NotSuspended"), Ready=("False", "DependenciesNotReady"))
    assert rendered.get(claim) == kept


@pytest.mark.parametrize("propagation", ["Background", "Foreground"])
def test_deleting_the_sandbox_deletes_its_pod_only(rendered: Rendered, propagation: str) -> None:
    """Background: as the garbage collector deletes it when its XR goes (Crossplane's default
    compositeDeletePolicy). Foreground: as Crossplane deletes a composed resource the render
    no longer has (`composition_functions.go`). Either way the collector deletes the pod by its
    owner reference, and nothing else of the render, which the XR owns.

    In the foreground the Sandbox then waits for the collector to remove its
    `foregroundDeletion` finalizer, which the project's policy lets the collector do as
    system:kube-controller-manager or generic-garbage-collector; this plane's controller
    manager authenticates as the administrator, so that last step is refused here and not
    asserted."""
    until(rendered.pod, "the controller makes the pod")
    others = [o for o in rendered.objects if o is not rendered.sandbox]
    before = [rendered.get(o) for o in others]
    path = path_of(rendered.plane, rendered.sandbox)
    status, answer = rendered.as_crossplane("DELETE", path, {"propagationPolicy": propagation})
    assert status == 200, answer
    until(lambda: True if rendered.pod() is None else None, "the garbage collector deletes the pod")
    if propagation == "Background":
        until(lambda: True if rendered.get(rendered.sandbox) is None else None, "the Sandbox goes")
    assert [rendered.get(o) for o in others] == before


def test_only_the_controllers_account_may_make_the_pod(rendered: Rendered) -> None:
    """The project's policy lets agent-sandbox's account create a sandbox's pod, and no one
    else: the controller made it as that account (asked again here with `dryRun=All`)."""
    made = until(rendered.pod, "the controller makes the pod")
    pod = clean(made)
    pod.pop("status")
    pod["metadata"]["name"] += "-again"
    path = f"/api/v1/namespaces/{rendered.namespace}/pods"
    status, answer = rendered.plane.request(
        "POST", path, pod, user=USER, group="system:serviceaccounts", query="dryRun=All"
    )
    assert status == 201, answer.get("message")
    status, answer = rendered.plane.request("POST", path, pod, query="dryRun=All")
    assert status == 403
    assert "workspacesandbox-composed-resources" in answer["message"]


def test_a_sandbox_before_its_account_is_a_passing_reconciler_error(
    controlled: ControlPlane, golden: Path
) -> None:
    """Crossplane applies a render's objects in no set order. A Sandbox stored before its
    ServiceAccount has its pod refused (the ServiceAccount admission plugin), and the
    controller reports that as `ReconcilerError` until a retry succeeds: the function calls
    the sandbox Provisioning while that lasts less than `RETRY_GRACE` (it had called it
    Failed), Failed after, and Provisioning once the retry has made the pod."""
    rendered = Rendered(controlled, golden)
    rendered.create(but=frozenset({"ServiceAccount"}))
    sandbox = rendered.settled(Ready=("False", "ReconcilerError"))
    assert "error looking up service account" in rendered.conditions()["Ready"]["message"]
    ws = workspace({"preset": "kata"}, name=rendered.name)
    retrying = AgentSandbox().progress(ws, seen(sandbox), clock())
    assert (retrying.phase, retrying.provisioned.reason) == ("Provisioning", "ControllerRetrying")
    assert "error looking up service account" in retrying.provisioned.message
    later = clock() + RETRY_GRACE
    assert AgentSandbox().progress(ws, seen(sandbox), later).phase == "Failed"
    rendered.create_one(next(o for o in rendered.objects if o["kind"] == "ServiceAccount"))
    until(rendered.pod, "the controller's retry makes the pod")
    sandbox = rendered.settled(Ready=("False", "DependenciesNotReady"))
    assert AgentSandbox().progress(ws, seen(sandbox), clock()).phase == "Provisioning"
