"""The Pod Security Standards checker: a hardened pod passes, and each bad variant is caught."""

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.render.pod_security import all_violations, restricted_violations, stricter_violations
from tests.schemas import validate

IMAGE = "ghcr.io/example/agent@sha256:" + "0123456789abcdef" * 4
RESOURCES = {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "1Gi"}

GOOD: dict[str, Any] = {
    "runtimeClassName": "kata-clh",
    "automountServiceAccountToken": False,
    "enableServiceLinks": False,
    "hostUsers": False,
    "shareProcessNamespace": False,
    "dnsPolicy": "None",
    "dnsConfig": {"nameservers": ["9.9.9.9"]},
    "securityContext": {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
    "containers": [
        {
            "name": "agent",
            "image": IMAGE,
            "workingDir": "/workspace",
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "resources": {"requests": dict(RESOURCES), "limits": dict(RESOURCES)},
            "volumeMounts": [
                {"name": "workspace", "mountPath": "/workspace"},
                {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - a mount point, not a file
            ],
        }
    ],
    "volumes": [
        {"name": "workspace", "persistentVolumeClaim": {"claimName": "workspace"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
    ],
}

Mutation = Callable[[dict[str, Any]], None]


def good() -> dict[str, Any]:
    return copy.deepcopy(GOOD)


def agent(spec: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = spec["containers"][0]
    return container


def agent_context(spec: dict[str, Any]) -> dict[str, Any]:
    context: dict[str, Any] = agent(spec)["securityContext"]
    return context


def hardened(name: str, **extra: Any) -> dict[str, Any]:
    """A second container as hardened as the agent, to mutate on its own."""
    container = copy.deepcopy(GOOD["containers"][0])
    container.pop("volumeMounts")
    return {**container, "name": name, **extra}


def with_init(spec: dict[str, Any]) -> dict[str, Any]:
    spec["initContainers"] = [hardened("init")]
    init: dict[str, Any] = spec["initContainers"][0]
    return init


def with_ephemeral(spec: dict[str, Any]) -> dict[str, Any]:
    debug = hardened("debug")
    debug.pop("resources")  # the API forbids resources on ephemeral containers
    spec["ephemeralContainers"] = [debug]
    return debug


def sets(*keys: str, value: Any) -> Mutation:
    """Set ``value`` at ``keys`` under the pod spec, creating maps on the way."""

    def mutate(spec: dict[str, Any]) -> None:
        target = spec
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value

    return mutate


def on_agent(*keys: str, value: Any) -> Mutation:
    def mutate(spec: dict[str, Any]) -> None:
        sets(*keys, value=value)(agent(spec))

    return mutate


def on_agent_context(*keys: str, value: Any) -> Mutation:
    return on_agent("securityContext", *keys, value=value)


def drops(*keys: str) -> Mutation:
    def mutate(spec: dict[str, Any]) -> None:
        target = spec
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return mutate


def on_agent_drops(*keys: str) -> Mutation:
    def mutate(spec: dict[str, Any]) -> None:
        drops(*keys)(agent(spec))

    return mutate


def adds_volume(volume: dict[str, Any]) -> Mutation:
    def mutate(spec: dict[str, Any]) -> None:
        spec["volumes"].append(volume)

    return mutate


def both(*mutations: Mutation) -> Mutation:
    def mutate(spec: dict[str, Any]) -> None:
        for mutation in mutations:
            mutation(spec)

    return mutate


# -- tricky variants ---------------------------------------------------------------------------


def non_root_only_at_pod_level_but_false_on_a_container(spec: dict[str, Any]) -> None:
    del agent_context(spec)["runAsNonRoot"]  # the pod's true would cover it...
    with_init(spec)["securityContext"]["runAsNonRoot"] = False  # ...but not an explicit false


def non_root_nowhere(spec: dict[str, Any]) -> None:
    del spec["securityContext"]["runAsNonRoot"]
    del agent_context(spec)["runAsNonRoot"]


def seccomp_unconfined_on_init_container_only(spec: dict[str, Any]) -> None:
    with_init(spec)["securityContext"]["seccompProfile"] = {"type": "Unconfined"}


def seccomp_nowhere(spec: dict[str, Any]) -> None:
    del spec["securityContext"]["seccompProfile"]
    del agent_context(spec)["seccompProfile"]


def seccomp_only_on_the_pod_missing_on_a_container(spec: dict[str, Any]) -> None:
    del spec["securityContext"]["seccompProfile"]
    with_init(spec)["securityContext"].pop("seccompProfile")


def root_user_on_ephemeral_container(spec: dict[str, Any]) -> None:
    with_ephemeral(spec)["securityContext"]["runAsUser"] = 0


def host_port_on_init_container(spec: dict[str, Any]) -> None:
    with_init(spec)["ports"] = [{"containerPort": 8080, "hostPort": 8080}]


def escalation_on_ephemeral_container(spec: dict[str, Any]) -> None:
    del with_ephemeral(spec)["securityContext"]["allowPrivilegeEscalation"]


def privileged_init_container(spec: dict[str, Any]) -> None:
    with_init(spec)["securityContext"]["privileged"] = True


def writable_root_on_ephemeral_container(spec: dict[str, Any]) -> None:
    with_ephemeral(spec)["securityContext"]["readOnlyRootFilesystem"] = False


def init_container_without_resources(spec: dict[str, Any]) -> None:
    del with_init(spec)["resources"]


def secret_env_on_init_container(spec: dict[str, Any]) -> None:
    with_init(spec)["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}}
    ]


def ids_nowhere(field: str) -> Mutation:
    def mutate(spec: dict[str, Any]) -> None:
        del spec["securityContext"][field]
        del agent_context(spec)[field]

    return mutate


AGENT = "spec.containers[0]"
AGENT_SC = f"{AGENT}.securityContext"
INIT_SC = "spec.initContainers[0].securityContext"
DEBUG_SC = "spec.ephemeralContainers[0].securityContext"

BAD = [
    # -- baseline --
    pytest.param(
        sets("securityContext", "windowsOptions", "hostProcess", value=True),
        "HostProcess: spec.securityContext.windowsOptions.hostProcess",
        id="host-process-pod",
    ),
    pytest.param(
        on_agent_context("windowsOptions", "hostProcess", value=True),
        f"HostProcess: {AGENT_SC}.windowsOptions.hostProcess",
        id="host-process-container",
    ),
    pytest.param(
        sets("hostNetwork", value=True),
        "Host Namespaces: spec.hostNetwork",
        id="host-network",
    ),
    pytest.param(sets("hostPID", value=True), "Host Namespaces: spec.hostPID", id="host-pid"),
    pytest.param(sets("hostIPC", value=True), "Host Namespaces: spec.hostIPC", id="host-ipc"),
    pytest.param(
        on_agent_context("privileged", value=True),
        f"Privileged Containers: {AGENT_SC}.privileged",
        id="privileged",
    ),
    pytest.param(
        privileged_init_container,
        f"Privileged Containers: {INIT_SC}.privileged",
        id="privileged-init-container",
    ),
    pytest.param(
        on_agent_context("capabilities", "add", value=["SYS_ADMIN"]),
        f"Capabilities: {AGENT_SC}.capabilities.add[0] must not add 'SYS_ADMIN'",
        id="capabilities-add-sys-admin",
    ),
    pytest.param(
        adds_volume({"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}),
        "HostPath Volumes: spec.volumes[2].hostPath",
        id="host-path-volume",
    ),
    pytest.param(
        on_agent("ports", value=[{"containerPort": 80, "hostPort": 80}]),
        f"Host Ports: {AGENT}.ports[0].hostPort",
        id="host-port",
    ),
    pytest.param(
        host_port_on_init_container,
        "Host Ports: spec.initContainers[0].ports[0].hostPort",
        id="host-port-init-container",
    ),
    pytest.param(
        on_agent_context("appArmorProfile", value={"type": "Unconfined"}),
        f"AppArmor: {AGENT_SC}.appArmorProfile.type",
        id="apparmor-unconfined",
    ),
    pytest.param(
        sets("securityContext", "appArmorProfile", value={"type": "Unconfined"}),
        "AppArmor: spec.securityContext.appArmorProfile.type",
        id="apparmor-unconfined-pod",
    ),
    pytest.param(
        on_agent_context("seLinuxOptions", value={"type": "spc_t"}),
        f"SELinux: {AGENT_SC}.seLinuxOptions.type",
        id="selinux-type",
    ),
    pytest.param(
        sets("securityContext", "seLinuxOptions", value={"user": "system_u"}),
        "SELinux: spec.securityContext.seLinuxOptions.user",
        id="selinux-user",
    ),
    pytest.param(
        on_agent_context("seLinuxOptions", value={"role": "system_r"}),
        f"SELinux: {AGENT_SC}.seLinuxOptions.role",
        id="selinux-role",
    ),
    pytest.param(
        on_agent_context("procMount", value="Unmasked"),
        f"/proc Mount Type: {AGENT_SC}.procMount",
        id="proc-mount-unmasked",
    ),
    pytest.param(
        sets("securityContext", "seccompProfile", value={"type": "Unconfined"}),
        "Seccomp: spec.securityContext.seccompProfile.type must be RuntimeDefault or Localhost, not 'Unconfined'",
        id="seccomp-unconfined-pod",
    ),
    pytest.param(
        seccomp_unconfined_on_init_container_only,
        f"Seccomp: {INIT_SC}.seccompProfile.type must be RuntimeDefault or Localhost, not 'Unconfined'",
        id="seccomp-unconfined-init-container-only",
    ),
    pytest.param(
        sets("securityContext", "sysctls", value=[{"name": "kernel.msgmax", "value": "65536"}]),
        "Sysctls: spec.securityContext.sysctls[0].name 'kernel.msgmax'",
        id="unsafe-sysctl",
    ),
    # -- restricted --
    pytest.param(
        adds_volume({"name": "repo", "gitRepo": {"repository": "https://example.com/r.git"}}),
        "Volume Types: spec.volumes[2].gitRepo is not allowed",
        id="git-repo-volume",
    ),
    pytest.param(
        adds_volume({"name": "share", "nfs": {"server": "nfs.example", "path": "/"}}),
        "Volume Types: spec.volumes[2].nfs is not allowed",
        id="nfs-volume",
    ),
    pytest.param(
        on_agent_context("allowPrivilegeEscalation", value=True),
        f"Privilege Escalation: {AGENT_SC}.allowPrivilegeEscalation must be false",
        id="privilege-escalation-true",
    ),
    pytest.param(
        escalation_on_ephemeral_container,
        f"Privilege Escalation: {DEBUG_SC}.allowPrivilegeEscalation must be false",
        id="privilege-escalation-unset-on-ephemeral-container",
    ),
    pytest.param(
        non_root_only_at_pod_level_but_false_on_a_container,
        f"Running as Non-root: {INIT_SC}.runAsNonRoot must be true",
        id="non-root-at-pod-but-false-on-a-container",
    ),
    pytest.param(
        non_root_nowhere,
        f"Running as Non-root: {AGENT_SC}.runAsNonRoot must be true",
        id="non-root-nowhere",
    ),
    pytest.param(
        sets("securityContext", "runAsNonRoot", value=False),
        "Running as Non-root: spec.securityContext.runAsNonRoot",
        id="non-root-false-at-pod",
    ),
    pytest.param(
        sets("securityContext", "runAsUser", value=0),
        "Running as Non-root user: spec.securityContext.runAsUser must not be 0",
        id="root-user-pod",
    ),
    pytest.param(
        root_user_on_ephemeral_container,
        f"Running as Non-root user: {DEBUG_SC}.runAsUser must not be 0",
        id="root-user-ephemeral-container",
    ),
    pytest.param(
        seccomp_nowhere,
        f"Seccomp: {AGENT_SC}.seccompProfile.type must be RuntimeDefault or Localhost (here or at",
        id="seccomp-unset",
    ),
    pytest.param(
        seccomp_only_on_the_pod_missing_on_a_container,
        f"Seccomp: {INIT_SC}.seccompProfile.type must be RuntimeDefault or Localhost (here or at",
        id="seccomp-missing-on-one-container",
    ),
    pytest.param(
        on_agent_context("capabilities", value={"drop": ["NET_RAW"]}),
        f"Capabilities: {AGENT_SC}.capabilities.drop must include ALL",
        id="capabilities-drop-missing-all",
    ),
    pytest.param(
        on_agent_context("capabilities", value={"drop": ["ALL"], "add": ["CHOWN"]}),
        f"Capabilities: {AGENT_SC}.capabilities.add[0] must not add 'CHOWN'; restricted",
        id="capabilities-add-baseline-but-not-restricted",
    ),
    # -- stricter --
    pytest.param(
        drops("automountServiceAccountToken"),
        "Service Account Token: spec.automountServiceAccountToken must be false",
        id="automount-token-unset",
    ),
    pytest.param(
        sets("automountServiceAccountToken", value=True),
        "Service Account Token: spec.automountServiceAccountToken must be false",
        id="automount-token-true",
    ),
    pytest.param(
        sets("serviceAccountName", value="default"),
        "Service Account: spec.serviceAccountName must be unset",
        id="service-account-named",
    ),
    pytest.param(
        sets("serviceAccount", value="builder"),
        "Service Account: spec.serviceAccount must be unset",
        id="deprecated-service-account-named",
    ),
    pytest.param(
        drops("enableServiceLinks"),
        "Service Links: spec.enableServiceLinks must be false",
        id="service-links",
    ),
    pytest.param(
        sets("hostUsers", value=True),
        "Host Users: spec.hostUsers must not be true",
        id="host-users",
    ),
    pytest.param(
        adds_volume({"name": "creds", "secret": {"secretName": "creds"}}),
        "Secret Volumes: spec.volumes[2].secret",
        id="secret-volume",
    ),
    pytest.param(
        adds_volume(
            {
                "name": "token",
                "projected": {
                    "sources": [
                        {"configMap": {"name": "ca"}},
                        {"serviceAccountToken": {"path": "token", "audience": "api"}},
                    ]
                },
            }
        ),
        "Projected Volumes: spec.volumes[2].projected.sources[1].serviceAccountToken",
        id="projected-service-account-token",
    ),
    pytest.param(
        adds_volume({"name": "mix", "projected": {"sources": [{"secret": {"name": "creds"}}]}}),
        "Projected Volumes: spec.volumes[2].projected.sources[0].secret",
        id="projected-secret",
    ),
    pytest.param(
        sets("imagePullSecrets", value=[{"name": "registry"}]),
        "Image Pull Secrets: spec.imagePullSecrets",
        id="image-pull-secrets",
    ),
    pytest.param(
        secret_env_on_init_container,
        "Secret Environment: spec.initContainers[0].env[0].valueFrom.secretKeyRef",
        id="secret-env",
    ),
    pytest.param(
        on_agent("envFrom", value=[{"configMapRef": {"name": "c"}}, {"secretRef": {"name": "s"}}]),
        f"Secret Environment: {AGENT}.envFrom[1].secretRef",
        id="secret-env-from",
    ),
    pytest.param(
        on_agent_context("readOnlyRootFilesystem", value=False),
        f"Read-only Root Filesystem: {AGENT_SC}.readOnlyRootFilesystem must be true",
        id="writable-root",
    ),
    pytest.param(
        writable_root_on_ephemeral_container,
        f"Read-only Root Filesystem: {DEBUG_SC}.readOnlyRootFilesystem must be true",
        id="writable-root-ephemeral-container",
    ),
    pytest.param(
        on_agent("resources", "requests", value={}),
        f"Resources: {AGENT}.resources.requests.cpu must be set",
        id="limits-without-requests",
    ),
    pytest.param(
        on_agent_drops("resources", "limits", "ephemeral-storage"),
        f"Resources: {AGENT}.resources.limits.ephemeral-storage must be set",
        id="no-ephemeral-storage-limit",
    ),
    pytest.param(
        on_agent("resources", "requests", "memory", value="2Gi"),
        f"Resources: {AGENT}.resources.requests.memory (2Gi) must equal {AGENT}.resources.limits.memory (4Gi)",
        id="requests-not-equal-limits",
    ),
    pytest.param(
        on_agent("resources", "limits", "cpu", value="two"),
        f"Resources: {AGENT}.resources.limits.cpu 'two' is not a quantity",
        id="resource-not-a-quantity",
    ),
    pytest.param(
        init_container_without_resources,
        "Resources: spec.initContainers[0].resources.requests.memory must be set",
        id="init-container-without-resources",
    ),
    pytest.param(
        drops("runtimeClassName"),
        "Runtime Class: spec.runtimeClassName must be set",
        id="runtime-class-unset",
    ),
    pytest.param(
        sets("runtimeClassName", value=""),
        "Runtime Class: spec.runtimeClassName must be set",
        id="runtime-class-empty",
    ),
    pytest.param(
        sets("dnsPolicy", value="ClusterFirst"),
        "DNS: spec.dnsPolicy must be None, not 'ClusterFirst'",
        id="dns-cluster-first",
    ),
    pytest.param(
        sets("dnsConfig", value={"nameservers": []}),
        "DNS: spec.dnsConfig.nameservers must list at least one nameserver",
        id="dns-no-nameservers",
    ),
    pytest.param(
        adds_volume({"name": "scratch", "emptyDir": {}}),
        "EmptyDir Size: spec.volumes[2].emptyDir.sizeLimit must be set",
        id="empty-dir-without-size-limit",
    ),
    pytest.param(
        ids_nowhere("runAsUser"),
        f"Fixed UID/GID: {AGENT_SC}.runAsUser must be set",
        id="uid-unset",
    ),
    pytest.param(
        ids_nowhere("runAsGroup"),
        f"Fixed UID/GID: {AGENT_SC}.runAsGroup must be set",
        id="gid-unset",
    ),
    pytest.param(
        on_agent_context("runAsGroup", value=0),
        f"Fixed UID/GID: {AGENT_SC}.runAsGroup must be a positive integer",
        id="gid-root",
    ),
    pytest.param(
        sets("shareProcessNamespace", value=True),
        "Process Namespace: spec.shareProcessNamespace must not be true",
        id="share-process-namespace",
    ),
]


def test_the_hardened_pod_has_no_violations() -> None:
    assert all_violations(good()) == []


def test_the_hardened_pod_is_a_valid_pod() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent"}, "spec": good()}
    assert validate(pod) == []


@pytest.mark.parametrize(("mutation", "expected"), BAD)
def test_each_bad_variant_is_reported(mutation: Mutation, expected: str) -> None:
    spec = good()
    mutation(spec)
    found = all_violations(spec)
    assert any(v.startswith(expected) for v in found), found
    assert all_violations(good()) == [], "a mutation leaked into the hardened pod"


def test_every_control_has_a_bad_variant() -> None:
    controls = {
        # baseline
        "HostProcess",
        "Host Namespaces",
        "Privileged Containers",
        "Capabilities",
        "HostPath Volumes",
        "Host Ports",
        "AppArmor",
        "SELinux",
        "/proc Mount Type",
        "Seccomp",
        "Sysctls",
        # restricted
        "Volume Types",
        "Privilege Escalation",
        "Running as Non-root",
        "Running as Non-root user",
        # stricter
        "Service Account Token",
        "Service Account",
        "Service Links",
        "Host Users",
        "Secret Volumes",
        "Projected Volumes",
        "Image Pull Secrets",
        "Secret Environment",
        "Read-only Root Filesystem",
        "Resources",
        "Runtime Class",
        "DNS",
        "EmptyDir Size",
        "Fixed UID/GID",
        "Process Namespace",
    }
    covered = {str(param.values[1]).split(":", 1)[0] for param in BAD}
    assert covered == controls


def test_violations_start_with_the_control_and_the_path() -> None:
    spec = good()
    spec["hostNetwork"] = True
    agent_context(spec)["allowPrivilegeEscalation"] = True
    assert restricted_violations(spec) == [
        "Host Namespaces: spec.hostNetwork must be false or unset",
        "Privilege Escalation: spec.containers[0].securityContext.allowPrivilegeEscalation must be false",
    ]


def test_path_prefixes_every_field() -> None:
    spec = good()
    spec["hostPID"] = True
    del agent_context(spec)["readOnlyRootFilesystem"]
    assert all_violations(spec, path="spec.template.spec") == [
        "Host Namespaces: spec.template.spec.hostPID must be false or unset",
        "Read-only Root Filesystem: spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem must be true",
    ]


def test_a_problem_is_reported_once() -> None:
    spec = good()
    agent_context(spec)["capabilities"] = {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    agent_context(spec)["seccompProfile"] = {"type": "Unconfined"}
    spec["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    assert len(restricted_violations(spec)) == 3


def test_pod_level_defaults_cover_every_container() -> None:
    spec = good()
    for field in ("runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile"):
        del agent_context(spec)[field]
    with_init(spec)["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    debug = with_ephemeral(spec)
    debug["securityContext"] = dict(spec["initContainers"][0]["securityContext"])
    assert all_violations(spec) == []


def test_every_container_may_carry_the_settings_instead_of_the_pod() -> None:
    spec = good()
    spec["securityContext"] = {"fsGroup": 1000}
    assert all_violations(spec) == []


def test_restricted_allows_adding_net_bind_service_and_safe_sysctls() -> None:
    spec = good()
    agent_context(spec)["capabilities"] = {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    spec["securityContext"]["sysctls"] = [
        {"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"},
        {"name": "net.ipv4.tcp_keepalive_time", "value": "600"},
    ]
    spec["securityContext"]["seLinuxOptions"] = {"type": "container_t", "level": "s0:c1,c2"}
    agent_context(spec)["appArmorProfile"] = {"type": "RuntimeDefault"}
    agent_context(spec)["seccompProfile"] = {"type": "Localhost", "localhostProfile": "p.json"}
    agent_context(spec)["procMount"] = "Default"
    agent(spec)["ports"] = [{"containerPort": 8080, "hostPort": 0}]
    assert all_violations(spec) == []


def test_restricted_volume_types_are_allowed() -> None:
    spec = good()
    spec["volumes"] += [
        {"name": "cm", "configMap": {"name": "settings"}},
        {"name": "info", "downwardAPI": {"items": []}},
        {"name": "csi", "csi": {"driver": "example.csi"}},
        {"name": "eph", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        {"name": "proj", "projected": {"sources": [{"configMap": {"name": "ca"}}]}},
    ]
    assert all_violations(spec) == []


def test_a_secret_volume_passes_restricted_but_not_the_sandbox_rules() -> None:
    spec = good()
    spec["volumes"].append({"name": "creds", "secret": {"secretName": "creds"}})
    assert restricted_violations(spec) == []
    assert stricter_violations(spec) == [
        "Secret Volumes: spec.volumes[2].secret must be unset (volume 'creds')"
    ]


def test_windows_pods_are_exempt_from_the_linux_only_controls() -> None:
    spec = good()
    spec["os"] = {"name": "windows"}
    del spec["securityContext"]["seccompProfile"]
    for field in ("allowPrivilegeEscalation", "capabilities", "seccompProfile"):
        del agent_context(spec)[field]
    assert restricted_violations(spec) == []


def test_a_minimal_pod_violates_restricted_but_not_baseline() -> None:
    spec = {"containers": [{"name": "app", "image": "nginx"}]}
    controls = {v.split(":", 1)[0] for v in restricted_violations(spec)}
    assert controls == {"Privilege Escalation", "Running as Non-root", "Seccomp", "Capabilities"}


def test_the_named_service_account_is_required_when_given() -> None:
    spec = good()
    assert stricter_violations(spec, service_account="sandbox") == [
        "Service Account: spec.serviceAccountName must be 'sandbox', not None"
    ]
    spec["serviceAccountName"] = "sandbox"
    assert stricter_violations(spec, service_account="sandbox") == []
    spec["serviceAccountName"] = "admin"
    assert stricter_violations(spec, service_account="sandbox") == [
        "Service Account: spec.serviceAccountName must be 'sandbox', not 'admin'"
    ]


def test_cluster_dns_requires_cluster_first() -> None:
    spec = good()
    assert stricter_violations(spec, cluster_dns=True) == [
        "DNS: spec.dnsPolicy must be ClusterFirst, not 'None'"
    ]
    spec["dnsPolicy"] = "ClusterFirst"
    del spec["dnsConfig"]
    assert all_violations(spec, cluster_dns=True) == []


@pytest.mark.parametrize(
    ("request_", "limit"),
    [("4Gi", "4096Mi"), ("1", "1000m"), ("0.5", "500m"), ("1e3", "1k"), (2, "2")],
)
def test_requests_equal_limits_compares_quantities(request_: Any, limit: Any) -> None:
    spec = good()
    agent(spec)["resources"]["requests"]["memory"] = request_
    agent(spec)["resources"]["limits"]["memory"] = limit
    assert stricter_violations(spec) == []


def test_all_violations_is_both_lists() -> None:
    spec = good()
    spec["hostIPC"] = True
    spec["enableServiceLinks"] = True
    assert all_violations(spec) == restricted_violations(spec) + stricter_violations(spec)
    assert len(all_violations(spec)) == 2
