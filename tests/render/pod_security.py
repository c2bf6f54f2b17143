"""A Pod Security Standards checker for pod specs, plus the stricter rules for sandbox pods.

``restricted_violations`` implements the baseline and restricted profiles of the Kubernetes Pod
Security Standards as documented for Kubernetes v1.33
(https://kubernetes.io/docs/concepts/security/pod-security-standards/), on a PodSpec alone:

* Annotations are out of reach (the checker sees no object metadata), so the AppArmor control
  checks the ``appArmorProfile`` fields only.
* Host ports: the standard allows a "known list"; the built-in admission controller supports
  none, and neither does this checker: any non-zero ``hostPort`` is a violation.
* The restricted Privilege Escalation, Seccomp and Capabilities controls are Linux-only: a pod
  with ``spec.os.name: windows`` is exempt from them, as the standard says.
* A problem is reported once, by the lowest profile that forbids it: ``Unconfined`` seccomp and
  a non-baseline capability are baseline violations and are not reported again as restricted
  ones; a ``hostPath`` volume is a HostPath Volumes violation, not also a Volume Types one.

``stricter_violations`` holds this project's rules for sandbox pods on top of restricted.

Every violation is a sentence that starts with the control name and the field path, e.g.
``"Privilege Escalation: spec.containers[0].securityContext.allowPrivilegeEscalation must be
false"``, so a failing assertion says what to fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from tests.schemas.quantity import parse_quantity

__all__ = ["all_violations", "restricted_violations", "stricter_violations"]

CONTAINER_KINDS: Final = ("containers", "initContainers", "ephemeralContainers")

# Baseline "Capabilities": what a container may add.
BASELINE_CAPABILITIES: Final = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# Restricted "Capabilities": the only capability a container may add back after dropping ALL.
RESTRICTED_CAPABILITIES: Final = frozenset({"NET_BIND_SERVICE"})

APPARMOR_TYPES: Final = frozenset({"RuntimeDefault", "Localhost"})
SECCOMP_TYPES: Final = frozenset({"RuntimeDefault", "Localhost"})
SELINUX_TYPES: Final = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
PROC_MOUNT_TYPES: Final = frozenset({"Default"})

# Baseline "Sysctls": the safe set.
SAFE_SYSCTLS: Final = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)

# Restricted "Volume Types": the volume sources a pod may use.
RESTRICTED_VOLUME_SOURCES: Final = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)

# Stricter "Resources": what every container must request and limit, equally.
SANDBOX_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage")


# -- reading a spec ----------------------------------------------------------------------------


def _map(value: object) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one: absent and null read the same."""
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _get(obj: object, *keys: str) -> Any:
    """The value at ``keys`` under ``obj``, or None where any step is missing."""
    for key in keys:
        obj = _map(obj).get(key)
    return obj


def _set_and_not_false(value: object) -> bool:
    """True when a field whose allowed values are "undefined/nil, false" holds anything else."""
    return value is not None and value is not False


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class _Container:
    path: str  # e.g. "spec.initContainers[1]"
    kind: str  # containers, initContainers or ephemeralContainers
    body: Mapping[str, Any]

    @property
    def context(self) -> Mapping[str, Any]:
        return _map(self.body.get("securityContext"))

    @property
    def context_path(self) -> str:
        return f"{self.path}.securityContext"


def _containers(spec: Mapping[str, Any], path: str) -> Iterator[_Container]:
    for kind in CONTAINER_KINDS:
        for index, body in enumerate(_list(spec.get(kind))):
            yield _Container(f"{path}.{kind}[{index}]", kind, _map(body))


