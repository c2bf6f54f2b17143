"""deploy/admission-composed-resources.yaml: tenants can't change or pause what was composed."""

import copy
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import pytest

from tests.deploy.admission import sandbox_request, verdict
from tests.deploy.install import (
    COLLECTOR,
    CONTROLLER_MANAGER,
    CROSSPLANE,
    NAMESPACE_CONTROLLER,
    PLURALS,
    PROVIDER,
    PROVIDER_GROUPS,
    TENANT,
    TENANT_NAMESPACE,
    composed_kinds,
    find,
    group_of,
    xrd,
)
from tests.schemas import validate, validate_xrd_object
from tests.support import NAMESPACE, ROOT, load_stream

POLICY = "workspacesandbox-composed-resources"
MESSAGE = (
    "this belongs to a WorkspaceSandbox: only Crossplane and the controllers that own it change "
    "it; change the WorkspaceSandbox instead"
)
REFUSED = [MESSAGE]
WORKSPACE = "sandbox.cozystack.io/workspace"

VIRT_CONTROLLER = "system:serviceaccount:cozy-kubevirt:kubevirt-controller"
VIRT_HANDLER = "system:serviceaccount:cozy-kubevirt:kubevirt-handler"
VIRT_API = "system:serviceaccount:cozy-kubevirt:kubevirt-apiserver"
CDI = "system:serviceaccount:cozy-kubevirt-cdi:cdi-sa"
AGENT_SANDBOX = "system:serviceaccount:agent-sandbox-system:agent-sandbox-controller"
SNAPSHOTTER = "system:serviceaccount:cozy-snapshot-controller:snapshot-controller"
BINDER = "system:serviceaccount:kube-system:persistent-volume-binder"
SCHEDULER = "system:kube-scheduler"
KUBE_OVN = "system:serviceaccount:cozy-kubeovn:ovn"
TENANT_ACCOUNT = "system:serviceaccount:tenant-acme:default"

# Who may do what besides Crossplane and the provider, and why. A change to the policy's lists
# fails test_the_policy_names_exactly_these_writers until it is made here too.
WRITERS = {
    COLLECTOR: "deletes what a deleted WorkspaceSandbox owned; removes foreground finalizers",
    CONTROLLER_MANAGER: "the garbage and namespace controllers without their own accounts",
    NAMESPACE_CONTROLLER: "empties a namespace being deleted",
    VIRT_CONTROLLER: "VM finalizers and spec patches; creates and updates VMIs and their pods",
    VIRT_HANDLER: "VMI status and labels (a VMI has no status subresource)",
    CDI: "DataVolume annotations and finalizers; the claims it populates",
    AGENT_SANDBOX: "Sandbox metadata; creates the Sandbox's pod",
    SNAPSHOTTER: "VolumeSnapshot finalizers and annotations",
    BINDER: "binds a claim: spec.volumeName and its annotations",
    "system:serviceaccount:kube-system:pvc-protection-controller": "claim protection finalizer",
    SCHEDULER: "records the node a WaitForFirstConsumer claim binds on",
}

# (API group, kind) -> (version, resource) for the kinds the tests write.
RESOURCES = {
    **{(g, k): ("v1", r) for (g, k), r in PLURALS.items()},
    ("kubevirt.io", "VirtualMachineInstance"): ("v1", "virtualmachineinstances"),
    ("kubevirt.io", "VirtualMachineInstanceReplicaSet"): (
        "v1",
        "virtualmachineinstancereplicasets",
    ),
    ("", "Pod"): ("v1", "pods"),
    ("", "ConfigMap"): ("v1", "configmaps"),
}


# --------------------------------------------------------------------------- composed objects


@cache
def golden(case: str) -> dict[str, dict[str, Any]]:
    """A golden render's composed objects by kind, with the metadata Crossplane adds."""
    docs = load_stream(ROOT / "tests" / "golden" / f"{case}.yaml")
    # The XR, and the results a render prints after the composed objects, are not composed.
    return {
        d["kind"]: d
        for d in docs
        if d["kind"] != "WorkspaceSandbox"
        and not d["apiVersion"].startswith("render.crossplane.io/")
    }


