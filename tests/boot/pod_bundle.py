"""A rendered pod spec as OCI runtime bundles: what kubelet and containerd would ask of runc.

The pod tier runs the function's own pod under runc and runsc, so the bundle must carry every
part of the spec that hardens it: the user and groups, the read-only root, the capabilities, no
new privileges, the RuntimeDefault seccomp profile, the volumes and how they are mounted, the
resources a runtime enforces, the env, command, working directory and hostname. Every field is
read by name; one this module does not apply, or a value it cannot honour, is refused
(`UnsupportedError`), so a hardening field added to the function can never be dropped here unseen.

What containerd adds on its own is added as it adds it (its default mounts, masked and
read-only paths, device rules, `/etc/hosts`, `/etc/hostname` and `/etc/resolv.conf` read-only
under a read-only root). A few fields are the kubelet's or the scheduler's, not a runtime's;
they are read, and what they mean on one node is said where they are read.

Pure: the host's paths come in (`Host`), the bundles' `config.json` contents come out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.schemas.quantity import parse_quantity

# containerd's default capabilities (oci.DefaultCapabilities), what a container keeps unless
# its securityContext drops them.
DEFAULT_CAPABILITIES = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)
# containerd's defaults for procMount Default (oci.populateDefaultUnixSpec).
MASKED_PATHS = (
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
    "/proc/scsi",
)
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
DEFAULT_MOUNTS = (
    {
        "destination": "/proc",
        "type": "proc",
        "source": "proc",
        "options": ["nosuid", "noexec", "nodev"],
    },
    {
        "destination": "/dev",
        "type": "tmpfs",
        "source": "tmpfs",
        "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
    },
    {
        "destination": "/dev/pts",
        "type": "devpts",
        "source": "devpts",
        "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
    },
    {
        "destination": "/dev/shm",  # noqa: S108  # the container's own tmpfs
        "type": "tmpfs",
        "source": "shm",
        "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
    },
    {
        "destination": "/dev/mqueue",
        "type": "mqueue",
        "source": "mqueue",
        "options": ["nosuid", "noexec", "nodev"],
    },
    {
        "destination": "/sys",
        "type": "sysfs",
        "source": "sysfs",
        "options": ["nosuid", "noexec", "nodev", "ro"],
    },
    {
        "destination": "/sys/fs/cgroup",
        "type": "cgroup",
        "source": "cgroup",
        "options": ["nosuid", "noexec", "nodev", "relatime", "ro"],
    },
)
CPU_PERIOD = 100_000  # microseconds, as kubelet sets it


class UnsupportedError(ValueError):
    """A pod-spec field, or a value of one, that the pod tier does not know how to apply."""


class _Fields:
    """A mapping read field by field: `close` refuses whatever was not read."""

    def __init__(self, value: Any, path: str) -> None:
        if not isinstance(value, Mapping):
            raise UnsupportedError(f"{path}: not a mapping")
        self.value, self.path, self.read = value, path, set[str]()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return self.value.get(key, default)

    def only(self, key: str, allowed: tuple[Any, ...], default: Any = None) -> Any:
        """The field, which must be one of `allowed` (absent reads as `default`)."""
        found = self.get(key, default)
        if found not in allowed:
            raise UnsupportedError(
                f"{self.path}.{key}: {found!r} is not applied (only {allowed!r})"
            )
        return found

    def sub(self, key: str) -> _Fields:
        return _Fields(self.get(key) or {}, f"{self.path}.{key}")

    def items(self, key: str) -> Iterator[tuple[int, _Fields]]:
        for i, item in enumerate(self.get(key) or []):
            yield i, _Fields(item, f"{self.path}.{key}[{i}]")

    def close(self) -> None:
        left = sorted(set(self.value) - self.read)
        if left:
            raise UnsupportedError(f"{self.path}: {', '.join(left)} not applied by the pod tier")


@dataclass(frozen=True)
class Host:
    """What the host gives a pod: its network namespace and its folders and files."""

    netns: Path
    hostname: str
    rootfs_of: Callable[[str], Path]
    """The unpacked root of an image reference; raises UnsupportedError for one it does not have."""
    env_of: Callable[[str], list[str]]
    """An image's own environment (its Dockerfile's ENV), as NAME=value."""
    volume_dir: Callable[[str, str], Path]
    """The host folder behind a volume: (name, kind), kind `emptyDir` or `claim:<claimName>`."""
    etc: Mapping[str, Path]
    """The files kubelet and containerd provide: hosts, hostname, resolv.conf."""
    seccomp: Mapping[str, Any]
    """The runtime's default seccomp profile, in moby's format (`runtime_default`)."""
    arch: str
    """Go's name for the machine: `amd64`, `arm64`."""
    cgroup_parent: str


