"""Bad input: exactly one FATAL result naming the field, and nothing rendered."""

from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.fn import FunctionRunner
from function.model.platform import USER_WRITABLE
from tests.support import AGENT_IMAGE, NOW, platform_input, request, xr

KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ59QzKAgaweWutMQQYQMAhdmOo8JHFmw4Y3BLQLyb4k alice@laptop"
)
ECDSA_BODY = (
    "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBEhSioHWZwjf54wiu9K4GD303E4bBA+nSjYJin7G"
    "LulLAhqLBJlhmDPwylHmzo5wn1aUxWJXB4NdXdzNwnL/JAw="
)


async def run(composite: dict[str, Any], step_input: dict[str, Any] | None = None) -> Any:
    return await FunctionRunner(clock=lambda: NOW).RunFunction(
        request(composite, step_input=step_input), None
    )


SPEC_CASES = [
    pytest.param(
        {"preset": "xl"},
        "spec.preset: 'xl' is not offered; use one of: dedicated-plane, gvisor, isolated, isolated-kata, kata, shared-plane, standard",
        id="unknown-preset",
    ),
    pytest.param(
        {"image": "windows"},
        "spec.image: 'windows' is not in the catalog; use one of: ubuntu-24.04",
        id="unknown-image",
    ),
    pytest.param(
        {"resources": {"cpu": "16"}},
        "spec.resources.cpu: 16 is more than preset 'standard' allows (8)",
        id="cpu-over-max",
    ),
    pytest.param(
        {"resources": {"memory": "64Gi"}},
        "spec.resources.memory: 64Gi is more than preset 'standard' allows (16Gi)",
        id="memory-over-max",
    ),
    pytest.param(
        {"resources": {"disk": "1Ti"}},
        "spec.resources.disk: 1Ti is more than preset 'standard' allows (200Gi)",
        id="disk-over-max",
    ),
    pytest.param(
        {"resources": {"disk": "5Gi"}},
        "spec.resources.disk: 5Gi is smaller than image 'ubuntu-24.04' needs (10Gi)",
        id="disk-under-image",
    ),
    pytest.param(
        {"resources": {"cpu": "2 cores"}},
        "spec.resources.cpu: '2 cores' is not a quantity; write it like '2', '500m' or '4Gi'",
        id="cpu-words",
    ),
    pytest.param(
        {"resources": {"memory": "4GB"}},
        "spec.resources.memory: '4GB' is not a quantity; write it like '2', '500m' or '4Gi'",
        id="memory-wrong-suffix",
    ),
    pytest.param(
        {"resources": {"cpu": "0"}}, "spec.resources.cpu: must be more than zero", id="cpu-zero"
    ),
    pytest.param(
        {"resources": {"cpu": "-2"}},
        "spec.resources.cpu: '-2' is not a quantity; write it like '2', '500m' or '4Gi'",
        id="cpu-negative",
    ),
    pytest.param(
        {"resources": {"cpu": "1e400"}},
        "spec.resources.cpu: '1e400' is not a quantity; write it like '2', '500m' or '4Gi'",
        id="cpu-exponent",
    ),
    pytest.param(
        {"resources": {"cpu": "0.0000001"}},
        "spec.resources.cpu: must be a whole number of millicores, such as '1500m' or '1.5'",
        id="cpu-absurd-precision",
    ),
    pytest.param(
        {"resources": {"gpu": "1"}},
        "spec.resources.gpu: is not a known field; remove it or check its spelling",
        id="unknown-resource",
    ),
    pytest.param(
        {"power": "Off"}, "spec.power: Input should be 'Running' or 'Suspended'", id="power-enum"
    ),
    pytest.param(
        {"ports": [{"name": "web", "port": 0}]},
        "spec.ports[0].port: Input should be greater than or equal to 1",
        id="port-zero",
    ),
    pytest.param(
        {"ports": [{"name": "web", "port": 65536}]},
        "spec.ports[0].port: Input should be less than or equal to 65535",
        id="port-too-high",
    ),
    pytest.param(
        {"ports": [{"name": "web", "port": "3000"}]},
        "spec.ports[0].port: must be a whole number",
        id="port-as-string",
    ),
    pytest.param(
        {"ports": [{"name": "web", "port": 3000.5}]},
        "spec.ports[0].port: must be a whole number",
        id="port-fraction",
    ),
    pytest.param(
        {"ports": [{"name": "a", "port": 3000}, {"name": "b", "port": 3000}]},
        "spec.ports: port 3000 is listed twice",
        id="duplicate-port",
    ),
    pytest.param(
        {"ports": [{"name": "web", "port": 3000}, {"name": "web", "port": 3001}]},
        "spec.ports: port name 'web' is listed twice",
        id="duplicate-port-name",
    ),
    pytest.param(
        {"ports": [{"name": "agent", "port": 3000}]},
        "spec.ports[0].name: 'agent' is reserved by the platform",
        id="agent-port-name",
    ),
    pytest.param(
        {"ports": [{"name": "web", "port": 49983}]},
        "spec.ports[0].port: 49983 is reserved by the platform",
        id="agent-port-number",
    ),
    pytest.param(
        {"ssh": {"authorizedKeys": [KEY]}, "ports": [{"name": "web", "port": 22}]},
        "spec.ports[0].port: 22 is reserved by the platform",
        id="ssh-port-with-keys",
    ),
    pytest.param(
        {"ports": [{"name": "Web", "port": 3000}]},
        "spec.ports[0].name: 'Web' must be lowercase letters, digits and single '-', with at least one letter",
        id="port-name-uppercase",
    ),
    pytest.param(
        {"ports": [{"name": "a-very-long-port-name", "port": 3000}]},
        "spec.ports[0].name: String should have at most 15 characters",
        id="port-name-too-long",
    ),
    *(
        pytest.param(
            {"preset": preset, "ssh": {"authorizedKeys": [KEY]}},
            f"spec.ssh.authorizedKeys: preset '{preset}' runs the sandbox in a pod (runtime {runtime}), which never receives SSH keys and serves no SSH; remove spec.ssh.authorizedKeys, or create the sandbox with a preset that runs a VM: isolated, standard",
            id=f"ssh-keys-on-{preset}",
        )
        for preset, runtime in [
            ("kata", "kata"),
            ("gvisor", "gvisor"),
            ("shared-plane", "gvisor"),
            ("dedicated-plane", "container"),
        ]
    ),
    pytest.param(
        {"ssh": {"authorizedKeys": ["hello"]}},
        "spec.ssh.authorizedKeys[0]: must be one OpenSSH public key line: '<type> <base64> [comment]', with type one of ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, ecdsa-sha2-nistp521, sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com",
        id="ssh-key-not-a-key",
    ),
    pytest.param(
        {"ssh": {"authorizedKeys": [f"ssh-ed25519 {ECDSA_BODY}"]}},
        "spec.ssh.authorizedKeys[0]: the key's body is not a ssh-ed25519 key",
        id="ssh-key-type-mismatch",
    ),
    pytest.param(
        {"ssh": {"authorizedKeys": [KEY + "\nssh-rsa AAAA evil"]}},
        "spec.ssh.authorizedKeys[0]: must be one OpenSSH public key line: '<type> <base64> [comment]', with type one of ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, ecdsa-sha2-nistp521, sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com",
        id="ssh-key-with-newline",
    ),
    pytest.param(
        {"ssh": {"authorizedKeys": ["ssh-ed25519 " + "A" * 3000]}},
        "spec.ssh.authorizedKeys[0]: String should have at most 2048 characters",
        id="ssh-key-huge",
    ),
    pytest.param(
        {"ssh": {"authorizedKeys": [KEY.replace("alice@laptop", f"{i}" * 100) for i in range(8)]}},
        "spec.ssh.authorizedKeys: the keys make the guest's cloud-init 2202 bytes; KubeVirt allows 2048, so use fewer or shorter keys (ed25519 keys are about 100 bytes)",
        id="ssh-keys-over-cloud-init-limit",
    ),
    pytest.param(
        {"snapshots": [{"name": "a"}, {"name": "a"}]},
        "spec.snapshots: snapshot 'a' is listed twice",
        id="duplicate-snapshot",
    ),
    pytest.param(
        {"snapshots": [{"name": "../etc"}]},
        "spec.snapshots[0].name: '../etc' must be lowercase letters, digits and '-', starting and ending with a letter or digit",
        id="snapshot-path",
    ),
    pytest.param(
        {"snapshots": [{"name": "Nightly"}]},
        "spec.snapshots[0].name: 'Nightly' must be lowercase letters, digits and '-', starting and ending with a letter or digit",
        id="snapshot-uppercase",
    ),
    pytest.param(
        {"snapshots": [{"name": "a\nb"}]},
        "spec.snapshots[0].name: 'a\\nb' must be lowercase letters, digits and '-', starting and ending with a letter or digit",
        id="snapshot-newline",
    ),
    pytest.param(
        {"snapshots": [{"name": "s" * 41}]},
        "spec.snapshots[0].name: String should have at most 40 characters",
        id="snapshot-too-long",
    ),
    pytest.param(
        {"network": {"egress": "Internet", "allow": [{"fqdn": "pypi.org"}]}},
        "spec.network: allow entries are only used with egress: Allowlist",
        id="allow-without-allowlist",
    ),
    pytest.param(
        {"network": {"egress": "Allowlist", "allow": [{"cidr": "203.0.113.7/24"}]}},
        "spec.network.allow[0].cidr: '203.0.113.7/24' is not a network in CIDR notation: 203.0.113.7/24 has host bits set",
        id="cidr-host-bits",
    ),
    pytest.param(
        {
            "network": {
                "egress": "Allowlist",
                "allow": [{"fqdn": "pypi.org", "cidr": "198.51.100.0/24"}],
            }
        },
        "spec.network.allow[0]: set exactly one of fqdn, cidr and bundle",
        id="fqdn-and-cidr",
    ),
    pytest.param(
        {"network": {"egress": "Allowlist", "allow": [{"bundle": "mirrors", "fqdn": "pypi.org"}]}},
        "spec.network.allow[0]: set exactly one of fqdn, cidr and bundle",
        id="bundle-and-fqdn",
    ),
    pytest.param(
        {"network": {"egress": "Allowlist", "allow": [{"bundle": "mirrors", "ports": [443]}]}},
        "spec.network.allow[0]: a bundle's entries carry their own ports; leave ports out",
        id="bundle-with-ports",
    ),
    pytest.param(
        {"network": {"egress": "Allowlist", "allow": [{"bundle": "Package-Registries"}]}},
        "spec.network.allow[0].bundle: 'Package-Registries' must be lowercase letters, digits and '-', starting and ending with a letter or digit",
        id="bundle-name-uppercase",
    ),
    pytest.param(
        {"network": {"egress": "Allowlist", "allow": [{"bundle": "rubygems"}]}},
        "spec.network.allow[0].bundle: 'rubygems' is not an egress bundle; use one of: package-registries",
        id="bundle-unknown",
    ),
    pytest.param(
        {"network": {"egress": "Allowlist", "allow": [{"bundle": "package-registries"}]}},
        "spec.network.allow[0].bundle: bundle 'package-registries' holds names (registry.npmjs.org), and names can't be enforced on this platform: its namespaces already allow all internet egress, and Cilium can only take that away by address; use a preset that gives each sandbox a namespace of its own (dedicated-plane, isolated, isolated-kata, shared-plane)",
        id="bundle-of-names-in-a-namespace",
    ),
    *[
        pytest.param(
            {"network": {"egress": "Allowlist", "allow": [{"fqdn": fqdn}]}},
            f"spec.network.allow[0].fqdn: {fqdn!r} must be a lowercase DNS name such as pypi.org, optionally starting with '*.'; no scheme, port or path",
            id=f"fqdn-{case}",
        )
        for case, fqdn in [
            ("scheme", "https://pypi.org"),
            ("bare-wildcard", "*"),
            ("inner-wildcard", "pypi.*.org"),
            ("uppercase", "PyPI.org"),
            ("port", "pypi.org:443"),
            ("path", "pypi.org/simple"),
        ]
    ],
    *[
        pytest.param(
            {"network": {"egress": "Allowlist", "allow": [{"cidr": cidr}]}},
            f"spec.network.allow[0].cidr: {message}",
            id=f"cidr-{case}",
        )
        for case, cidr, message in [
            (
                "private",
                "10.0.0.0/8",
                "10.0.0.0/8 overlaps the blocked range 10.0.0.0/8 (private network)",
            ),
            (
                "inside-private",
                "192.168.7.0/24",
                "192.168.7.0/24 overlaps the blocked range 192.168.0.0/16 (private network)",
            ),
            (
                "cgnat",
                "100.64.0.0/16",
                "100.64.0.0/16 overlaps the blocked range 100.64.0.0/10 (carrier-grade NAT, and the node join network)",
            ),
            (
                "metadata",
                "169.254.169.254/32",
                "169.254.169.254/32 overlaps the blocked range 169.254.0.0/16 (link-local, including cloud metadata)",
            ),
            (
                "everything",
                "0.0.0.0/0",
                "0.0.0.0/0 overlaps the blocked range 0.0.0.0/8 (this network)",
            ),
            (
                "covers-private",
                "8.0.0.0/6",
                "8.0.0.0/6 overlaps the blocked range 10.0.0.0/8 (private network)",
            ),
            (
                "documentation",
                "203.0.113.0/24",
                "203.0.113.0/24 overlaps the blocked range 203.0.113.0/24 (documentation)",
            ),
            (
                "multicast",
                "224.0.0.0/24",
                "224.0.0.0/24 overlaps the blocked range 224.0.0.0/4 (multicast)",
            ),
            (
                "ipv6-everything",
                "::/0",
                "::/0 is refused: IPv4-compatible addresses (::/96) embed IPv4 addresses",
            ),
            (
                "ipv4-mapped",
                "::ffff:a00:0/104",
                "::ffff:a00:0/104 is refused: IPv4-mapped addresses (::ffff:0:0/96) embed IPv4 addresses",
            ),
            (
                "ipv4-compatible",
                "::a00:0/104",
                "::a00:0/104 is refused: IPv4-compatible addresses (::/96) embed IPv4 addresses",
            ),
            (
                "nat64",
                "64:ff9b::/96",
                "64:ff9b::/96 is refused: NAT64 addresses (64:ff9b::/96) embed IPv4 addresses",
            ),
            (
                "local-nat64",
                "64:ff9b:1::/48",
                "64:ff9b:1::/48 is refused: local-use NAT64 addresses (64:ff9b:1::/48) embed IPv4 addresses",
            ),
            (
                "6to4",
                "2002:a00::/24",
                "2002:a00::/24 is refused: 6to4 addresses (2002::/16) embed IPv4 addresses",
            ),
            (
                "teredo",
                "2001::/32",
                "2001::/32 is refused: Teredo addresses (2001::/32) embed IPv4 addresses",
            ),
            (
                "ula",
                "fd00:ec2::/32",
                "fd00:ec2::/32 overlaps the blocked range fc00::/7 (unique local, including cloud metadata)",
            ),
            (
                "link-local-v6",
                "fe80::/64",
                "fe80::/64 overlaps the blocked range fe80::/10 (link-local)",
            ),
        ]
    ],
    pytest.param(
        {"network": {"egress": "Allowlist", "allow": [{"cidr": "2001:DB8::/32"}]}},
        "spec.network.allow[0].cidr: '2001:DB8::/32' is not canonical; write it as 2001:db8::/32",
        id="cidr-not-canonical",
    ),
    # IPv4-mapped networks are spelled in hexadecimal on every Python (3.13's str() writes
    # ::ffff:10.0.0.0/104), in the canonical-text check and in ipaddress's own complaints.
    pytest.param(
        {"network": {"egress": "Allowlist", "allow": [{"cidr": "::ffff:10.0.0.0/104"}]}},
        "spec.network.allow[0].cidr: '::ffff:10.0.0.0/104' is not canonical; write it as ::ffff:a00:0/104",
        id="cidr-ipv4-mapped-dotted",
    ),
    pytest.param(
        {"network": {"egress": "Allowlist", "allow": [{"cidr": "::ffff:1.2.3.4/96"}]}},
        "spec.network.allow[0].cidr: '::ffff:1.2.3.4/96' is not a network in CIDR notation: ::ffff:102:304/96 has host bits set",
        id="cidr-ipv4-mapped-host-bits",
    ),
    # A scope zone would otherwise pass the canonical check and be copied into the policy.
    pytest.param(
        {"network": {"egress": "Allowlist", "allow": [{"cidr": "2a01:4f8::%eth0/32"}]}},
        "spec.network.allow[0].cidr: '2a01:4f8::%eth0/32' is not a network in CIDR notation: a scope zone (%...) names one host's interface; leave it out",
        id="cidr-with-a-scope-zone",
    ),
    pytest.param(
        {"network": {"egress": "Allowlist", "allow": [{"cidr": "10.0.0.1"}, {"cidr": 7}]}},
        "spec.network.allow[0].cidr: '10.0.0.1' is not canonical; write it as 10.0.0.1/32",
        id="cidr-without-prefix",
    ),
    *[
        pytest.param(
            {"network": {"egress": "Allowlist", "allow": [{"fqdn": fqdn}]}},
            f"spec.network.allow[0].fqdn: {message}",
            id=f"fqdn-{case}",
        )
        for case, fqdn, message in [
            (
                "svc",
                "kubernetes.default.svc",
                "'kubernetes.default.svc' is a cluster, host or metadata name and is never allowed",
            ),
            (
                "cluster-local",
                "*.cluster.local",
                "'*.cluster.local' is a cluster, host or metadata name and is never allowed",
            ),
            (
                "gce-metadata",
                "metadata.google.internal",
                "'metadata.google.internal' is a cluster, host or metadata name and is never allowed",
            ),
            (
                "localhost",
                "localhost",
                "'localhost' is a cluster, host or metadata name and is never allowed",
            ),
            (
                "ip-literal",
                "169.254.169.254",
                "'169.254.169.254' is an address, not a name; use cidr for addresses",
            ),
            (
                "single-label",
                "intranet-db",
                "'intranet-db' is not a full name; name a domain such as pypi.org or *.pypi.org",
            ),
            (
                "two-label-service",
                "kubernetes.default",
                "'kubernetes.default' ends in 'default', which is no public top-level domain but may be a namespace: <service>.<namespace> names a Service of the cluster; list public names only",
            ),
            (
                "two-label-system-service",
                "kube-dns.kube-system",
                "'kube-dns.kube-system' ends in 'kube-system', which is no public top-level domain but may be a namespace: <service>.<namespace> names a Service of the cluster; list public names only",
            ),
            (
                "namespace-wildcard",
                "*.tenant-evil",
                "'*.tenant-evil' ends in 'tenant-evil', which is no public top-level domain but may be a namespace: <service>.<namespace> names a Service of the cluster; list public names only",
            ),
            (
                "digit-tld",
                "db.42",
                "'db.42' ends in '42', which is no public top-level domain but may be a namespace: <service>.<namespace> names a Service of the cluster; list public names only",
            ),
            (
                "service-under-a-custom-cluster-domain",
                "kubernetes.default.svc.k8s.example.com",
                "'kubernetes.default.svc.k8s.example.com' has the shape of a cluster name (<service>.<namespace>.svc or <pod>.<namespace>.pod, under any cluster domain) and is never allowed",
            ),
            (
                "services-of-a-namespace",
                "*.cozy-system.svc.cozy.example",
                "'*.cozy-system.svc.cozy.example' has the shape of a cluster name (<service>.<namespace>.svc or <pod>.<namespace>.pod, under any cluster domain) and is never allowed",
            ),
            (
                "pod-record",
                "10-244-0-10.kube-system.pod.k8s.example.com",
                "'10-244-0-10.kube-system.pod.k8s.example.com' has the shape of a cluster name (<service>.<namespace>.svc or <pod>.<namespace>.pod, under any cluster domain) and is never allowed",
            ),
            (
                "tld-wildcard",
                "*.com",
                "'*.com' covers a whole top-level domain; name a domain such as pypi.org or *.pypi.org",
            ),
        ]
    ],
    pytest.param(
        {"lifetime": {"suspendAt": "tomorrow"}},
        "spec.lifetime.suspendAt: must be an RFC 3339 time with a zone, such as 2026-12-01T18:00:00Z",
        id="suspend-at-malformed",
    ),
    pytest.param(
        {"lifetime": {"suspendAt": "2026-12-01T18:00:00"}},
        "spec.lifetime.suspendAt: must be an RFC 3339 time with a zone, such as 2026-12-01T18:00:00Z",
        id="suspend-at-without-zone",
    ),
    pytest.param(
        {"restoreFrom": {"snapshot": "Bad_Name"}},
        "spec.restoreFrom.snapshot: 'Bad_Name' must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
        id="restore-from-bad-name",
    ),
    pytest.param(
        {"image": 7}, "spec.image: Input should be a valid string", id="number-for-string"
    ),
    pytest.param(
        {"colour": "blue"},
        "spec.colour: is not a known field; remove it or check its spelling",
        id="unknown-field",
    ),
]


