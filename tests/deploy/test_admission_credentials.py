"""deploy/admission-plane-credentials.yaml: no tenant workload reads a ComputePlane's credentials."""

import copy
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from function.compose.placements.plane import SECRET_REQUIREMENT
from function.render import render
from tests.deploy.admission import verdict
from tests.deploy.install import CROSSPLANE, TENANT, TENANT_NAMESPACE, find
from tests.schemas import validate
from tests.support import NAMESPACE, NOW, PLATFORM, platform_input, workspace

POLICY = "plane-credentials"
MESSAGE = (
    "workloads here may not use a ComputePlane's control-plane credentials (Secrets named "
    "<plane>-cluster-admin-kubeconfig and the like): only the platform's own components do; "
    "remove the reference"
)
ADMIN = "computeplane-cluster-admin-kubeconfig"
MINE = "alice-api-settings"
FLUX = "system:serviceaccount:cozy-fluxcd:flux"
KAMAJI = "system:serviceaccount:cozy-kamaji:kamaji"
KUBE_OVN = "system:serviceaccount:cozy-kubeovn:ovn"
VIRT_CONTROLLER = "system:serviceaccount:cozy-kubevirt:kubevirt-controller"

# The writers the policy leaves alone, and why. A change to the policy's list fails
# test_the_exempt_writers_are_exactly_the_platforms_own until it is made here too.
EXEMPT = {
    FLUX: "Flux's helm-controller installs the plane's chart, whose kccm, kcsi and "
    "cluster-autoscaler Deployments and Jobs mount the admin kubeconfig",
    KAMAJI: "Kamaji runs the plane's control plane with its certificates and kubeconfigs",
    **{
        f"system:serviceaccount:kube-system:{name}": "a workload controller creates objects "
        "from a template admitted at its own level"
        for name in (
            "replicaset-controller",
            "deployment-controller",
            "statefulset-controller",
            "daemon-set-controller",
            "job-controller",
            "cronjob-controller",
            "replication-controller",
        )
    },
    "system:kube-controller-manager": "the same controllers without their own ServiceAccounts",
}

# Kamaji's credentials of the control plane <plane>-cluster: each is worth cluster-admin.
CREDENTIALS = [
    "computeplane-cluster-admin-kubeconfig",
    "computeplane-cluster-kubeconfig",
    "computeplane-cluster-controller-manager-kubeconfig",
    "computeplane-cluster-scheduler-kubeconfig",
    "computeplane-cluster-konnectivity-kubeconfig",
    "computeplane-cluster-ca",
    "computeplane-cluster-sa",
    "computeplane-cluster-sa-certificate",
    "computeplane-cluster-front-proxy-ca-certificate",
    "computeplane-cluster-front-proxy-client-certificate",
    "computeplane-cluster-api-server-kubelet-client-certificate",
    "computeplane-cluster-datastore-certificate",
    "computeplane-cluster-datastore-config",
    "computeplane-cluster-talos-ca",
    "computeplane-cluster-talos-secrets",
    "alice-api-plane-cluster-admin-kubeconfig",
]

# --------------------------------------------------------------------------- workloads

# kind -> (API group, version, resource)
RESOURCES = {
    "Pod": ("", "v1", "pods"),
    "PodTemplate": ("", "v1", "podtemplates"),
    "ReplicationController": ("", "v1", "replicationcontrollers"),
    "Deployment": ("apps", "v1", "deployments"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "DaemonSet": ("apps", "v1", "daemonsets"),
    "Job": ("batch", "v1", "jobs"),
    "CronJob": ("batch", "v1", "cronjobs"),
    "VirtualMachine": ("kubevirt.io", "v1", "virtualmachines"),
    "VirtualMachineInstance": ("kubevirt.io", "v1", "virtualmachineinstances"),
    "VirtualMachineInstanceReplicaSet": (
        "kubevirt.io",
        "v1",
        "virtualmachineinstancereplicasets",
    ),
    "VirtualMachinePool": ("pool.kubevirt.io", "v1beta1", "virtualmachinepools"),
    "Sandbox": ("agents.x-k8s.io", "v1beta1", "sandboxes"),
    "SandboxTemplate": ("extensions.agents.x-k8s.io", "v1beta1", "sandboxtemplates"),
}
SELECTOR = {"matchLabels": {"app": "tool"}}
LABELS = {"labels": {"app": "tool"}}


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "tool", "image": "registry.example.com/tool@sha256:" + "a" * 64, **fields}