@dataclass(frozen=True)
class Container:
    name: str
    image: str
    config: dict[str, Any]
    """The bundle's config.json."""
    health: tuple[str, int] | None = None
    """The readiness probe's HTTP path and port; None without one."""


@dataclass(frozen=True)
class Pod:
    """A pod as the host runs it: init containers to completion, in order, then the container."""

    init: list[Container]
    main: Container
    resolv_conf: str
    fs_group: int | None
    grace_seconds: int


def _quantity(text: Any, path: str) -> Decimal:
    value = parse_quantity(str(text))
    if value is None:
        raise UnsupportedError(f"{path}: {text!r} is not a quantity")
    return value


def _resources(fields: _Fields) -> dict[str, Any]:
    """linux.resources as kubelet asks a runtime for it: limits enforced, requests as shares.

    Ephemeral storage is the kubelet's (it evicts a pod over it), not a runtime's: read, and
    not applied here.
    """
    known = ("cpu", "memory", "ephemeral-storage")
    amounts: dict[str, dict[str, Decimal]] = {}
    for kind in ("requests", "limits"):
        sub = fields.sub(kind)
        amounts[kind] = {
            k: _quantity(sub.get(k), f"{sub.path}.{k}")
            for k in known
            if sub.value.get(k) is not None
        }
        sub.close()
    fields.close()
    out: dict[str, Any] = {"devices": [{"allow": False, "access": "rwm"}]}
    cpu = amounts["limits"].get("cpu")
    shares = amounts["requests"].get("cpu", cpu)
    out["cpu"] = {
        **({"quota": int(cpu * CPU_PERIOD), "period": CPU_PERIOD} if cpu else {}),
        **({"shares": max(2, int(shares * 1024))} if shares else {}),
    }
    memory = amounts["limits"].get("memory")
    if memory:
        out["memory"] = {"limit": int(memory)}
    return out


def _capabilities(fields: _Fields) -> list[str]:
    drop = {str(c) for c in fields.get("drop") or []}
    add = [f"CAP_{c}" for c in fields.get("add") or []]
    fields.close()
    kept = [] if "ALL" in drop else [c for c in DEFAULT_CAPABILITIES if c[4:] not in drop]
    return sorted({*kept, *add})


def _security(pod: _Fields, container: _Fields) -> dict[str, Any]:
    """The container's effective security settings: its own, else the pod's."""
    own = container.sub("securityContext")
    shared = pod.value.get("securityContext") or {}

    def either(key: str) -> Any:
        found = own.get(key)
        return shared.get(key) if found is None else found

    own.only("privileged", (False, None))
    user, group = either("runAsUser"), either("runAsGroup")
    if user is None or group is None:
        raise UnsupportedError(
            f"{own.path}: no runAsUser and runAsGroup (the image's USER is not read)"
        )
    if either("runAsNonRoot") and user == 0:
        raise UnsupportedError(f"{own.path}.runAsUser: 0 under runAsNonRoot (kubelet refuses it)")
    seccomp = own.value.get("seccompProfile") or shared.get("seccompProfile")
    if seccomp != {"type": "RuntimeDefault"}:
        raise UnsupportedError(f"{own.path}.seccompProfile: {seccomp!r} (only RuntimeDefault)")
    own.get("seccompProfile")
    capabilities = _capabilities(own.sub("capabilities"))
    out = {
        "user": user,
        "group": group,
        "read_only_root": bool(own.get("readOnlyRootFilesystem")),
        # Unset, Kubernetes lets a process gain privileges (no_new_privs stays off).
        "no_new_privileges": own.get("allowPrivilegeEscalation") is False,
        "capabilities": capabilities,
    }
    own.close()
    return out


def _env(fields: _Fields, image_env: list[str]) -> list[str]:
    merged = dict(e.split("=", 1) for e in image_env)
    for _, item in fields.items("env"):
        name, value = item.get("name"), item.get("value")
        if not isinstance(value, str):
            raise UnsupportedError(f"{item.path}: only a literal value is applied")
        merged[name] = value
        item.close()
    return [f"{k}={v}" for k, v in merged.items()]