def composed() -> list[dict[str, Any]]:
    vm, pod = golden("running"), golden("kata")
    return [*vm.values(), *(m for k, m in pod.items() if k not in vm)]


def vmi() -> dict[str, Any]:
    """The VM's VirtualMachineInstance, as virt-controller creates it."""
    vm = golden("running")["VirtualMachine"]
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": vm["metadata"]["name"],
            "namespace": NAMESPACE,
            "labels": {**vm["spec"]["template"]["metadata"]["labels"]},
            "ownerReferences": [owner(vm)],
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
        },
        "spec": copy.deepcopy(vm["spec"]["template"]["spec"]),
    }


def launcher() -> dict[str, Any]:
    """The VMI's virt-launcher pod, carrying the VMI's labels."""
    instance = vmi()
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"virt-launcher-{instance['metadata']['name']}-x7k2p",
            "namespace": NAMESPACE,
            "labels": {**instance["metadata"]["labels"], "kubevirt.io": "virt-launcher"},
            "ownerReferences": [owner(instance)],
        },
        "spec": {"containers": [{"name": "compute", "image": "virt-launcher"}]},
    }


def sandbox_pod() -> dict[str, Any]:
    """The agent-sandbox controller's pod for the composed Sandbox."""
    sandbox = golden("kata")["Sandbox"]
    template = sandbox["spec"]["podTemplate"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": sandbox["metadata"]["name"],
            "namespace": NAMESPACE,
            "labels": {**template["metadata"]["labels"]},
            "ownerReferences": [owner(sandbox)],
        },
        "spec": copy.deepcopy(template["spec"]),
    }


def data_volume_claim() -> dict[str, Any]:
    """The DataVolume's claim: CDI copies the DataVolume's labels and annotations onto it."""
    dv = golden("running")["DataVolume"]
    meta = dv["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": meta["name"],
            "namespace": NAMESPACE,
            "labels": {**meta["labels"], "app": "containerized-data-importer"},
            "annotations": {
                **meta["annotations"],
                "cdi.kubevirt.io/storage.contentType": "kubevirt",
            },
            "ownerReferences": [owner(dv)],
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "20Gi"}},
            "storageClassName": "replicated",
        },
    }


