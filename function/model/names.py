"""Name and label shapes shared by the tenant and platform models."""

import re
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

MAX_LABEL = 63
MAX_SUBDOMAIN = 253

# DNS-1123 label: what Kubernetes requires of most names and of label values we derive.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# DNS-1123 subdomain: names of most namespaced objects.
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# IANA service name, as a Service port name must be: a letter somewhere, no double dash.
PORT_NAME = re.compile(r"(?!.*--)(?=.*[a-z])[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# A DNS name with at most one leading wildcard label, as Cilium's toFQDNs matchPattern takes it.
FQDN = re.compile(r"(\*\.)?([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
LABEL_KEY_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _matching(pattern: re.Pattern[str], must: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{value!r} {must}")
        return value

    return AfterValidator(check)


# Names that resolve to the cluster, the node or a cloud's metadata service: never a sandbox's
# business, even when a resolver would answer them.
_INTERNAL_SUFFIXES = (
    "cluster.local",
    "svc",
    "local",
    "localhost",
    "internal",
    "home.arpa",
    "in-addr.arpa",
    "ip6.arpa",
    "localdomain",
    "intranet",
    "lan",
    "corp",
    "private",
)
_IP_LIKE = re.compile(r"[0-9.]+|.*:.*")
# Cluster DNS answers <service>.<namespace>.svc.<cluster domain> and <pod>.<namespace>.pod.<...>
# whatever the cluster domain is called.
_CLUSTER_RECORDS = ("svc", "pod")
_MIN_RECORD_INDEX = 2
# Top-level domains are letters only, or an internationalised name's xn-- form; namespaces may
# have digits and dashes. `default` is a namespace every cluster has and no top-level domain.
_TOP_LEVEL = re.compile(r"[a-z]+|xn--[a-z0-9-]+")
_CLUSTER_NAMESPACES = ("default",)
_NAME_ONE = "name a domain such as pypi.org or *.pypi.org"


def _cluster_shaped(value: str) -> str | None:
    """Why `value` names, or could be completed to, something inside a cluster; None if not.

    Cilium's DNS proxy matches a query as it is sent, after the pod's own search domains have
    completed it, so a listed `kube-dns.kube-system` only ever lets that literal name through.
    But a resolver that completes or rewrites names itself (CoreDNS autopath or rewrite, a
    resolver with a search domain) would answer it from inside the cluster.
    """
    labels = value.split(".")
    if any(label in _CLUSTER_RECORDS for label in labels[_MIN_RECORD_INDEX:]):
        return (
            "has the shape of a cluster name (<service>.<namespace>.svc or "
            "<pod>.<namespace>.pod, under any cluster domain) and is never allowed"
        )
    last = labels[-1]
    if last in _CLUSTER_NAMESPACES or not _TOP_LEVEL.fullmatch(last):
        return (
            f"ends in {last!r}, which is no public top-level domain but may be a namespace: "
            "<service>.<namespace> names a Service of the cluster; list public names only"
        )
    return None


def _public_name(value: str) -> str:
    name = value.removeprefix("*.")
    if _IP_LIKE.fullmatch(name):
        raise ValueError(f"{value!r} is an address, not a name; use cidr for addresses")
    for suffix in _INTERNAL_SUFFIXES:
        if name == suffix or name.endswith("." + suffix):
            raise ValueError(f"{value!r} is a cluster, host or metadata name and is never allowed")
    if "." not in value:
        raise ValueError(f"{value!r} is not a full name; {_NAME_ONE}")
    why = _cluster_shaped(value)
    if why is not None:
        raise ValueError(f"{value!r} {why}")
    if "." not in name:
        raise ValueError(f"{value!r} covers a whole top-level domain; {_NAME_ONE}")
    return value


def _label_key(value: str) -> str:
    prefix, slash, name = value.rpartition("/")
    if slash and (len(prefix) > MAX_SUBDOMAIN or not DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ValueError(f"{value!r} has an invalid prefix; it must be a DNS subdomain")
    if len(name) > MAX_LABEL or not LABEL_KEY_NAME.fullmatch(name):
        raise ValueError(f"{value!r} is not a valid label key")
    return value


_IS_DNS_LABEL = _matching(
    DNS_LABEL,
    "must be lowercase letters, digits and '-', starting and ending with a letter or digit",
)
_IS_DNS_SUBDOMAIN = _matching(
    DNS_SUBDOMAIN,
    "must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
)

DnsLabel = Annotated[str, StringConstraints(max_length=MAX_LABEL), _IS_DNS_LABEL]
SnapshotName = Annotated[str, StringConstraints(max_length=40), _IS_DNS_LABEL]
DnsSubdomain = Annotated[str, StringConstraints(max_length=MAX_SUBDOMAIN), _IS_DNS_SUBDOMAIN]
Fqdn = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_SUBDOMAIN),
    _matching(
        FQDN,
        "must be a lowercase DNS name such as pypi.org, optionally starting with '*.'; "
        "no scheme, port or path",
    ),
    AfterValidator(_public_name),
]
PortName = Annotated[
    str,
    StringConstraints(max_length=15),
    _matching(
        PORT_NAME, "must be lowercase letters, digits and single '-', with at least one letter"
    ),
]
LabelKey = Annotated[str, StringConstraints(max_length=317), AfterValidator(_label_key)]
LabelValue = Annotated[
    str,
    StringConstraints(max_length=MAX_LABEL),
    _matching(LABEL_VALUE, "is not a valid label value"),
]