SPEC_CASES += [
    pytest.param(
        {"restoreFrom": {"snapshot": "tenant-evil/secret-snapshot"}},
        "spec.restoreFrom.snapshot: 'tenant-evil/secret-snapshot' names another namespace; only VolumeSnapshots in the sandbox's own namespace can be restored",
        id="restore-from-another-namespace",
    ),
    pytest.param(
        {"restoreFrom": {}}, "spec.restoreFrom.snapshot: is required", id="restore-from-empty"
    ),
    pytest.param(
        {"network": {"egress": "Allowlist", "allow": [{"cidr": "151.101.0.0/16", "via": "x"}]}},
        "spec.network.allow[0].via: is not a known field; remove it or check its spelling",
        id="unknown-nested-field",
    ),
    pytest.param(
        {"ssh": {"keys": []}},
        "spec.ssh.keys: is not a known field; remove it or check its spelling",
        id="unknown-ssh-field",
    ),
    pytest.param(
        {"lifetime": {"ttl": "1h"}},
        "spec.lifetime.ttl: is not a known field; remove it or check its spelling",
        id="unknown-lifetime-field",
    ),
    pytest.param(
        {"snapshots": [{"name": "a", "class": "fast"}]},
        "spec.snapshots[0].class: is not a known field; remove it or check its spelling",
        id="unknown-snapshot-field",
    ),
    pytest.param(
        {"power": True},
        "spec.power: Input should be 'Running' or 'Suspended'",
        id="boolean-for-enum",
    ),
    pytest.param(
        {"resources": {"cpu": [2]}},
        "spec.resources.cpu: must be a quantity such as '2', '500m' or '4Gi'",
        id="list-for-quantity",
    ),
    pytest.param(
        {"ports": "3000"}, "spec.ports: Input should be a valid tuple", id="string-for-list"
    ),
    pytest.param(
        {"snapshots": [{"name": "a.b"}]},
        "spec.snapshots[0].name: 'a.b' must be lowercase letters, digits and '-', starting and ending with a letter or digit",
        id="snapshot-with-dot",
    ),
]