def _volumes(spec: Mapping[str, Any], path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for index, volume in enumerate(_list(spec.get("volumes"))):
        yield f"{path}.volumes[{index}]", _map(volume)


def _is_windows(spec: Mapping[str, Any]) -> bool:
    return bool(_get(spec, "os", "name") == "windows")


# -- baseline ----------------------------------------------------------------------------------


def _host_process(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    pod = f"{path}.securityContext.windowsOptions.hostProcess"
    if _set_and_not_false(_get(spec, "securityContext", "windowsOptions", "hostProcess")):
        yield f"HostProcess: {pod} must be false or unset"
    for c in _containers(spec, path):
        if _set_and_not_false(_get(c.context, "windowsOptions", "hostProcess")):
            yield f"HostProcess: {c.context_path}.windowsOptions.hostProcess must be false or unset"


def _host_namespaces(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if _set_and_not_false(spec.get(field)):
            yield f"Host Namespaces: {path}.{field} must be false or unset"


def _privileged(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    for c in _containers(spec, path):
        if _set_and_not_false(c.context.get("privileged")):
            yield f"Privileged Containers: {c.context_path}.privileged must be false or unset"


def _baseline_capabilities(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    for c in _containers(spec, path):
        for index, cap in enumerate(_list(_get(c.context, "capabilities", "add"))):
            if cap not in BASELINE_CAPABILITIES:
                yield (
                    f"Capabilities: {c.context_path}.capabilities.add[{index}] must not add "
                    f"{cap!r}; the baseline allows only {', '.join(sorted(BASELINE_CAPABILITIES))}"
                )


def _host_path_volumes(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    for vpath, volume in _volumes(spec, path):
        if volume.get("hostPath") is not None:
            yield f"HostPath Volumes: {vpath}.hostPath must be unset (volume {volume.get('name')!r})"


def _host_ports(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    for c in _containers(spec, path):
        for index, port in enumerate(_list(c.body.get("ports"))):
            host_port = _map(port).get("hostPort")
            if host_port is not None and not (_is_int(host_port) and host_port == 0):
                yield f"Host Ports: {c.path}.ports[{index}].hostPort must be 0 or unset, not {host_port!r}"


def _apparmor(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    contexts = [(f"{path}.securityContext", _map(spec.get("securityContext")))]
    contexts += [(c.context_path, c.context) for c in _containers(spec, path)]
    for cpath, context in contexts:
        kind = _get(context, "appArmorProfile", "type")
        if kind is not None and kind not in APPARMOR_TYPES:
            yield (
                f"AppArmor: {cpath}.appArmorProfile.type must be RuntimeDefault, Localhost "
                f"or unset, not {kind!r}"
            )


def _selinux(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    contexts = [(f"{path}.securityContext", _map(spec.get("securityContext")))]
    contexts += [(c.context_path, c.context) for c in _containers(spec, path)]
    for cpath, context in contexts:
        options = _map(context.get("seLinuxOptions"))
        kind = options.get("type")
        if kind is not None and kind not in SELINUX_TYPES:
            yield (
                f"SELinux: {cpath}.seLinuxOptions.type must be unset or one of "
                f"{', '.join(sorted(t for t in SELINUX_TYPES if t))}, not {kind!r}"
            )
        for field in ("user", "role"):
            if options.get(field) not in (None, ""):
                yield f"SELinux: {cpath}.seLinuxOptions.{field} must be unset"


def _proc_mount(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    for c in _containers(spec, path):
        mount = c.context.get("procMount")
        if mount is not None and mount not in PROC_MOUNT_TYPES:
            yield f"/proc Mount Type: {c.context_path}.procMount must be Default or unset, not {mount!r}"


def _baseline_seccomp(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    contexts = [(f"{path}.securityContext", _map(spec.get("securityContext")))]
    contexts += [(c.context_path, c.context) for c in _containers(spec, path)]
    for cpath, context in contexts:
        kind = _get(context, "seccompProfile", "type")
        if kind is not None and kind not in SECCOMP_TYPES:
            yield (
                f"Seccomp: {cpath}.seccompProfile.type must be RuntimeDefault or Localhost, "
                f"not {kind!r}"
            )


def _sysctls(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    for index, sysctl in enumerate(_list(_get(spec, "securityContext", "sysctls"))):
        name = _map(sysctl).get("name")
        if name not in SAFE_SYSCTLS:
            yield (
                f"Sysctls: {path}.securityContext.sysctls[{index}].name {name!r} is not in the "
                "safe set"
            )


# -- restricted --------------------------------------------------------------------------------


def _volume_types(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    for vpath, volume in _volumes(spec, path):
        for source in volume:
            # hostPath is reported by the baseline HostPath Volumes control.
            if source in {"name", "hostPath", *RESTRICTED_VOLUME_SOURCES}:
                continue
            yield (
                f"Volume Types: {vpath}.{source} is not allowed (volume {volume.get('name')!r}); "
                f"use one of {', '.join(RESTRICTED_VOLUME_SOURCES)}"
            )


def _privilege_escalation(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    if _is_windows(spec):
        return
    for c in _containers(spec, path):
        if c.context.get("allowPrivilegeEscalation") is not False:
            yield f"Privilege Escalation: {c.context_path}.allowPrivilegeEscalation must be false"


def _run_as_non_root(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    pod = _get(spec, "securityContext", "runAsNonRoot")
    if pod is not None and pod is not True:
        yield f"Running as Non-root: {path}.securityContext.runAsNonRoot must be true or unset"
    for c in _containers(spec, path):
        own = c.context.get("runAsNonRoot")
        if own is None and pod is True:
            continue
        if own is not True:
            yield (
                f"Running as Non-root: {c.context_path}.runAsNonRoot must be true"
                + (" (or unset with the pod's set to true)" if own is None else "")
            )


def _run_as_user(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    contexts = [(f"{path}.securityContext", _map(spec.get("securityContext")))]
    contexts += [(c.context_path, c.context) for c in _containers(spec, path)]
    for cpath, context in contexts:
        user = context.get("runAsUser")
        if _is_int(user) and user == 0:
            yield f"Running as Non-root user: {cpath}.runAsUser must not be 0"


def _restricted_seccomp(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    if _is_windows(spec) or _get(spec, "securityContext", "seccompProfile", "type") is not None:
        # A pod-level profile covers every container; a bad one is a baseline violation.
        return
    for c in _containers(spec, path):
        if _get(c.context, "seccompProfile", "type") is None:
            yield (
                f"Seccomp: {c.context_path}.seccompProfile.type must be RuntimeDefault or "
                f"Localhost (here or at {path}.securityContext.seccompProfile.type)"
            )


def _restricted_capabilities(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    if _is_windows(spec):
        return
    for c in _containers(spec, path):
        capabilities = _map(c.context.get("capabilities"))
        if "ALL" not in _list(capabilities.get("drop")):
            yield f"Capabilities: {c.context_path}.capabilities.drop must include ALL"
        for index, cap in enumerate(_list(capabilities.get("add"))):
            # Capabilities outside the baseline set are reported by the baseline control.
            if cap in BASELINE_CAPABILITIES and cap not in RESTRICTED_CAPABILITIES:
                yield (
                    f"Capabilities: {c.context_path}.capabilities.add[{index}] must not add "
                    f"{cap!r}; restricted allows only NET_BIND_SERVICE"
                )


_BASELINE_CHECKS: Final = (
    _host_process,
    _host_namespaces,
    _privileged,
    _baseline_capabilities,
    _host_path_volumes,
    _host_ports,
    _apparmor,
    _selinux,
    _proc_mount,
    _baseline_seccomp,
    _sysctls,
)
_RESTRICTED_CHECKS: Final = (
    _volume_types,
    _privilege_escalation,
    _run_as_non_root,
    _run_as_user,
    _restricted_seccomp,
    _restricted_capabilities,
)


def restricted_violations(pod_spec: Mapping[str, Any], *, path: str = "spec") -> list[str]:
    """Every violation of the baseline and restricted Pod Security Standards (v1.33)."""
    spec = _map(pod_spec)
    return [v for check in (*_BASELINE_CHECKS, *_RESTRICTED_CHECKS) for v in check(spec, path)]


# -- stricter: sandbox pods --------------------------------------------------------------------


def _quantity(value: object) -> Decimal | None:
    """The exact value of a Kubernetes quantity, or None if ``value`` is not one."""
    if _is_int(value) or isinstance(value, float):
        value = str(value)
    return parse_quantity(value) if isinstance(value, str) else None


def _service_account(
    spec: Mapping[str, Any], path: str, service_account: str | None
) -> Iterator[str]:
    if spec.get("automountServiceAccountToken") is not False:
        yield f"Service Account Token: {path}.automountServiceAccountToken must be false"
    name = spec.get("serviceAccountName")
    if service_account is None and name not in (None, ""):
        yield f"Service Account: {path}.serviceAccountName must be unset, not {name!r}"
    elif service_account is not None and name != service_account:
        yield f"Service Account: {path}.serviceAccountName must be {service_account!r}, not {name!r}"
    # The deprecated alias of serviceAccountName.
    alias = spec.get("serviceAccount")
    if alias not in (None, "", service_account):
        yield f"Service Account: {path}.serviceAccount must be unset, not {alias!r}"


def _pod_flags(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    if spec.get("enableServiceLinks") is not False:
        yield f"Service Links: {path}.enableServiceLinks must be false"
    # hostUsers: false (a user namespace of its own) is encouraged; only true is refused.
    if _set_and_not_false(spec.get("hostUsers")):
        yield f"Host Users: {path}.hostUsers must not be true"
    if _set_and_not_false(spec.get("shareProcessNamespace")):
        yield f"Process Namespace: {path}.shareProcessNamespace must not be true"
    runtime_class = spec.get("runtimeClassName")
    if not isinstance(runtime_class, str) or not runtime_class:
        yield f"Runtime Class: {path}.runtimeClassName must be set"
    if _list(spec.get("imagePullSecrets")):
        yield f"Image Pull Secrets: {path}.imagePullSecrets must be empty"


def _dns(spec: Mapping[str, Any], path: str, *, cluster_dns: bool) -> Iterator[str]:
    policy = spec.get("dnsPolicy")
    if cluster_dns:
        if policy != "ClusterFirst":
            yield f"DNS: {path}.dnsPolicy must be ClusterFirst, not {policy!r}"
        return
    if policy != "None":
        yield f"DNS: {path}.dnsPolicy must be None, not {policy!r}"
    if not _list(_get(spec, "dnsConfig", "nameservers")):
        yield f"DNS: {path}.dnsConfig.nameservers must list at least one nameserver"


def _sandbox_volumes(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    for vpath, volume in _volumes(spec, path):
        name = volume.get("name")
        if volume.get("secret") is not None:
            yield f"Secret Volumes: {vpath}.secret must be unset (volume {name!r})"
        for index, source in enumerate(_list(_get(volume, "projected", "sources"))):
            for kind in ("serviceAccountToken", "secret"):
                if _map(source).get(kind) is not None:
                    yield (
                        f"Projected Volumes: {vpath}.projected.sources[{index}].{kind} must be "
                        f"unset (volume {name!r})"
                    )
        if "emptyDir" in volume and _map(volume.get("emptyDir")).get("sizeLimit") is None:
            yield f"EmptyDir Size: {vpath}.emptyDir.sizeLimit must be set (volume {name!r})"


def _secret_environment(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    for c in _containers(spec, path):
        for index, env in enumerate(_list(c.body.get("env"))):
            if _get(env, "valueFrom", "secretKeyRef") is not None:
                yield f"Secret Environment: {c.path}.env[{index}].valueFrom.secretKeyRef must be unset"
        for index, source in enumerate(_list(c.body.get("envFrom"))):
            if _map(source).get("secretRef") is not None:
                yield f"Secret Environment: {c.path}.envFrom[{index}].secretRef must be unset"


def _read_only_root(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    for c in _containers(spec, path):
        if c.context.get("readOnlyRootFilesystem") is not True:
            yield f"Read-only Root Filesystem: {c.context_path}.readOnlyRootFilesystem must be true"


def _resources(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    for c in _containers(spec, path):
        if c.kind == "ephemeralContainers":
            continue  # the API forbids resources on ephemeral containers
        requests = _map(_get(c.body, "resources", "requests"))
        limits = _map(_get(c.body, "resources", "limits"))
        for resource in SANDBOX_RESOURCES:
            yield from _request_equals_limit(
                f"{c.path}.resources", resource, requests.get(resource), limits.get(resource)
            )


def _request_equals_limit(rpath: str, resource: str, request: Any, limit: Any) -> Iterator[str]:
    values: list[Decimal] = []
    for side, given in (("requests", request), ("limits", limit)):
        value = None if given is None else _quantity(given)
        if given is None:
            yield f"Resources: {rpath}.{side}.{resource} must be set"
        elif value is None:
            yield f"Resources: {rpath}.{side}.{resource} {given!r} is not a quantity"
        else:
            values.append(value)
    if len(values) == 2 and values[0] != values[1]:
        yield (
            f"Resources: {rpath}.requests.{resource} ({request}) must equal "
            f"{rpath}.limits.{resource} ({limit})"
        )


def _fixed_ids(spec: Mapping[str, Any], path: str) -> Iterator[str]:
    pod_context = _map(spec.get("securityContext"))
    for field in ("runAsUser", "runAsGroup"):
        pod = pod_context.get(field)
        if pod is not None and not (_is_int(pod) and pod > 0):
            yield f"Fixed UID/GID: {path}.securityContext.{field} must be a positive integer"
        for c in _containers(spec, path):
            own = c.context.get(field)
            if own is None and pod is not None:
                continue
            if own is None:
                yield (
                    f"Fixed UID/GID: {c.context_path}.{field} must be set "
                    f"(here or at {path}.securityContext.{field})"
                )
            elif not (_is_int(own) and own > 0):
                yield f"Fixed UID/GID: {c.context_path}.{field} must be a positive integer"


def stricter_violations(
    pod_spec: Mapping[str, Any],
    *,
    path: str = "spec",
    service_account: str | None = None,
    cluster_dns: bool = False,
) -> list[str]:
    """This project's rules for sandbox pods, beyond the restricted profile.

    ``service_account``: the only service account the pod may name (if None, it names none).
    ``cluster_dns``: the pod resolves through cluster DNS (``ClusterFirst``) instead of its own
    nameservers (``dnsPolicy: None``).
    """
    spec = _map(pod_spec)
    return [
        *_service_account(spec, path, service_account),
        *_pod_flags(spec, path),
        *_dns(spec, path, cluster_dns=cluster_dns),
        *_sandbox_volumes(spec, path),
        *_secret_environment(spec, path),
        *_read_only_root(spec, path),
        *_resources(spec, path),
        *_fixed_ids(spec, path),
    ]


def all_violations(
    pod_spec: Mapping[str, Any],
    *,
    path: str = "spec",
    service_account: str | None = None,
    cluster_dns: bool = False,
) -> list[str]:
    """Baseline, restricted and this project's stricter rules together."""
    return restricted_violations(pod_spec, path=path) + stricter_violations(
        pod_spec, path=path, service_account=service_account, cluster_dns=cluster_dns
    )
