"""The XRD's kubectl names against every name a Cozystack cluster serves.

kubectl resolves `kubectl get <word>` by expanding categories first, then plural, singular, kind
and short names, across every group. A category or short name of ours that another resource
also answers to hides that resource, or hides ours, depending on which kubectl finds first.

The served names come from two places: the upstream CRDs and Cozystack ApplicationDefinitions
vendored under schemas/upstream, and `SERVED_ELSEWHERE` below for the rest. The constant is not
every name a cluster serves; it holds the built-in names kubectl always knows, the categories
Kubernetes and Crossplane add, and the kinds of the projects installed beside this one whose
CRDs aren't vendored. The names below were also checked, when chosen, against every CRD in
cozystack/cozystack at 3c780acd (the commit of the vendored ApplicationDefinition): none matches.
"""

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import yaml

from tests.schemas import crds_root
from tests.support import ROOT

XRD = yaml.safe_load((ROOT / "apis" / "workspacesandbox" / "definition.yaml").read_text())

# Names kubectl resolves on a Cozystack v1.6 cluster (Kubernetes 1.33) that no vendored file
# defines: plural, singular, kind (lowercased), short names and categories alike.
SERVED_ELSEWHERE: Mapping[str, frozenset[str]] = {
    # The categories Kubernetes gives its own kinds; `all` is also claimed by KubeVirt and CDI.
    "kubernetes categories": frozenset({"all", "api-extensions"}),
    # Built-in short names, and the plural and singular of the kinds nearest ours.
    "kubernetes": frozenset(
        {
            *("cm", "cs", "ep", "ev", "limits", "no", "ns", "po", "pv", "pvc", "quota", "rc"),
            *("sa", "svc", "crd", "crds", "ds", "deploy", "rs", "sts", "hpa", "cj", "csr"),
            *("ing", "netpol", "pdb", "pc", "sc", "vac", "ip"),
            *("pods", "pod", "services", "service", "secrets", "secret", "namespaces"),
            *("statefulsets", "statefulset", "deployments", "deployment", "jobs", "job"),
            *("persistentvolumeclaims", "persistentvolumeclaim", "networkpolicies"),
            *("runtimeclasses", "runtimeclass", "leases", "lease", "events", "event"),
        }
    ),
    # Crossplane core: the categories it adds to generated CRDs (composite to every XR, claim
    # to every claim) and those of its own kinds, and its kinds that aren't vendored.
    "crossplane": frozenset(
        {
            *("crossplane", "composite", "claim", "managed", "pkg", "pkgrev", "provider"),
            *("compositionrevisions", "compositionrevision", "comprev"),
            *("environmentconfigs", "environmentconfig", "envcfg"),
            *("usages", "usage", "clusterusages", "clusterusage"),
            *("managedresourcedefinitions", "managedresourcedefinition", "mrd", "mrds"),
            *("managedresourceactivationpolicies", "mrap"),
            *("operations", "operation", "ops", "cronoperations", "cronops"),
            *("watchoperations", "watchops"),
        }
    ),
    # provider-kubernetes kinds beyond the vendored Object and ProviderConfigs.
    "provider-kubernetes": frozenset(
        {
            *("providerconfigusages", "providerconfigusage"),
            *("observedobjectcollections", "observedobjectcollection"),
        }
    ),
    # agent-sandbox's extensions.agents.x-k8s.io kinds (only Sandbox is vendored).
    "agent-sandbox": frozenset(
        {
            *("sandboxclaims", "sandboxclaim"),
            *("sandboxtemplates", "sandboxtemplate"),
            *("sandboxwarmpools", "sandboxwarmpool", "swp"),
            *("managedsandboxes", "managedsandbox", "sandbox"),
        }
    ),
    # KubeVirt and CDI kinds beyond the vendored VirtualMachine and DataVolume.
    "kubevirt": frozenset(
        {
            *("virtualmachineinstances", "virtualmachineinstance", "vmi", "vmis"),
            *("virtualmachineinstancemigrations", "vmim", "vmims"),
            *("virtualmachinesnapshots", "virtualmachinesnapshot", "vmsnapshot", "vmsnapshots"),
            *("virtualmachinerestores", "vmrestore", "vmrestores"),
            *("virtualmachineexports", "vmexport", "vmexports"),
            *("virtualmachinepools", "vmpool", "vmpools"),
            *("virtualmachineclones", "vmclone", "vmclones"),
            *("kubevirts", "kubevirt", "kv", "kvs"),
            *("datasources", "datasource", "dataimportcrons", "dataimportcron"),
        }
    ),
    # Cozystack: the tenant applications its aggregated API serves (apps.cozystack.io, with
    # no short names or categories), and its own cozystack.io kinds.
    "cozystack": frozenset(
        {
            *("bootboxes", "bootbox", "buckets", "bucket", "clickhouses", "clickhouse"),
            *("etcds", "etcd", "externaldns", "foundationdbs", "foundationdb"),
            *("harbors", "harbor", "httpcaches", "httpcache", "infos", "info"),
            *("ingresses", "ingress", "kafkas", "kafka", "kubernetesnodeses", "kubernetesnodes"),
            *("kuberneteses", "kubernetes", "mariadbs", "mariadb", "mongodbs", "mongodb"),
            *("monitorings", "monitoring", "natses", "nats", "openbaos", "openbao"),
            *("opensearches", "opensearch", "postgreses", "postgres", "qdrants", "qdrant"),
            *("rabbitmqs", "rabbitmq", "redises", "redis", "seaweedfses", "seaweedfs"),
            *("tcpbalancers", "tcpbalancer", "tenants", "tenant"),
            *("virtualprivateclouds", "virtualprivatecloud", "vmdisks", "vmdisk"),
            *("vminstances", "vminstance", "vpns", "vpn"),
            *("workloads", "workload", "workloadmonitors", "workloadmonitor"),
        }
    ),
}