def owner(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def write(
    operation: str,
    obj: Mapping[str, Any],
    *,
    username: str = TENANT,
    change: Callable[[dict[str, Any]], object] | None = None,
    sub_resource: str = "",
    labels: Mapping[str, str] = TENANT_NAMESPACE,
) -> str | list[str]:
    """The policy's verdict on `operation` of `obj` (UPDATE: `obj` changed by `change`)."""
    group = group_of(obj["apiVersion"])
    version, resource = RESOURCES[group, obj["kind"]]
    request: dict[str, Any] = {
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": resource},
        "namespace": obj["metadata"]["namespace"],
        "name": obj["metadata"]["name"],
    }
    if sub_resource:
        request["subResource"] = sub_resource
    new: dict[str, Any] | None = copy.deepcopy(dict(obj))
    old: Mapping[str, Any] | None = obj
    if operation == "CREATE":
        old = None
    elif operation == "DELETE":
        new = None
    elif change is not None and new is not None:
        change(new)
    return verdict(POLICY, request, new, old, labels)


def ident(obj: Mapping[str, Any]) -> str:
    return obj["kind"]


# --------------------------------------------------------------------------- who may write


@pytest.mark.parametrize("obj", composed(), ids=ident)
@pytest.mark.parametrize(
    ("operation", "username", "want"),
    [
        pytest.param("CREATE", TENANT, REFUSED, id="tenant-pre-creates-it"),
        pytest.param("UPDATE", TENANT, REFUSED, id="tenant-edits-it"),
        pytest.param("DELETE", TENANT, REFUSED, id="tenant-deletes-it"),
        pytest.param("UPDATE", TENANT_ACCOUNT, REFUSED, id="a-tenant-service-account"),
        pytest.param("UPDATE", VIRT_API, REFUSED, id="virt-api-on-virtctl-stop-or-addvolume"),
        pytest.param("CREATE", CROSSPLANE, "exempt", id="crossplane-composes-it"),
        pytest.param("UPDATE", CROSSPLANE, "exempt", id="crossplane-applies-it"),
        pytest.param("DELETE", CROSSPLANE, "exempt", id="crossplane-deletes-it"),
        pytest.param("UPDATE", PROVIDER, "exempt", id="provider-kubernetes-grows-a-claim"),
        pytest.param("DELETE", COLLECTOR, [], id="garbage-collector-deletes-an-xrs-objects"),
        pytest.param("UPDATE", COLLECTOR, [], id="garbage-collector-removes-a-finalizer"),
        pytest.param("CREATE", COLLECTOR, REFUSED, id="garbage-collector-never-creates"),
        pytest.param("DELETE", NAMESPACE_CONTROLLER, [], id="namespace-controller-empties-it"),
        pytest.param("UPDATE", NAMESPACE_CONTROLLER, REFUSED, id="namespace-controller-updates"),
        pytest.param("DELETE", CONTROLLER_MANAGER, [], id="kube-controller-manager"),
        pytest.param("UPDATE", VIRT_CONTROLLER, [], id="an-owning-controller-updates-it"),
        pytest.param("DELETE", VIRT_CONTROLLER, REFUSED, id="an-owning-controller-deletes-it"),
        pytest.param("CREATE", VIRT_CONTROLLER, REFUSED, id="an-owning-controller-creates-it"),
        pytest.param("UPDATE", KUBE_OVN, REFUSED, id="any-other-controller"),
    ],
)
def test_only_crossplane_and_the_owning_controllers_write_composed_objects(
    obj: dict[str, Any], operation: str, username: str, want: str | list[str]
) -> None:
    def relabel(o: dict[str, Any]) -> None:
        o["metadata"]["annotations"]["note"] = "changed"

    assert write(operation, obj, username=username, change=relabel) == want


def drop_markers(o: dict[str, Any]) -> None:
    meta = o["metadata"]
    del meta["ownerReferences"], meta["annotations"]
    meta["labels"] = {"app": "mine"}


def vm_change(change: Callable[[dict[str, Any]], object]) -> Callable[[dict[str, Any]], object]:
    return lambda o: change(o["spec"]["template"])


ATTACKS: list[Any] = [
    pytest.param(
        "VirtualMachine",
        vm_change(lambda t: t["metadata"]["labels"].clear()),
        id="drop-the-workspace-label-from-the-vms-template",
    ),
    pytest.param(
        "VirtualMachine",
        vm_change(
            lambda t: t["spec"]["volumes"].append(
                {"name": "other", "persistentVolumeClaim": {"claimName": "bob-api-workspace"}}
            )
        ),
        id="mount-another-sandboxs-disk",
    ),
    pytest.param(
        "VirtualMachine",
        vm_change(
            lambda t: t["spec"]["volumes"].append(
                {"name": "sa", "serviceAccount": {"serviceAccountName": "default"}}
            )
        ),
        id="add-a-service-account-token",
    ),
    pytest.param("VirtualMachine", drop_markers, id="drop-every-marker-at-once"),
    pytest.param("Service", lambda o: o["spec"].update(type="NodePort"), id="expose-the-service"),
    pytest.param(
        "CiliumNetworkPolicy",
        lambda o: o["spec"].pop("egressDeny"),
        id="drop-the-egress-denies",
    ),
    pytest.param(
        "VolumeSnapshot",
        lambda o: o["metadata"].update(finalizers=[]),
        id="remove-a-finalizer",
    ),
    pytest.param(
        "DataVolume",
        lambda o: o["metadata"]["labels"].pop("crossplane.io/composite"),
        id="drop-crossplanes-label",
    ),
]


@pytest.mark.parametrize(("kind", "change"), ATTACKS)
def test_a_tenant_cannot_take_a_sandbox_out_of_its_policies(
    kind: str, change: Callable[[dict[str, Any]], object]
) -> None:
    obj = golden("running")[kind]
    if kind == "VolumeSnapshot":
        obj = {
            **obj,
            "metadata": {
                **obj["metadata"],
                "finalizers": [
                    "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection"
                ],
            },
        }
    assert write("UPDATE", obj, change=change) == REFUSED


def hijacker_vm() -> dict[str, Any]:
    """A tenant's own VM whose pod would carry a sandbox's label, and take its traffic."""
    vm = copy.deepcopy(golden("running")["VirtualMachine"])
    meta = vm["metadata"]
    meta.update(name="mallory", labels={"app": "mallory"})
    del meta["annotations"], meta["ownerReferences"]
    return vm


def hijacker_service() -> dict[str, Any]:
    """A tenant's NodePort Service selecting a sandbox's pod."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "mallory", "namespace": NAMESPACE},
        "spec": {
            "type": "NodePort",
            "selector": {WORKSPACE: "alice-api"},
            "ports": [{"port": 49983}],
        },
    }


def unrelated_vm() -> dict[str, Any]:
    vm = hijacker_vm()
    vm["spec"]["template"]["metadata"]["labels"] = {"app": "mallory"}
    return vm


@pytest.mark.parametrize(
    ("make", "want"),
    [
        pytest.param(hijacker_vm, REFUSED, id="a-vm-carrying-a-sandboxs-label"),
        pytest.param(hijacker_service, REFUSED, id="a-service-selecting-a-sandbox"),
        pytest.param(unrelated_vm, "exempt", id="a-tenants-own-vm-is-its-own-business"),
    ],
)
def test_a_tenant_cannot_create_what_would_pass_for_a_sandbox(
    make: Callable[[], dict[str, Any]], want: str | list[str]
) -> None:
    obj = make()
    assert validate(obj) == []
    assert write("CREATE", obj) == want


# --------------------------------------------------------------------------- pods and VMIs


RUNTIME = [pytest.param(vmi, id="vmi"), pytest.param(launcher, id="virt-launcher-pod")]
RUNTIME += [pytest.param(sandbox_pod, id="sandbox-pod")]


def annotate(o: dict[str, Any]) -> None:
    o["metadata"].setdefault("annotations", {})["ovn.kubernetes.io/allocated"] = "true"


def relabel(o: dict[str, Any]) -> None:
    o["metadata"]["labels"].pop(WORKSPACE)


def disown(o: dict[str, Any]) -> None:
    o["metadata"]["ownerReferences"] = []


@pytest.mark.parametrize("make", RUNTIME)
@pytest.mark.parametrize(
    ("operation", "username", "change", "want"),
    [
        pytest.param("DELETE", TENANT, None, [], id="a-tenant-restarts-its-sandbox"),
        pytest.param("UPDATE", KUBE_OVN, annotate, [], id="annotations-by-anyone"),
        pytest.param("UPDATE", TENANT, relabel, REFUSED, id="a-tenant-drops-the-label"),
        pytest.param("UPDATE", TENANT, disown, REFUSED, id="a-tenant-drops-the-owner"),
        pytest.param("CREATE", TENANT, None, REFUSED, id="a-tenant-creates-one"),
        pytest.param(
            "CREATE",
            "system:serviceaccount:kube-system:replicaset-controller",
            None,
            REFUSED,
            id="a-replicaset-of-the-tenants-never-carries-the-label",
        ),
        pytest.param("UPDATE", VIRT_HANDLER, relabel, [], id="virt-handler-updates-vmis"),
    ],
)
def test_a_sandboxs_pod_may_be_restarted_not_changed(
    make: Callable[[], dict[str, Any]],
    operation: str,
    username: str,
    change: Callable[[dict[str, Any]], object] | None,
    want: str | list[str],
) -> None:
    assert write(operation, make(), username=username, change=change) == want


def test_a_tenant_cannot_debug_into_a_sandboxs_pod() -> None:
    def debug(o: dict[str, Any]) -> None:
        o["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox"}]

    pod = sandbox_pod()
    assert write("UPDATE", pod, change=debug, sub_resource="ephemeralcontainers") == REFUSED


@pytest.mark.parametrize(
    ("make", "username", "want"),
    [
        pytest.param(vmi, VIRT_CONTROLLER, [], id="virt-controller-starts-the-vm"),
        pytest.param(launcher, VIRT_CONTROLLER, [], id="virt-controller-creates-its-pod"),
        pytest.param(sandbox_pod, AGENT_SANDBOX, [], id="agent-sandbox-creates-its-pod"),
        pytest.param(vmi, AGENT_SANDBOX, REFUSED, id="agent-sandbox-creates-no-vmi"),
        pytest.param(data_volume_claim, CDI, [], id="cdi-creates-the-data-volumes-claim"),
        pytest.param(data_volume_claim, TENANT, REFUSED, id="a-tenant-pre-creates-that-claim"),
        pytest.param(launcher, CDI, REFUSED, id="cdi-creates-no-sandbox-pod"),
    ],
)
def test_the_owning_controllers_launch_a_sandbox(
    make: Callable[[], dict[str, Any]], username: str, want: str | list[str]
) -> None:
    assert write("CREATE", make(), username=username) == want


@pytest.mark.parametrize(
    ("kind", "username"),
    [
        pytest.param("VirtualMachine", VIRT_CONTROLLER, id="virt-controller-a-vm-of-a-pool"),
        pytest.param("Sandbox", AGENT_SANDBOX, id="agent-sandbox-a-sandbox-of-a-claim"),
        pytest.param("VolumeSnapshot", CDI, id="cdi-a-snapshot"),
        pytest.param("PersistentVolumeClaim", VIRT_CONTROLLER, id="virt-controller-a-claim"),
    ],
)
def test_controllers_create_no_composed_kind(kind: str, username: str) -> None:
    obj = golden("kata").get(kind) or golden("running")[kind]
    assert write("CREATE", obj, username=username) == REFUSED


@pytest.mark.parametrize(
    ("kind", "username"),
    [
        pytest.param("DataVolume", CDI, id="cdi-annotates-a-data-volume"),
        pytest.param("VolumeSnapshot", SNAPSHOTTER, id="snapshot-controller-adds-finalizers"),
        pytest.param("Sandbox", AGENT_SANDBOX, id="agent-sandbox-updates-its-sandbox"),
        pytest.param("PersistentVolumeClaim", BINDER, id="the-binder-binds-a-claim"),
        pytest.param("PersistentVolumeClaim", SCHEDULER, id="the-scheduler-picks-a-node"),
    ],
)
def test_owning_controllers_update_what_they_own(kind: str, username: str) -> None:
    obj = golden("kata").get(kind) or golden("running")[kind]
    assert write("UPDATE", obj, username=username, change=annotate) == []


# --------------------------------------------------------------------------- scope


def test_other_objects_of_a_tenant_are_not_matched() -> None:
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": NAMESPACE, "labels": {"app": "x"}},
    }
    assert write("DELETE", config) == "exempt"
    assert write("UPDATE", unrelated_vm(), change=annotate) == "exempt"


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        pytest.param(TENANT_NAMESPACE, REFUSED, id="tenant-namespace"),
        pytest.param(
            {"kubernetes.io/metadata.name": "cozy-kubevirt", "cozystack.io/system": "true"},
            "unmatched",
            id="cozystack-system-namespace",
        ),
        pytest.param({"kubernetes.io/metadata.name": "kube-system"}, "unmatched", id="kube-system"),
    ],
)
def test_every_namespace_but_the_platforms_own(labels: dict[str, str], want: Any) -> None:
    obj = copy.deepcopy(golden("running")["Service"])
    obj["metadata"]["namespace"] = labels["kubernetes.io/metadata.name"]
    assert write("DELETE", obj, labels=labels) == want


def test_status_writes_are_not_matched() -> None:
    vm = golden("running")["VirtualMachine"]
    assert write("UPDATE", vm, username=VIRT_CONTROLLER, sub_resource="status") == "unmatched"


def matched() -> set[tuple[str, str]]:
    spec = find("ValidatingAdmissionPolicy", POLICY)["spec"]
    return {
        (group, resource)
        for rule in spec["matchConstraints"]["resourceRules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def test_every_kind_composed_into_a_namespace_is_protected() -> None:
    # provider-kubernetes' kinds have their own policy (provider-kubernetes-writers); a
    # ComputePlane is served by Cozystack's aggregated API, which admission never sees.
    elsewhere = {(g, r) for g, r in composed_kinds() if g in PROVIDER_GROUPS}
    aggregated = {("apps.cozystack.io", "computeplanes")}
    assert composed_kinds() - elsewhere - aggregated <= matched()
    # And what runs a sandbox, or could pass for one.
    runtime = {
        ("", "pods"),
        ("", "pods/ephemeralcontainers"),
        ("kubevirt.io", "virtualmachineinstances"),
        ("kubevirt.io", "virtualmachineinstancereplicasets"),
    }
    assert runtime <= matched()


def test_the_policy_names_exactly_these_writers() -> None:
    spec = find("ValidatingAdmissionPolicy", POLICY)["spec"]
    assert find("ValidatingAdmissionPolicyBinding", POLICY)["spec"] == {
        "policyName": POLICY,
        "validationActions": ["Deny"],
    }
    assert spec["failurePolicy"] == "Fail"
    named = set()
    for variable in spec["variables"]:
        for part in variable["expression"].split("'system:")[1:]:
            named.add("system:" + part.split("'")[0])
    assert named == set(WRITERS)
    exempt = spec["matchConditions"][0]["expression"]
    assert f"'{CROSSPLANE}'" in exempt
    assert f"'{PROVIDER}'" in exempt


# --------------------------------------------------------------------------- pausing

PAUSED = (
    "the platform reconciles every WorkspaceSandbox; remove the annotation crossplane.io/paused"
)


def sandbox(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": "alice-api", "namespace": NAMESPACE},
        "spec": {"image": "ubuntu-24.04"},
    }
    if annotations is not None:
        obj["metadata"]["annotations"] = annotations
    assert validate_xrd_object(xrd(), obj) == []
    return obj


def pause(
    annotations: dict[str, str] | None,
    old: dict[str, str] | None = None,
    username: str = TENANT,
    *,
    update: bool = False,
) -> str | list[str]:
    request = sandbox_request("UPDATE" if update else "CREATE", username)
    previous = sandbox(old) if update else None
    return verdict("workspacesandbox-reconciliation", request, sandbox(annotations), previous)


@pytest.mark.parametrize(
    ("annotations", "old", "update", "want"),
    [
        pytest.param(None, None, False, [], id="create-without-annotations"),
        pytest.param({"note": "mine"}, None, False, [], id="create-with-other-annotations"),
        pytest.param({"crossplane.io/paused": "true"}, None, False, [PAUSED], id="create-paused"),
        pytest.param(
            {"crossplane.io/paused": "false"}, None, False, [PAUSED], id="any-value-is-refused"
        ),
        pytest.param({"crossplane.io/paused": "true"}, {}, True, [PAUSED], id="update-pausing-it"),
        pytest.param({}, {"crossplane.io/paused": "true"}, True, [], id="update-unpausing-it"),
    ],
)
def test_tenants_cannot_pause_a_sandbox(
    annotations: dict[str, str] | None,
    old: dict[str, str] | None,
    update: bool,
    want: list[str],
) -> None:
    assert pause(annotations, old, update=update) == want


def test_crossplane_is_not_checked_for_pausing() -> None:
    assert pause({"crossplane.io/paused": "true"}, username=CROSSPLANE) == "exempt"
    spec = find("ValidatingAdmissionPolicy", "workspacesandbox-reconciliation")["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": [xrd()["spec"]["group"]],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": [xrd()["spec"]["names"]["plural"]],
        }
    ]
    assert find("ValidatingAdmissionPolicyBinding", "workspacesandbox-reconciliation")["spec"] == {
        "policyName": "workspacesandbox-reconciliation",
        "validationActions": ["Deny"],
    }