def pod_spec(**fields: Any) -> dict[str, Any]:
    return {"containers": [container()], **fields}


def secret_volume(name: str) -> dict[str, Any]:
    return {"name": "config", "secret": {"secretName": name}}


def vm_spec(**fields: Any) -> dict[str, Any]:
    return {
        "domain": {"devices": {}, "memory": {"guest": "1Gi"}},
        "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/x"}}],
        **fields,
    }


def wrap(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A workload of `kind` whose pod (or VM) spec is `spec`."""
    template = {"metadata": LABELS, "spec": spec}
    vm = {"runStrategy": "Always", "template": template}
    bodies: dict[str, dict[str, Any]] = {
        "Pod": {"spec": spec},
        "PodTemplate": {"template": template},
        "ReplicationController": {"spec": {"selector": {"app": "tool"}, "template": template}},
        "Deployment": {"spec": {"selector": SELECTOR, "template": template}},
        "ReplicaSet": {"spec": {"selector": SELECTOR, "template": template}},
        "StatefulSet": {"spec": {"selector": SELECTOR, "template": template}},
        "DaemonSet": {"spec": {"selector": SELECTOR, "template": template}},
        "Job": {"spec": {"template": {**template, "spec": {**spec, "restartPolicy": "Never"}}}},
        "CronJob": {
            "spec": {
                "schedule": "@hourly",
                "jobTemplate": {
                    "spec": {"template": {**template, "spec": {**spec, "restartPolicy": "Never"}}}
                },
            }
        },
        "VirtualMachine": {"spec": vm},
        "VirtualMachineInstance": {"spec": spec},
        "VirtualMachineInstanceReplicaSet": {
            "spec": {"replicas": 1, "selector": SELECTOR, "template": template}
        },
        "VirtualMachinePool": {
            "spec": {
                "replicas": 1,
                "selector": SELECTOR,
                "virtualMachineTemplate": {"metadata": LABELS, "spec": vm},
            }
        },
        "Sandbox": {"spec": {"podTemplate": template}},
        "SandboxTemplate": {"spec": {"podTemplate": template}},
    }
    group, version, _ = RESOURCES[kind]
    return {
        "apiVersion": f"{group}/{version}" if group else version,
        "kind": kind,
        "metadata": {"name": "tool", "namespace": NAMESPACE},
        **bodies[kind],
    }


def check(
    obj: Mapping[str, Any],
    *,
    username: str = TENANT,
    old: Mapping[str, Any] | None = None,
    sub_resource: str = "",
    labels: Mapping[str, str] = TENANT_NAMESPACE,
) -> str | list[str]:
    """The policy's verdict on writing `obj` (an update of `old` when given)."""
    group, version, resource = RESOURCES[obj["kind"]]
    request: dict[str, Any] = {
        "operation": "CREATE" if old is None else "UPDATE",
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": resource},
        "namespace": obj["metadata"]["namespace"],
        "name": obj["metadata"]["name"],
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return verdict(POLICY, request, obj, old, labels)


POD_KINDS = [k for k in RESOURCES if not k.startswith("VirtualMachine")]
VM_KINDS = [k for k in RESOURCES if k.startswith("VirtualMachine")]

# Every place in a pod spec where a Secret's data reaches the workload.
POD_REFERENCES: dict[str, Callable[[str], dict[str, Any]]] = {
    "secret-volume": lambda n: pod_spec(volumes=[secret_volume(n)]),
    "projected-secret": lambda n: pod_spec(
        volumes=[{"name": "all", "projected": {"sources": [{"secret": {"name": n}}]}}]
    ),
    "env-secret-key-ref": lambda n: pod_spec(
        containers=[
            container(env=[{"name": "K", "valueFrom": {"secretKeyRef": {"name": n, "key": "k"}}}])
        ]
    ),
    "env-from-secret": lambda n: pod_spec(
        containers=[container(envFrom=[{"secretRef": {"name": n}}])]
    ),
    "init-container-env": lambda n: pod_spec(
        initContainers=[container(envFrom=[{"secretRef": {"name": n}}])]
    ),
}
# And in a KubeVirt VMI spec, where KubeVirt hands it to the guest.
VM_REFERENCES: dict[str, Callable[[str], dict[str, Any]]] = {
    "secret-disk": lambda n: vm_spec(volumes=[secret_volume(n)]),
    "cloud-init-user-data": lambda n: vm_spec(
        volumes=[{"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": n}}}]
    ),
    "cloud-init-network-data": lambda n: vm_spec(
        volumes=[{"name": "ci", "cloudInitNoCloud": {"networkDataSecretRef": {"name": n}}}]
    ),
    "config-drive-user-data": lambda n: vm_spec(
        volumes=[{"name": "ci", "cloudInitConfigDrive": {"secretRef": {"name": n}}}]
    ),
    "config-drive-network-data": lambda n: vm_spec(
        volumes=[{"name": "ci", "cloudInitConfigDrive": {"networkDataSecretRef": {"name": n}}}]
    ),
    "sysprep": lambda n: vm_spec(volumes=[{"name": "sp", "sysprep": {"secret": {"name": n}}}]),
    "ssh-keys-written-into-the-guest": lambda n: vm_spec(
        accessCredentials=[
            {
                "sshPublicKey": {
                    "source": {"secret": {"secretName": n}},
                    "propagationMethod": {"noCloud": {}},
                }
            }
        ]
    ),
    "password-set-in-the-guest": lambda n: vm_spec(
        accessCredentials=[
            {
                "userPassword": {
                    "source": {"secret": {"secretName": n}},
                    "propagationMethod": {"qemuGuestAgent": {}},
                }
            }
        ]
    ),
}
CASES = [
    (kind, where, make)
    for kinds, references in ((POD_KINDS, POD_REFERENCES), (VM_KINDS, VM_REFERENCES))
    for kind in kinds
    for where, make in references.items()
]
IDS = [f"{kind}-{where}" for kind, where, _ in CASES]