def _mounts(
    fields: _Fields, volumes_of: Mapping[str, str], host: Host, read_only_root: bool
) -> list[dict[str, Any]]:
    etc = [
        {
            "destination": f"/etc/{name}",
            "type": "bind",
            "source": str(host.etc[name]),
            "options": ["rbind", "rprivate", *(["ro"] if read_only_root else [])],
        }
        for name in ("hosts", "hostname", "resolv.conf")
    ]
    volumes = []
    for _, mount in fields.items("volumeMounts"):
        name = mount.get("name")
        if name not in volumes_of:
            raise UnsupportedError(f"{mount.path}.name: no volume {name!r}")
        read_only = mount.only("readOnly", (True, False), default=False)
        source = host.volume_dir(name, volumes_of[name])
        volumes.append(
            {
                "destination": mount.get("mountPath"),
                "type": "bind",
                "source": str(source),
                "options": ["rbind", "rprivate", *(["ro"] if read_only else ["rw"])],
            }
        )
        mount.close()
    return [*(dict(m) for m in DEFAULT_MOUNTS), *etc, *volumes]


def _container(
    pod_fields: _Fields,
    item: _Fields,
    volumes: Mapping[str, str],
    fs_group: int | None,
    host: Host,
    *,
    init: bool,
) -> Container:
    name, image = item.get("name"), item.get("image")
    # Images are folders here: there is nothing to pull.
    item.only("imagePullPolicy", ("IfNotPresent", "Never", "Always", None))
    security = _security(pod_fields, item)
    health = None
    probe = item.sub("readinessProbe")
    if probe.value:
        if init:
            raise UnsupportedError(f"{probe.path}: init containers have no readiness")
        get = probe.sub("httpGet")
        health = (get.get("path"), int(get.get("port")))
        get.close()
        # The timing is kubelet's; the host polls /health until it answers (bounded).
        for key in ("initialDelaySeconds", "periodSeconds", "timeoutSeconds", "failureThreshold"):
            probe.get(key)
    probe.close()
    for _, port in item.items("ports"):
        # Each pod has its own network namespace: every port it listens on is its own already.
        port.get("name")
        port.get("containerPort")
        port.only("protocol", ("TCP", None))
        port.close()
    command = [*(item.get("command") or []), *(item.get("args") or [])]
    if not command:
        raise UnsupportedError(f"{item.path}.command: not set (the image's entrypoint is not read)")
    groups = {
        security["group"],
        *(pod_fields.sub("securityContext").value.get("supplementalGroups") or []),
    }
    if fs_group is not None:
        # kubelet adds the fsGroup to every container's groups.
        groups.add(fs_group)
    caps = security["capabilities"]
    config = {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {
                "uid": security["user"],
                "gid": security["group"],
                "additionalGids": sorted(groups),
            },
            "args": command,
            "env": _env(item, host.env_of(image)),
            "cwd": item.get("workingDir") or "/",
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "noNewPrivileges": security["no_new_privileges"],
        },
        "root": {"path": str(host.rootfs_of(image)), "readonly": security["read_only_root"]},
        "hostname": host.hostname,
        "mounts": _mounts(item, volumes, host, security["read_only_root"]),
        "linux": {
            "namespaces": [
                {"type": "pid"},
                {"type": "ipc"},
                {"type": "uts"},
                {"type": "mount"},
                {"type": "network", "path": str(host.netns)},
            ],
            "resources": _resources(item.sub("resources")),
            "cgroupsPath": f"{host.cgroup_parent}/{name}",
            "seccomp": runtime_default(host.seccomp, host.arch, caps),
            "maskedPaths": list(MASKED_PATHS),
            "readonlyPaths": list(READONLY_PATHS),
        },
    }
    item.close()
    return Container(name=name, image=image, config=config, health=health)


def _volumes(fields: _Fields) -> dict[str, str]:
    found = {}
    for _, volume in fields.items("volumes"):
        name = volume.get("name")
        if volume.value.get("emptyDir") is not None:
            empty = volume.sub("emptyDir")
            # On a node's disk, not memory; its size limit is the kubelet's to evict on.
            empty.only("medium", ("", None))
            empty.get("sizeLimit")
            empty.close()
            found[name] = "emptyDir"
        elif volume.value.get("persistentVolumeClaim") is not None:
            claim = volume.sub("persistentVolumeClaim")
            claim.only("readOnly", (False, None))
            found[name] = f"claim:{claim.get('claimName')}"
            claim.close()
        volume.close()
    return found


def _resolv_conf(fields: _Fields) -> str:
    # ClusterFirst needs a cluster's DNS, which this host has none of.
    fields.only("dnsPolicy", ("None",))
    config = fields.sub("dnsConfig")
    lines = [f"nameserver {n}" for n in config.get("nameservers") or []]
    if config.value.get("searches"):
        lines.append("search " + " ".join(config.get("searches")))
    options = []
    for _, option in config.items("options"):
        value = option.get("value")
        options.append(option.get("name") + ("" if value is None else f":{value}"))
        option.close()
    if options:
        lines.append("options " + " ".join(options))
    config.close()
    return "".join(f"{line}\n" for line in lines)


