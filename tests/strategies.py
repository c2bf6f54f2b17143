"""Hypothesis strategies that build tenant-shaped WorkspaceSandbox specs and names."""

from typing import Any

from hypothesis import strategies as st

KEYS = [
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ59QzKAgaweWutMQQYQMAhdmOo8JHFmw4Y3BLQLyb4k alice@laptop",
    (
        "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBEhSioHWZwjf54wiu9K4GD"
        "303E4bBA+nSjYJin7GLulLAhqLBJlhmDPwylHmzo5wn1aUxWJXB4NdXdzNwnL/JAw= ci-runner"
    ),
]

_label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)

# XR names are DNS-1123 subdomains: dots, leading digits and up to 253 characters.
xr_names = (
    st.lists(
        st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True), min_size=1, max_size=4
    )
    .map(".".join)
    .filter(lambda n: len(n) <= 253)
)

snapshot_names = st.from_regex(r"[a-z]([-a-z0-9]{0,30}[a-z0-9])?", fullmatch=True)
port_names = st.from_regex(r"[a-z]{1,6}(-[a-z0-9]{1,4})?", fullmatch=True)
ports = st.integers(min_value=1024, max_value=49000)


@st.composite
def service_ports(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(port_names, max_size=5, unique=True))
    numbers = draw(st.lists(ports, min_size=len(names), max_size=len(names), unique=True))
    return [{"name": n, "port": p} for n, p in zip(names, numbers, strict=True)]


resources = st.fixed_dictionaries(
    {},
    optional={
        "cpu": st.sampled_from(["1", "2", "500m", "1500m", "8", 4.0]),
        "memory": st.sampled_from(["1Gi", "4Gi", "4096Mi", "16Gi"]),
        "disk": st.sampled_from(["20Gi", "50Gi", "200Gi", "30Gi"]),
    },
)

specs = st.fixed_dictionaries(
    {"image": st.just("ubuntu-24.04")},
    optional={
        "preset": st.just("standard"),
        "resources": resources,
        "power": st.sampled_from(["Running", "Suspended"]),
        "ports": service_ports(),
        "ssh": st.fixed_dictionaries(
            {"authorizedKeys": st.lists(st.sampled_from(KEYS), max_size=2, unique=True)}
        ),
        "snapshots": st.lists(snapshot_names, max_size=6, unique=True).map(
            lambda names: [{"name": n} for n in names]
        ),
        "lifetime": st.just({"suspendAt": "2026-12-01T18:00:00Z"}),
        "network": st.just({"egress": "Internet"}),
    },
)