@pytest.mark.parametrize(("kind", "where", "make"), CASES, ids=IDS)
def test_a_tenant_workload_may_not_reference_the_planes_admin_kubeconfig(
    kind: str, where: str, make: Callable[[str], dict[str, Any]]
) -> None:
    del where
    obj = wrap(kind, make(ADMIN))
    if kind in {"Pod", "Deployment", "CronJob", "VirtualMachine", "Sandbox"}:
        assert validate(obj) == []  # a real object, as the API server would admit it
    assert check(obj) == [MESSAGE]


@pytest.mark.parametrize(("kind", "where", "make"), CASES, ids=IDS)
def test_a_tenant_workload_may_reference_its_own_secrets(
    kind: str, where: str, make: Callable[[str], dict[str, Any]]
) -> None:
    del where
    assert check(wrap(kind, make(MINE))) == []


@pytest.mark.parametrize("name", CREDENTIALS)
def test_every_control_plane_credential_is_withheld(name: str) -> None:
    assert check(wrap("VirtualMachine", vm_spec(volumes=[secret_volume(name)]))) == [MESSAGE]


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("kubernetes-prod-admin-kubeconfig", id="a-tenant-clusters-own-kubeconfig"),
        pytest.param("computeplane-cluster-admin-kubeconfig-notes", id="only-the-suffix-counts"),
        pytest.param("cluster-ca-bundle", id="a-name-that-only-contains-a-suffix"),
        pytest.param("computeplane-values", id="the-planes-other-secrets"),
    ],
)
def test_other_secrets_are_not_credentials(name: str) -> None:
    assert check(wrap("VirtualMachine", vm_spec(volumes=[secret_volume(name)]))) == []


def test_the_secret_the_function_requires_for_a_plane_is_withheld() -> None:
    # The name comes from the function's own requirement, so a preset whose
    # computePlane.kubeconfigSecretSuffix the policy doesn't cover fails here.
    placed = [
        name
        for name, preset in platform_input()["presets"].items()
        if preset.get("placement", "Namespace").endswith("ComputePlane")
    ]
    assert placed
    for name in placed:
        out = render(workspace({"preset": name}), PLATFORM, {}, NOW)
        secret = out.requirements[SECRET_REQUIREMENT]["name"]
        assert check(wrap("Pod", pod_spec(volumes=[secret_volume(secret)]))) == [MESSAGE], name


def test_an_ephemeral_container_may_not_read_one() -> None:
    pod = wrap("Pod", pod_spec())
    debugged = copy.deepcopy(pod)
    debugged["spec"]["ephemeralContainers"] = [
        {
            "name": "debug",
            "image": "busybox",
            "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": ADMIN, "key": "k"}}}],
        }
    ]
    assert check(debugged, old=pod, sub_resource="ephemeralcontainers") == [MESSAGE]


