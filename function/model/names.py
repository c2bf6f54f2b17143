"""Name and label shapes shared by the tenant and platform models."""

import re
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

# DNS-1123 label: what Kubernetes requires of most names and of label values we derive.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# DNS-1123 subdomain: names of most namespaced objects.
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# IANA service name: what a Service port name must be.
PORT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
MAX_LABEL = 63
MAX_SUBDOMAIN = 253
LABEL_KEY_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _dns_label(value: str) -> str:
    if not DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{value!r} must be lowercase letters, digits and '-', starting and ending with a "
            "letter or digit"
        )
    return value


def _dns_subdomain(value: str) -> str:
    if not DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(
            f"{value!r} must be lowercase letters, digits, '-' and '.', starting and ending with "
            "a letter or digit"
        )
    return value


# A DNS name with at most one leading wildcard label, as Cilium's toFQDNs matchPattern takes it.
FQDN = re.compile(r"(\*\.)?([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _fqdn(value: str) -> str:
    if not FQDN.fullmatch(value):
        raise ValueError(
            f"{value!r} must be a lowercase DNS name such as pypi.org, optionally starting with "
            "'*.'; no scheme, port or path"
        )
    return value


def _port_name(value: str) -> str:
    if not PORT_NAME.fullmatch(value) or "--" in value or not re.search("[a-z]", value):
        raise ValueError(
            f"{value!r} must be lowercase letters, digits and single '-', with at least one letter"
        )
    return value


def _label_key(value: str) -> str:
    prefix, slash, name = value.rpartition("/")
    if slash and (len(prefix) > MAX_SUBDOMAIN or not DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError(f"{value!r} has an invalid prefix; it must be a DNS subdomain")
    if len(name) > MAX_LABEL or not LABEL_KEY_NAME.fullmatch(name):
        raise ValueError(f"{value!r} is not a valid label key")
    return value


def _label_value(value: str) -> str:
    if not LABEL_VALUE.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid label value")
    return value


DnsLabel = Annotated[str, StringConstraints(max_length=63), AfterValidator(_dns_label)]
SnapshotName = Annotated[str, StringConstraints(max_length=40), AfterValidator(_dns_label)]
DnsSubdomain = Annotated[str, StringConstraints(max_length=253), AfterValidator(_dns_subdomain)]
Fqdn = Annotated[str, StringConstraints(min_length=1, max_length=253), AfterValidator(_fqdn)]
PortName = Annotated[str, StringConstraints(max_length=15), AfterValidator(_port_name)]
LabelKey = Annotated[str, StringConstraints(max_length=317), AfterValidator(_label_key)]
LabelValue = Annotated[str, StringConstraints(max_length=MAX_LABEL), AfterValidator(_label_value)]