@pytest.mark.parametrize(("spec", "message"), SPEC_CASES)
async def test_bad_spec_is_one_fatal_result(spec: dict[str, Any], message: str) -> None:
    rsp = await run(xr(spec))
    assert [(r.severity, r.message, r.reason) for r in rsp.results] == [
        (fnv1.SEVERITY_FATAL, message, "InvalidSpec")
    ]
    assert not rsp.desired.resources


async def test_ssh_keys_on_a_platform_without_vms_are_refused_without_a_preset_to_try() -> None:
    step_input = platform_input()
    step_input = {
        **step_input,
        "defaultPreset": "kata",
        "presets": {"kata": step_input["presets"]["kata"]},
    }
    rsp = await run(xr({"ssh": {"authorizedKeys": [KEY]}}), step_input)
    message = (
        "spec.ssh.authorizedKeys: preset 'kata' runs the sandbox in a pod (runtime kata), which "
        "never receives SSH keys and serves no SSH; remove spec.ssh.authorizedKeys"
    )
    assert [r.message for r in rsp.results] == [message]
    assert not rsp.desired.resources


@pytest.mark.parametrize(
    ("composite", "message"),
    [
        pytest.param({**xr(), "spec": {}}, "spec.image: is required", id="empty-spec"),
        pytest.param(
            {k: v for k, v in xr().items() if k != "spec"}, "spec: is required", id="missing-spec"
        ),
        pytest.param(
            xr(namespace=None) | {"metadata": {"name": "a"}},
            "metadata.namespace: is required",
            id="no-namespace",
        ),
        pytest.param(
            xr(name="Alice"),
            "metadata.name: 'Alice' must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
            id="bad-name",
        ),
        pytest.param(
            {**xr(), "kind": "XPostgres"},
            "composite: this function composes sandbox.cozystack.io/v1alpha1 WorkspaceSandbox, not sandbox.cozystack.io/v1alpha1 XPostgres",
            id="wrong-kind",
        ),
        pytest.param({}, "composite: the request carries no composite resource", id="no-composite"),
    ],
)
async def test_malformed_composite_is_one_fatal_result(
    composite: dict[str, Any], message: str
) -> None:
    rsp = await run(composite)
    assert [(r.severity, r.message) for r in rsp.results] == [(fnv1.SEVERITY_FATAL, message)]