@pytest.mark.parametrize(
    ("before", "after", "want"),
    [
        pytest.param(MINE, ADMIN, [MESSAGE], id="adding-a-reference-is-refused"),
        pytest.param(ADMIN, ADMIN, [], id="an-object-that-had-one-keeps-it"),
        pytest.param(ADMIN, MINE, [], id="removing-one-is-fine"),
        pytest.param(MINE, MINE, [], id="no-reference"),
    ],
)
def test_updates_refuse_only_a_new_reference(before: str, after: str, want: list[str]) -> None:
    # Controllers outside the exempt list update the platform's own pods (Kube-OVN annotates
    # every pod): they must not be refused for a reference the pod was created with.
    old = wrap("Pod", pod_spec(volumes=[secret_volume(before)]))
    new = wrap("Pod", pod_spec(volumes=[secret_volume(after)]))
    new["metadata"]["annotations"] = {"ovn.kubernetes.io/allocated": "true"}
    assert check(new, old=old, username=KUBE_OVN) == want


@pytest.mark.parametrize(
    ("username", "want"),
    [
        pytest.param(FLUX, "exempt", id="flux-installs-the-planes-chart"),
        pytest.param(KAMAJI, "exempt", id="kamaji-runs-the-control-plane"),
        pytest.param(
            "system:serviceaccount:kube-system:replicaset-controller",
            "exempt",
            id="the-replicaset-controller-creates-its-pods",
        ),
        pytest.param(CROSSPLANE, [MESSAGE], id="crossplane-composes-no-such-workload"),
        pytest.param(VIRT_CONTROLLER, [MESSAGE], id="virt-controller-is-not-trusted-with-one"),
        pytest.param(
            "system:serviceaccount:tenant-acme:flux", [MESSAGE], id="a-tenant-account-named-flux"
        ),
        pytest.param(
            "system:serviceaccount:kube-system:generic-garbage-collector",
            [MESSAGE],
            id="only-the-workload-controllers-of-kube-system",
        ),
    ],
)
def test_only_the_platforms_own_components_write_such_workloads(
    username: str, want: str | list[str]
) -> None:
    kccm = wrap("Deployment", pod_spec(volumes=[secret_volume(ADMIN)]))
    assert check(kccm, username=username) == want


def test_the_exempt_writers_are_exactly_the_platforms_own() -> None:
    (condition,) = find("ValidatingAdmissionPolicy", POLICY)["spec"]["matchConditions"]
    named = {part.split("'")[0] for part in condition["expression"].split("'system:")[1:] if part}
    assert {f"system:{n}" for n in named} == set(EXEMPT)


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        pytest.param(TENANT_NAMESPACE, [MESSAGE], id="tenant-namespace"),
        pytest.param(
            {"kubernetes.io/metadata.name": "tenant-root"}, [MESSAGE], id="the-root-tenant"
        ),
        pytest.param(
            {"kubernetes.io/metadata.name": "cozy-kamaji", "cozystack.io/system": "true"},
            "unmatched",
            id="cozystack-system-namespace",
        ),
        pytest.param({"kubernetes.io/metadata.name": "kube-system"}, "unmatched", id="kube-system"),
    ],
)
def test_every_namespace_but_the_platforms_own(
    labels: dict[str, str], want: str | list[str]
) -> None:
    vm = wrap("VirtualMachine", vm_spec(volumes=[secret_volume(ADMIN)]))
    vm["metadata"]["namespace"] = labels["kubernetes.io/metadata.name"]
    assert check(vm, labels=labels) == want


def test_the_policy_denies_every_matched_write() -> None:
    assert find("ValidatingAdmissionPolicyBinding", POLICY)["spec"] == {
        "policyName": POLICY,
        "validationActions": ["Deny"],
    }
    spec = find("ValidatingAdmissionPolicy", POLICY)["spec"]
    assert spec["failurePolicy"] == "Fail"
    matched = {
        (group, resource)
        for rule in spec["matchConstraints"]["resourceRules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert matched == {(g, r) for g, _, r in RESOURCES.values()} | {
        ("", "pods/ephemeralcontainers")
    }
    assert all(
        rule["operations"] == ["CREATE", "UPDATE"]
        for rule in spec["matchConstraints"]["resourceRules"]
    )