def names_of(names: Mapping[str, Any]) -> set[str]:
    """Every word kubectl resolves to a kind with these `spec.names`."""
    words = {names["plural"], names.get("singular") or names["kind"].lower(), names["kind"]}
    words |= {*names.get("shortNames", ()), *names.get("categories", ())}
    return {w.lower() for w in words}


def _vendored() -> Iterator[tuple[str, set[str]]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for path in sorted(crds_root().rglob("*.yaml")):
        where = str(path.relative_to(crds_root()))
        for doc in yaml.load_all(path.read_text(), Loader=loader):
            if not isinstance(doc, dict):
                continue
            if doc.get("kind") == "CustomResourceDefinition":
                yield where, names_of(doc["spec"]["names"])
            elif doc.get("kind") == "ApplicationDefinition":
                yield where, names_of(doc["spec"]["application"])


@functools.cache
def vendored() -> tuple[tuple[str, set[str]], ...]:
    """The names each vendored CRD and ApplicationDefinition serves."""
    return tuple(_vendored())


def served() -> dict[str, set[str]]:
    """Every served name, and where each comes from."""
    found: dict[str, set[str]] = {}
    for where, words in [*vendored(), *SERVED_ELSEWHERE.items()]:
        for word in words:
            found.setdefault(word, set()).add(where)
    return found


def collisions(names: Mapping[str, Any]) -> dict[str, set[str]]:
    taken = served()
    return {word: taken[word] for word in sorted(names_of(names)) if word in taken}


def test_the_served_names_include_every_vendored_kind() -> None:
    sources = dict(vendored())
    assert "sandbox" in sources["agent-sandbox/agents.x-k8s.io_sandboxes.yaml"]
    assert "vm" in sources["kubevirt/v1.8.4/kubevirt.io_virtualmachines.yaml"]
    assert "computeplanes" in sources["cozystack/applicationdefinitions/computeplane.yaml"]


def test_no_xrd_name_is_served_by_anything_else() -> None:
    assert collisions(XRD["spec"]["names"]) == {}


def test_names_are_lowercase_dns_labels() -> None:
    # What the API server requires of a CRD's names; Crossplane copies the XRD's names into one.
    names = XRD["spec"]["names"]
    for word in names_of(names) - {names["kind"].lower()}:
        assert word == word.lower()
        assert len(word) <= 63
        assert word[0].isalpha()
        assert word.replace("-", "").isalnum()
        assert not word.endswith("-")


_SANDBOXES = "agent-sandbox/agents.x-k8s.io_sandboxes.yaml"
_VMS = "kubevirt/v1.8.4/kubevirt.io_virtualmachines.yaml"
_DATA_VOLUMES = "cdi/v1.64.0/cdi.kubevirt.io_datavolumes.yaml"


@pytest.mark.parametrize(
    ("change", "taken"),
    [
        pytest.param(
            {"categories": ["sandbox"]},
            {"sandbox": {_SANDBOXES, "agent-sandbox"}},
            id="category-sandbox-hides-agent-sandboxes",
        ),
        pytest.param({"shortNames": ["vm"]}, {"vm": {_VMS}}, id="short-name-of-kubevirt"),
        pytest.param(
            {"categories": ["all"]},
            {"all": {_VMS, _DATA_VOLUMES, "kubernetes categories"}},
            id="category-all",
        ),
        pytest.param(
            {"categories": ["composite"]}, {"composite": {"crossplane"}}, id="crossplane-category"
        ),
        pytest.param({"shortNames": ["tenant"]}, {"tenant": {"cozystack"}}, id="cozystack-app"),
    ],
)
def test_a_taken_name_is_caught(change: dict[str, Any], taken: dict[str, set[str]]) -> None:
    names = {**XRD["spec"]["names"], **change}
    assert collisions(names) == taken