def _input(**changes: Any) -> dict[str, Any]:
    return {**platform_input(), **changes}


def _standard(**changes: Any) -> dict[str, Any]:
    return {"presets": {"standard": {**platform_input()["presets"]["standard"], **changes}}}


@pytest.mark.parametrize(
    ("step_input", "message"),
    [
        pytest.param(
            _input(kind="Something"),
            "input.kind: Input should be 'SandboxPlatform'",
            id="wrong-kind",
        ),
        pytest.param(
            _input(presets={}),
            "input.presets: Dictionary should have at least 1 item after validation, not 0",
            id="no-presets",
        ),
        pytest.param(
            _input(defaultPreset="xl"),
            "input: defaultPreset 'xl' is not one of the presets",
            id="default-preset-missing",
        ),
        pytest.param(
            _input(**_standard(runtime="docker")),
            "input.presets.standard.runtime: Input should be 'kubevirt', 'kata', 'gvisor' or "
            "'container'",
            id="unknown-runtime",
        ),
        pytest.param(
            _input(**_standard(storageClass=None)),
            "input.presets.standard.storageClass: Input should be a valid string",
            id="null-storage-class",
        ),
        pytest.param(
            _input(
                **_standard(
                    resources={
                        "default": {"cpu": "9", "memory": "1Gi", "disk": "10Gi"},
                        "max": {"cpu": "8", "memory": "1Gi", "disk": "10Gi"},
                    }
                )
            ),
            "input.presets.standard.resources: default.cpu is larger than max.cpu",
            id="default-over-max",
        ),
        pytest.param(
            _input(**_standard(placement="Elsewhere")),
            "input.presets.standard.placement: Input should be 'Namespace', 'SandboxNamespace', "
            "'SharedComputePlane' or 'DedicatedComputePlane'",
            id="unknown-placement",
        ),
        pytest.param(
            _input(**_standard(placement="SandboxNamespace", runtime="container")),
            "input.presets.standard: runtime container is only for the ComputePlane placements, "
            "where the plane's own virtual machines isolate it",
            id="container-in-a-sandbox-namespace",
        ),
        pytest.param(
            _input(
                **_standard(
                    placement="SandboxNamespace", quotaHeadroom={"cpu": "-1", "memory": "1Gi"}
                )
            ),
            "input.presets.standard.quotaHeadroom.cpu: '-1' is not a quantity; write it like "
            "'2', '500m' or '4Gi'",
            id="negative-quota-headroom",
        ),
        pytest.param(
            _input(sandboxNamespaces={"clusterProviderConfig": "Sandbox_Host"}),
            "input.sandboxNamespaces.clusterProviderConfig: 'Sandbox_Host' must be lowercase "
            "letters, digits, '-' and '.', starting and ending with a letter or digit",
            id="sandbox-namespaces-config-not-a-name",
        ),
        pytest.param(
            _input(gateway={"namespace": "gw", "podLabels": {}}),
            "input.gateway.podLabels: Dictionary should have at least 1 item after validation, not 0",
            id="gateway-without-labels",
        ),
        pytest.param(
            _input(images={"u": {"kubevirt": {}}}),
            "input.images.u.kubevirt: set exactly one of pvc, dataSource and snapshot",
            id="image-without-source",
        ),
        pytest.param(
            _input(images={"u": {"oci": "docker.io/library/ubuntu:24.04"}}),
            "input.images.u.oci: 'docker.io/library/ubuntu:24.04' must be pinned by digest: registry/repository@sha256:<64 hex>",
            id="image-not-pinned",
        ),
        pytest.param(
            _input(network={"resolvers": ["dns.google"]}),
            "input.network.resolvers[0]: 'dns.google' is not an IP address",
            id="resolver-not-an-ip",
        ),
        pytest.param(
            _input(network={"resolvers": ["2001:4860:4860::8888%eth0"]}),
            "input.network.resolvers[0]: '2001:4860:4860::8888%eth0' is not an IP address: a scope zone (%...) names one host's interface; leave it out",
            id="resolver-with-a-scope-zone",
        ),
        pytest.param(
            _input(network={"siteDenyCidrs": ["2a01:4f8::%eth0/32"]}),
            "input.network.siteDenyCidrs[0]: '2a01:4f8::%eth0/32' is not a network in CIDR notation: a scope zone (%...) names one host's interface; leave it out",
            id="site-cidr-with-a-scope-zone",
        ),
        pytest.param(
            _input(
                **_standard(
                    scheduling={"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}
                )
            ),
            "input.presets.standard.scheduling.tolerations[0]: a toleration with operator Exists takes no value",
            id="toleration-exists-with-value",
        ),
        pytest.param(
            _input(**_standard(scheduling={"nodeSelector": {"/pool": "sandbox"}})),
            "input.presets.standard.scheduling.nodeSelector[/pool]: '/pool' has an invalid prefix; it must be a DNS subdomain",
            id="label-key-empty-prefix",
        ),
        pytest.param(
            _input(network={"resolvers": ["10.96.0.10"]}),
            "input.network.resolvers[0]: 10.96.0.10 is in the blocked range 10.0.0.0/8 (private network), so sandboxes could not reach it; use public resolvers, or a preset with clusterDns",
            id="private-resolver",
        ),
        pytest.param(
            _input(network={"siteDenyCidrs": ["9.9.9.0/24"]}),
            "input.network.resolvers[0]: 9.9.9.9 is in the blocked range 9.9.9.0/24 (the platform's site deny list), so sandboxes could not reach it; use public resolvers, or a preset with clusterDns",
            id="resolver-in-site-deny-list",
        ),
        pytest.param(
            _input(network={"resolvers": ["::ffff:9.9.9.9"]}),
            "input.network.resolvers[0]: ::ffff:909:909 is in the blocked range ::ffff:0:0/96 (IPv4-mapped), so sandboxes could not reach it; use public resolvers, or a preset with clusterDns",
            id="ipv4-mapped-resolver",
        ),
        pytest.param(
            _input(network={"siteDenyCidrs": ["::ffff:0:0/95"]}),
            "input.network.siteDenyCidrs[0]: '::ffff:0:0/95' is not a network in CIDR notation: ::ffff:0:0/95 has host bits set",
            id="site-cidr-ipv4-mapped-host-bits",
        ),
        pytest.param(
            _input(network={"siteDenyCidrs": ["185.12.64.1/24"]}),
            "input.network.siteDenyCidrs[0]: '185.12.64.1/24' is not a network in CIDR notation: 185.12.64.1/24 has host bits set",
            id="site-cidr-host-bits",
        ),
        pytest.param(
            _input(
                network={
                    "egressBundles": {
                        "package-registries": [
                            {"fqdn": "pypi.org"},
                            {"fqdn": "files.pythonhosted.org"},
                            {"fqdn": "https://registry.npmjs.org"},
                        ]
                    }
                }
            ),
            "input.network.egressBundles.package-registries[2].fqdn: 'https://registry.npmjs.org' must be a lowercase DNS name such as pypi.org, optionally starting with '*.'; no scheme, port or path",
            id="bundle-fqdn-with-scheme",
        ),
        pytest.param(
            _input(network={"egressBundles": {"mirrors": [{"fqdn": "kubernetes.default.svc"}]}}),
            "input.network.egressBundles.mirrors[0].fqdn: 'kubernetes.default.svc' is a cluster, host or metadata name and is never allowed",
            id="bundle-cluster-name",
        ),
        pytest.param(
            _input(network={"egressBundles": {"mirrors": [{"cidr": "10.0.0.0/8"}]}}),
            "input.network.egressBundles.mirrors[0].cidr: 10.0.0.0/8 overlaps the blocked range 10.0.0.0/8 (private network)",
            id="bundle-private-cidr",
        ),
        pytest.param(
            _input(
                network={
                    "siteDenyCidrs": ["185.12.64.0/22"],
                    "egressBundles": {"mirrors": [{"cidr": "185.12.64.0/24"}]},
                }
            ),
            "input.network.egressBundles.mirrors[0].cidr: 185.12.64.0/24 overlaps the blocked range 185.12.64.0/22 (the platform's site deny list)",
            id="bundle-cidr-in-site-deny-list",
        ),
        pytest.param(
            _input(network={"egressBundles": {"mirrors": [{"cidr": "64:ff9b:1::/48"}]}}),
            "input.network.egressBundles.mirrors[0].cidr: 64:ff9b:1::/48 is refused: local-use NAT64 addresses (64:ff9b:1::/48) embed IPv4 addresses",
            id="bundle-nat64-cidr",
        ),
        pytest.param(
            _input(
                network={
                    "egressBundles": {
                        "mirrors": [{"cidr": "151.101.0.0/16"}, {"cidr": "151.101.64.0/18"}]
                    }
                }
            ),
            "input.network.egressBundles.mirrors[1].cidr: 151.101.64.0/18 overlaps mirrors[0] (151.101.0.0/16); merge them",
            id="bundle-overlapping-entries",
        ),
        pytest.param(
            _input(
                network={
                    "egressBundles": {"mirrors": [{"fqdn": "pypi.org", "cidr": "151.101.0.0/16"}]}
                }
            ),
            "input.network.egressBundles.mirrors[0]: set exactly one of fqdn and cidr",
            id="bundle-entry-fqdn-and-cidr",
        ),
        pytest.param(
            _input(network={"egressBundles": {"mirrors": [{"bundle": "package-registries"}]}}),
            "input.network.egressBundles.mirrors[0].bundle: is not a known field; remove it or check its spelling",
            id="bundle-in-a-bundle",
        ),
        pytest.param(
            _input(network={"egressBundles": {"mirrors": []}}),
            "input.network.egressBundles.mirrors: Tuple should have at least 1 item after validation, not 0",
            id="empty-bundle",
        ),
        pytest.param(
            _input(network={"egressBundles": {"Mirrors": [{"fqdn": "pypi.org"}]}}),
            "input.network.egressBundles.Mirrors: 'Mirrors' must be lowercase letters, digits and '-', starting and ending with a letter or digit",
            id="bundle-name-not-a-dns-label",
        ),
        pytest.param(
            _input(gateway={"namespace": "gw", "podLabels": {"app": "gateway\nx"}}),
            "input.gateway.podLabels.app: 'gateway\\nx' is not a valid label value",
            id="label-value-with-newline",
        ),
        pytest.param(
            _input(gateway={"namespace": "gw", "podLabels": {"app": "g" * 64}}),
            "input.gateway.podLabels.app: String should have at most 63 characters",
            id="label-value-too-long",
        ),
        pytest.param(
            _input(gateway={"namespace": "Gateway", "podLabels": {"app": "g"}}),
            "input.gateway.namespace: 'Gateway' must be lowercase letters, digits and '-', starting and ending with a letter or digit",
            id="namespace-uppercase",
        ),
        pytest.param(
            _input(gateway={"namespace": "gw", "podLabels": {"app": "g"}, "agentPort": "49983"}),
            "input.gateway.agentPort: must be a whole number",
            id="port-as-string",
        ),
        pytest.param(
            _input(**_standard(maxLifetime="forever")),
            "input.presets.standard.maxLifetime: must be a duration in days, hours and minutes, such as 8h, 7d or 1h30m",
            id="duration-malformed",
        ),
        pytest.param(
            _input(colour="blue"),
            "input.colour: is not a known field; remove it or check its spelling",
            id="unknown-field",
        ),
    ],
)
async def test_broken_platform_input_is_one_fatal_result(
    step_input: dict[str, Any], message: str
) -> None:
    rsp = await run(xr(), step_input)
    assert [(r.severity, r.message, r.reason) for r in rsp.results] == [
        (fnv1.SEVERITY_FATAL, message, "InvalidInput")
    ]
    assert not rsp.desired.resources


def _not_plain(path: str) -> str:
    return (
        f"{path!r} must be a plain absolute path such as /usr/bin/python3 (letters, digits and "
        "._+-, no empty, '.' or '..' part); a bare name is looked up on the image's PATH"
    )


def _writable(path: str, prefix: str) -> str:
    return (
        f"{path!r} is under {prefix}, which the sandbox's user can write; name the image's own "
        "interpreter, such as /usr/bin/python3"
    )


@pytest.mark.parametrize(
    ("python", "why"),
    [
        pytest.param("python3", _not_plain("python3"), id="bare-name"),
        pytest.param("bin/python3", _not_plain("bin/python3"), id="relative"),
        pytest.param(
            "/usr/bin/../../workspace/python3",
            _not_plain("/usr/bin/../../workspace/python3"),
            id="dot-dot",
        ),
        pytest.param("/usr/./bin/python3", _not_plain("/usr/./bin/python3"), id="dot"),
        pytest.param("/usr//bin/python3", _not_plain("/usr//bin/python3"), id="empty-part"),
        pytest.param("/usr/bin/python3/", _not_plain("/usr/bin/python3/"), id="trailing-slash"),
        pytest.param(
            "/usr/bin/python3 -S", _not_plain("/usr/bin/python3 -S"), id="with-an-argument"
        ),
        pytest.param("/", _not_plain("/"), id="root"),
        pytest.param(
            "/workspace/.local/bin/python3",
            _writable("/workspace/.local/bin/python3", "/workspace"),
            id="workspace",
        ),
        pytest.param("/workspace", _writable("/workspace", "/workspace"), id="workspace-itself"),
        # The temporary places, built so that no literal of them reads as a temporary file.
        *(
            pytest.param(f"{p}/python3", _writable(f"{p}/python3", p), id=f"under-{p}")
            for p in USER_WRITABLE
        ),
    ],
)
async def test_an_agent_interpreter_the_user_could_replace_is_one_fatal_result(
    python: str, why: str
) -> None:
    rsp = await run(xr({"preset": "kata"}), _input(agent={"image": AGENT_IMAGE, "python": python}))
    assert [(r.severity, r.message, r.reason) for r in rsp.results] == [
        (fnv1.SEVERITY_FATAL, f"input.agent.python: {why}", "InvalidInput")
    ]
    assert not rsp.desired.resources


async def test_an_agent_interpreter_path_is_at_most_255_characters() -> None:
    python = "/opt/" + "p" * 251
    rsp = await run(xr(), _input(agent={"image": AGENT_IMAGE, "python": python}))
    assert [(r.severity, r.message) for r in rsp.results] == [
        (fnv1.SEVERITY_FATAL, "input.agent.python: String should have at most 255 characters")
    ]


async def test_allow_cidr_overlapping_the_site_deny_list_is_refused() -> None:
    step_input = _input(
        network={**platform_input()["network"], "siteDenyCidrs": ["185.12.64.0/22"]}
    )
    spec = {"network": {"egress": "Allowlist", "allow": [{"cidr": "185.12.66.0/24"}]}}
    rsp = await run(xr(spec), step_input)
    assert [r.message for r in rsp.results] == [
        (
            "spec.network.allow[0].cidr: 185.12.66.0/24 overlaps the blocked range 185.12.64.0/22 "
            "(the platform's site deny list)"
        )
    ]


async def test_names_in_the_allowlist_are_refused_where_namespaces_allow_the_internet() -> None:
    spec = {
        "network": {
            "egress": "Allowlist",
            "allow": [{"cidr": "151.101.0.0/16"}, {"fqdn": "pypi.org"}],
        }
    }
    rsp = await run(xr(spec))
    assert [r.message for r in rsp.results] == [
        (
            "spec.network.allow[1].fqdn: names can't be enforced on this platform: its namespaces "
            "already allow all internet egress, and Cilium can only take that away by address; "
            "use a preset that gives each sandbox a namespace of its own (dedicated-plane, "
            "isolated, isolated-kata, shared-plane), or list the destination's addresses as "
            "cidr entries"
        )
    ]


async def test_overlapping_allowlist_cidrs_are_refused() -> None:
    allow = [{"cidr": "151.101.0.0/16", "ports": [443]}, {"cidr": "151.101.64.0/18"}]
    rsp = await run(xr({"network": {"egress": "Allowlist", "allow": allow}}))
    assert [r.message for r in rsp.results] == [
        "spec.network.allow[1].cidr: 151.101.64.0/18 overlaps allow[0] (151.101.0.0/16); merge them"
    ]


def _preset(base: str, **changes: Any) -> dict[str, Any]:
    return {**platform_input()["presets"][base], **changes}


_INGRESS = {"md0": {"roles": ["ingress-nginx"]}}


@pytest.mark.parametrize(
    ("preset", "message"),
    [
        pytest.param(
            _preset("standard", placement="SharedComputePlane", computePlane={"name": "cp"}),
            "input.presets.x: placement SharedComputePlane runs pods inside the plane: use "
            "runtime container, gvisor or kata",
            id="kubevirt-in-a-plane",
        ),
        pytest.param(
            _preset("gvisor", placement="SharedComputePlane"),
            "input.presets.x: placement SharedComputePlane needs computePlane",
            id="plane-placement-without-options",
        ),
        pytest.param(
            _preset("shared-plane", computePlane={}),
            "input.presets.x: a SharedComputePlane preset names the tenant's plane "
            "(computePlane.name) and sets no nodeGroups",
            id="shared-without-a-name",
        ),
        pytest.param(
            _preset("shared-plane", computePlane={"name": "cp", "nodeGroups": _INGRESS}),
            "input.presets.x: a SharedComputePlane preset names the tenant's plane "
            "(computePlane.name) and sets no nodeGroups",
            id="shared-with-node-groups",
        ),
        pytest.param(
            _preset("dedicated-plane", computePlane={"name": "cp", "nodeGroups": _INGRESS}),
            "input.presets.x: a DedicatedComputePlane preset composes its plane: drop "
            "computePlane.name",
            id="dedicated-with-a-name",
        ),
        pytest.param(
            _preset("dedicated-plane", computePlane={"nodeGroups": {"md0": {"roles": []}}}),
            "input.presets.x: computePlane.nodeGroups needs a group with roles "
            "[ingress-nginx]: the ComputePlane chart requires one",
            id="dedicated-without-an-ingress-group",
        ),
        pytest.param(
            _preset(
                "dedicated-plane",
                computePlane={
                    "nodeGroups": {
                        "md0": {"roles": ["ingress-nginx"], "minReplicas": 3, "maxReplicas": 2}
                    }
                },
            ),
            "input.presets.x.computePlane.nodeGroups.md0: minReplicas is larger than maxReplicas",
            id="node-group-min-over-max",
        ),
        pytest.param(
            _preset("kata", computePlane={"name": "cp"}),
            "input.presets.x: computePlane is only for the ComputePlane placements",
            id="plane-options-in-a-namespace-preset",
        ),
        pytest.param(
            _preset("kata", runtime="container"),
            "input.presets.x: runtime container is only for the ComputePlane placements, "
            "where the plane's own virtual machines isolate it",
            id="bare-container-in-the-namespace",
        ),
        pytest.param(
            _preset("shared-plane", computePlane={"name": "cp", "kubeconfigSecretSuffix": "x"}),
            "input.presets.x.computePlane.kubeconfigSecretSuffix: String should match pattern "
            "'^-[a-z0-9-]*[a-z0-9]$'",
            id="kubeconfig-suffix",
        ),
    ],
)
async def test_inconsistent_placement_presets_are_refused(
    preset: dict[str, Any], message: str
) -> None:
    presets = {**platform_input()["presets"], "x": preset}
    rsp = await run(xr(), _input(presets=presets))
    assert [(r.severity, r.message) for r in rsp.results] == [(fnv1.SEVERITY_FATAL, message)]


async def test_a_pod_preset_needs_an_oci_image() -> None:
    images = {"ubuntu-24.04": {"kubevirt": platform_input()["images"]["ubuntu-24.04"]["kubevirt"]}}
    rsp = await run(xr({"preset": "kata"}), _input(images=images))
    assert [r.message for r in rsp.results] == [
        "spec.image: 'ubuntu-24.04' has no OCI image for pod sandboxes"
    ]


@pytest.mark.parametrize(
    ("preset", "observed_key", "was"),
    [
        pytest.param("kata", "workspace-volume", "kubevirt", id="vm-to-pod"),
        pytest.param("standard", "sandbox", "a pod runtime", id="pod-to-vm"),
    ],
)
async def test_switching_runtime_would_strand_the_workspace(
    preset: str, observed_key: str, was: str
) -> None:
    req = request(xr({"preset": preset}), {observed_key: {"kind": "Whatever"}})
    rsp = await FunctionRunner(clock=lambda: NOW).RunFunction(req, None)
    runtime = "kata" if preset == "kata" else "kubevirt"
    assert [r.message for r in rsp.results] == [
        (
            f"spec.preset: preset {preset!r} runs {runtime}, but this sandbox's workspace lives on "
            f"{was}; switching would leave it behind. Snapshot it and restore the snapshot into a "
            "new sandbox instead"
        )
    ]