def translate(spec: Mapping[str, Any], host: Host) -> Pod:
    """The pod `spec` as bundles on `host`; UnsupportedError for anything it cannot apply."""
    fields = _Fields(spec, "spec")
    # Nothing of the ServiceAccount reaches a pod whose token is not mounted.
    fields.get("serviceAccountName")
    fields.only("automountServiceAccountToken", (False,))
    fields.only("enableServiceLinks", (False,))
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        fields.only(key, (False, None))
    security = fields.sub("securityContext")
    for key in ("runAsNonRoot", "runAsUser", "runAsGroup", "supplementalGroups"):
        security.get(key)  # applied to each container by _security
    # Each container's own profile wins, but one that has none takes the pod's.
    security.only("seccompProfile", ({"type": "RuntimeDefault"}, None))
    fs_group = security.get("fsGroup")
    # OnRootMismatch and Always differ only in when kubelet walks the volume; the host's folders
    # are new, so both walk it once.
    security.only("fsGroupChangePolicy", ("OnRootMismatch", "Always", None))
    security.close()
    # One node: nothing to select, tolerate or preempt.
    for key in ("nodeSelector", "tolerations", "priorityClassName"):
        fields.get(key)
    volumes = _volumes(fields)
    resolv_conf = _resolv_conf(fields)
    init = [
        _container(fields, item, volumes, fs_group, host, init=True)
        for _, item in fields.items("initContainers")
    ]
    containers = [
        _container(fields, item, volumes, fs_group, host, init=False)
        for _, item in fields.items("containers")
    ]
    if len(containers) != 1:
        raise UnsupportedError("spec.containers: only one container is run")
    pod = Pod(
        init=init,
        main=containers[0],
        resolv_conf=resolv_conf,
        fs_group=fs_group,
        grace_seconds=int(fields.get("terminationGracePeriodSeconds", 30)),
    )
    # Which runtime runs it is the tier's choice (runc or runsc), whatever class the preset
    # names: that its name reaches the pod is the function's tests' to check.
    fields.get("runtimeClassName")
    fields.close()
    return pod


def runtime_default(
    profile: Mapping[str, Any], arch: str, capabilities: list[str]
) -> dict[str, Any]:
    """linux.seccomp from a runtime's default profile in moby's format, the way containerd and
    podman make it (`seccomp.setupSeccomp`): the rules for this architecture and for the
    capabilities the container keeps (none, once it drops ALL).

    `profile` is containers-common's `seccomp.json` (Debian's golang-github-containers-common,
    `/usr/share/containers/seccomp.json`), the profile podman and CRI-O apply as RuntimeDefault;
    `arch` is Go's name for the machine (`amd64`). A rule condition this does not know (a
    minimum kernel, say) is refused rather than guessed.
    """
    fields = _Fields(profile, "seccomp.json")
    (own,) = [a for a in fields.get("archMap") if a["architecture"] == _SCMP_ARCH[arch]]
    out: dict[str, Any] = {
        "defaultAction": fields.get("defaultAction"),
        "architectures": [own["architecture"], *own.get("subArchitectures", [])],
        "syscalls": [],
    }
    if fields.value.get("defaultErrnoRet") is not None:
        out["defaultErrnoRet"] = fields.get("defaultErrnoRet")
    fields.get("defaultErrno")  # the name of defaultErrnoRet
    for _, rule in fields.items("syscalls"):
        wanted = rule.sub("includes")
        unwanted = rule.sub("excludes")
        arches, caps = wanted.get("arches") or [], wanted.get("caps") or []
        wanted.close()
        not_arches, not_caps = unwanted.get("arches") or [], unwanted.get("caps") or []
        unwanted.close()
        rule.get("comment")
        rule.get("errno")  # the name of errnoRet
        applies = (
            (not arches or arch in arches)
            and set(caps) <= set(capabilities)
            and arch not in not_arches
            and not set(not_caps) & set(capabilities)
        )
        syscall = {"names": rule.get("names"), "action": rule.get("action")}
        if rule.value.get("errnoRet") is not None:
            syscall["errnoRet"] = rule.get("errnoRet")
        if rule.value.get("args"):
            syscall["args"] = rule.get("args")
        rule.get("args")
        rule.close()
        if applies:
            out["syscalls"].append(syscall)
    fields.close()
    return out


# Go's architecture names, as the profile's conditions spell them, and libseccomp's.
_SCMP_ARCH = {"amd64": "SCMP_ARCH_X86_64", "arm64": "SCMP_ARCH_AARCH64"}
