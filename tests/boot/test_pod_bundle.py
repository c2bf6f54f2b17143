"""The pod-spec translator: every shipped pod translates with its hardening, nothing unknown passes.

Runs anywhere (no runtime, no root): the bundles are data. The tier that runs them is
`test_pod_sdk.py`.
"""

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from function.model import Manifest
from tests.boot import pod_bundle
from tests.boot.pod_bundle import Host, UnsupportedError, translate
from tests.boot.pod_host import SECCOMP
from tests.boot.pod_render import POD_PRESETS, pods
from tests.placements import settled
from tests.schemas.quantity import parse_quantity
from tests.support import AGENT_PLATFORM, PLATFORM

PROFILE = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 38,
    "archMap": [
        {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]},
        {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
    ],
    "syscalls": [
        {"names": ["read"], "action": "SCMP_ACT_ALLOW", "includes": {}, "excludes": {}},
        {"names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["amd64"]}},
        {"names": ["ptrace"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_PTRACE"]}},
        {
            "names": ["bpf"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": 1,
            "excludes": {"caps": ["CAP_SYS_ADMIN"]},
        },
    ],
}


def host(tmp_path: Path) -> Host:
    return Host(
        netns=Path("/run/netns/test"),
        hostname="a-pod",
        rootfs_of=lambda image: tmp_path / "rootfs" / image.replace("/", "_"),
        env_of=lambda _: ["PATH=/usr/bin:/bin", "HOME=/root"],
        volume_dir=lambda name, _kind: tmp_path / "volumes" / name,
        etc={f: tmp_path / f for f in ("hosts", "hostname", "resolv.conf")},
        seccomp=PROFILE,
        arch="amd64",
        cgroup_parent="/test",
    )


def shipped() -> list[Any]:
    return [
        pytest.param(spec, id=f"{preset}-{kind}-{hostname}")
        for preset in POD_PRESETS
        for kind, platform in (("image-agent", PLATFORM), ("agent-delivered", AGENT_PLATFORM))
        for hostname, spec in pods(settled(preset, platform))
    ]


@pytest.mark.parametrize("spec", shipped())
def test_every_shipped_pod_translates_with_its_hardening(spec: Manifest, tmp_path: Path) -> None:
    pod = translate(spec, host(tmp_path))
    for container in [*pod.init, pod.main]:
        config = container.config
        process = config["process"]
        assert process["user"] == {"uid": 1000, "gid": 1000, "additionalGids": [1000]}
        assert process["noNewPrivileges"] is True
        assert process["capabilities"] == {"bounding": [], "effective": [], "permitted": []}
        assert config["root"]["readonly"] is True
        assert config["linux"]["seccomp"]["defaultAction"] == "SCMP_ACT_ERRNO"
        assert {"type": "network", "path": "/run/netns/test"} in config["linux"]["namespaces"]
        assert "/proc/kcore" in config["linux"]["maskedPaths"]
        etc = [m for m in config["mounts"] if m["destination"].startswith("/etc/")]
        assert all("ro" in m["options"] for m in etc)
    main = pod.main.config
    assert main["process"]["cwd"] == "/workspace"
    assert "HOME=/workspace" in main["process"]["env"]
    assert main["hostname"] == "a-pod"
    limits = at(spec, "containers", 0, "resources", "limits")
    cpu = main["linux"]["resources"]["cpu"]
    assert cpu["quota"] == parse_quantity(limits["cpu"]) * cpu["period"]
    assert main["linux"]["resources"]["memory"] == {"limit": parse_quantity(limits["memory"])}
    mounts = {m["destination"]: m for m in main["mounts"]}
    assert "rw" in mounts["/workspace"]["options"]
    assert "rw" in mounts["/tmp"]["options"]  # noqa: S108  # the pod's own emptyDir
    if pod.init:
        assert "ro" in mounts["/opt/workspace-sandbox-agent"]["options"]
        (copy_,) = pod.init
        assert copy_.config["process"]["args"][0] == "cp"
    assert pod.main.health == ("/health", 49983)
    assert pod.resolv_conf == "nameserver 9.9.9.9\nnameserver 149.112.112.112\noptions ndots:1\n"


def the_pod() -> Manifest:
    ((_, spec),) = pods(settled("gvisor", AGENT_PLATFORM))
    return spec


def at(spec: Any, *keys: str | int) -> Any:
    for key in keys:
        spec = spec[key]
    return spec


# (where, field, value): a field added anywhere that the translator does not know, or a value
# that would weaken the pod, must be refused rather than dropped.
REFUSED = [
    ((), "shareProcessNamespace", True),
    ((), "hostUsers", False),
    ((), "hostNetwork", True),
    ((), "automountServiceAccountToken", True),
    ((), "enableServiceLinks", True),
    ((), "dnsPolicy", "ClusterFirst"),
    (("securityContext",), "sysctls", [{"name": "net.ipv4.ip_forward", "value": "1"}]),
    (("securityContext",), "seccompProfile", {"type": "Unconfined"}),
    (("securityContext",), "seccompProfile", {"type": "Localhost", "localhostProfile": "x"}),
    (("containers", 0), "lifecycle", {"preStop": {"exec": {"command": ["true"]}}}),
    (("containers", 0), "stdin", True),
    (("containers", 0, "securityContext"), "procMount", "Unmasked"),
    (("containers", 0, "securityContext"), "privileged", True),
    (("containers", 0, "securityContext"), "appArmorProfile", {"type": "Unconfined"}),
    (("containers", 0, "securityContext"), "seccompProfile", {"type": "Localhost"}),
    (("containers", 0, "resources"), "claims", [{"name": "gpu"}]),
    (("containers", 0, "volumeMounts", 0), "subPath", "x"),
    (("containers", 0, "volumeMounts", 0), "mountPropagation", "Bidirectional"),
    (("initContainers", 0), "restartPolicy", "Always"),
    (("initContainers", 0, "securityContext"), "runAsUser", 0),
    (("volumes", 1, "emptyDir"), "medium", "Memory"),
    (("dnsConfig",), "extra", 1),
]


@pytest.mark.parametrize(("where", "key", "value"), REFUSED, ids=[r[1] for r in REFUSED])
def test_a_field_it_cannot_apply_is_refused(
    where: tuple[str | int, ...], key: str, value: Any, tmp_path: Path
) -> None:
    spec = copy.deepcopy(the_pod())
    at(spec, *where)[key] = value
    with pytest.raises(UnsupportedError):
        translate(spec, host(tmp_path))


def test_capabilities_not_dropped_are_containerds_defaults_and_added_ones_are_kept(
    tmp_path: Path,
) -> None:
    spec = copy.deepcopy(the_pod())
    at(spec, "containers", 0, "securityContext")["capabilities"] = {
        "drop": ["NET_RAW"],
        "add": ["SYS_PTRACE"],
    }
    config = translate(spec, host(tmp_path)).main.config
    caps = config["process"]["capabilities"]["effective"]
    assert "CAP_NET_RAW" not in caps
    assert {"CAP_SYS_PTRACE", "CAP_CHOWN"} <= set(caps)
    # The profile's rules for a capability kept are in, as containerd puts them in.
    assert ["ptrace"] in [s["names"] for s in config["linux"]["seccomp"]["syscalls"]]


def test_the_default_profile_keeps_the_rules_of_the_arch_and_of_no_capability() -> None:
    profile = pod_bundle.runtime_default(PROFILE, "amd64", capabilities=[])
    assert profile["architectures"] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"]
    assert [s["names"] for s in profile["syscalls"]] == [["read"], ["arch_prctl"], ["bpf"]]
    assert profile["defaultErrnoRet"] == 38
    arm = pod_bundle.runtime_default(PROFILE, "arm64", capabilities=["CAP_SYS_ADMIN"])
    assert [s["names"] for s in arm["syscalls"]] == [["read"]]


def test_containers_commons_profile_translates() -> None:
    if not SECCOMP.exists():
        pytest.skip(f"{SECCOMP} (apt-get install golang-github-containers-common)")
    profile = pod_bundle.runtime_default(json.loads(SECCOMP.read_text()), "amd64", capabilities=[])
    allowed = {
        n for s in profile["syscalls"] if s["action"] == "SCMP_ACT_ALLOW" for n in s["names"]
    }
    assert {"statx", "openat", "clone3"} <= allowed
    # What only capabilities open: none are left. (Unlike containerd's profile, podman's lets
    # mount, unshare and setns through to the kernel, which checks capabilities itself.)
    assert not {"kexec_load", "init_module", "bpf", "open_by_handle_at"} & allowed
