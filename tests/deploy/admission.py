"""An admission evaluator: a ValidatingAdmissionPolicy's verdict on a request, as the API
server reaches it, with the policies' CEL run by cel-python; and the requests the tests send.
"""

import json
import os
from collections.abc import Mapping
from typing import Any

from celpy import celtypes
from celpy.adapter import json_to_cel

from function.policy import selects
from tests.deploy.install import find
from tests.schemas import compile_rule
from tests.support import (
    NAMESPACE,
)

COMPOSITION_POLICY = "workspacesandbox-composition"
COMPOSITION_MESSAGE = (
    "the platform chooses the Composition for WorkspaceSandboxes; remove spec.crossplane.{}"
)
COMPOSITION_REVISION = "workspacesandbox-3f9c2a1"


def evaluate(expression: str, activation: dict[str, Any]) -> bool:
    result = compile_rule(expression).runner.evaluate(activation)
    assert isinstance(result, celtypes.BoolType), expression
    return bool(result)


def sandbox_request(
    operation: str, username: str, namespace: str = NAMESPACE, name: str = "alice-api"
) -> dict[str, Any]:
    """An admission request by `username` to write the WorkspaceSandbox `namespace/name`."""
    return {
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "kind": {
            "group": "sandbox.cozystack.io",
            "version": "v1alpha1",
            "kind": "WorkspaceSandbox",
        },
        "resource": {
            "group": "sandbox.cozystack.io",
            "version": "v1alpha1",
            "resource": "workspacesandboxes",
        },
        "namespace": namespace,
        "name": name,
    }


def matches_rule(rule: Mapping[str, Any], request: Mapping[str, Any]) -> bool:
    """Whether a policy's resourceRule covers a request, as the API server's rule matcher has
    it: each entry is "resource/subresource", either part "*"; "*" alone covers every resource
    and no subresource, "*/*" every resource and every subresource."""
    resource = request["resource"]
    sub = request.get("subResource", "")
    scope = "Namespaced" if request.get("namespace") else "Cluster"

    def covers(entry: str) -> bool:
        res, _, part = entry.partition("/")
        return res in {"*", resource["resource"]} and part in {"*", sub}

    return (
        bool({request["operation"], "*"} & set(rule["operations"]))
        and bool({resource["group"], "*"} & set(rule["apiGroups"]))
        and (resource["version"] in rule["apiVersions"] or rule["apiVersions"] == ["*"])
        and any(covers(entry) for entry in rule["resources"])
        and rule.get("scope", "*") in {"*", scope}
    )


def namespace_object(
    request: Mapping[str, Any], labels: Mapping[str, str]
) -> dict[str, Any] | None:
    """The namespaceObject a policy sees: the request's namespace, none for a cluster-scoped
    request or a Namespace itself (whose requests may name it as their namespace)."""
    kind = request["kind"]
    if not request.get("namespace") or (kind["group"], kind["kind"]) == ("", "Namespace"):
        return None
    meta = {"name": request["namespace"], "labels": dict(labels)}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


RECORD = "WORKSPACE_SANDBOX_RECORD_VERDICTS"
"""A file each verdict is appended to as one JSON line: the cases the control-plane tier asks
the real API server (tests/control_plane/test_admission.py)."""


def verdict(
    policy: str,
    request: Mapping[str, Any],
    obj: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None = None,
    namespace_labels: Mapping[str, str] | None = None,
) -> str | list[str]:
    """A policy's answer to a request, as the API server reaches it.

    "unmatched" when its matchConstraints leave the request out (a namespaceSelector applies to
    namespaced requests only), "exempt" when a match condition does, otherwise the messages of
    the failing validations ([] is admitted).
    """
    answer = _verdict(policy, request, obj, old, namespace_labels)
    if record := os.environ.get(RECORD):
        case = {"policy": policy, "request": request, "object": obj, "oldObject": old}
        case |= {"namespaceLabels": namespace_labels, "verdict": answer}
        with open(record, "a", encoding="utf-8") as out:
            out.write(json.dumps(case, sort_keys=True) + "\n")
    return answer


def _verdict(
    policy: str,
    request: Mapping[str, Any],
    obj: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
    namespace_labels: Mapping[str, str] | None,
) -> str | list[str]:
    spec = find("ValidatingAdmissionPolicy", policy)["spec"]
    constraints = spec["matchConstraints"]
    if not any(matches_rule(rule, request) for rule in constraints["resourceRules"]):
        return "unmatched"
    labels = namespace_labels or {"kubernetes.io/metadata.name": request.get("namespace", "")}
    if request.get("namespace") and not selects(constraints.get("namespaceSelector", {}), labels):
        return "unmatched"
    activation = {
        "object": json_to_cel(obj),
        "oldObject": json_to_cel(old),
        "request": json_to_cel(request),
        "params": json_to_cel(None),
        "namespaceObject": json_to_cel(namespace_object(request, labels)),
    }
    if not all(evaluate(c["expression"], activation) for c in spec.get("matchConditions", [])):
        return "exempt"
    # Variables in order, each seeing the ones before it (the API server evaluates them lazily;
    # the policies guard every one, so evaluating them all gives the same answers).
    variables: dict[celtypes.StringType, Any] = {}
    for variable in spec.get("variables", []):
        activation["variables"] = celtypes.MapType(variables)
        rule = compile_rule(variable["expression"])
        variables[celtypes.StringType(variable["name"])] = rule.runner.evaluate(activation)
    activation["variables"] = celtypes.MapType(variables)
    return [v["message"] for v in spec["validations"] if not evaluate(v["expression"], activation)]


PLATFORM_CHOICE = {
    "compositionRef": {"name": "workspacesandbox"},
    "compositionRevisionRef": {"name": COMPOSITION_REVISION},
}
PROVIDER_KINDS = {
    "objects": "Object",
    "providerconfigs": "ProviderConfig",
    "observedobjectcollections": "ObservedObjectCollection",
    "providerconfigusages": "ProviderConfigUsage",
    "clusterproviderconfigs": "ClusterProviderConfig",
}


def provider_request(
    operation: str,
    username: str,
    resource: str = "objects",
    *,
    namespace: str = NAMESPACE,
    group: str = "kubernetes.m.crossplane.io",
    sub_resource: str = "",
) -> dict[str, Any]:
    """An admission request for a provider-kubernetes kind ("" namespace: cluster-scoped)."""
    request: dict[str, Any] = {
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "kind": {"group": group, "version": "v1alpha1", "kind": PROVIDER_KINDS[resource]},
        "resource": {"group": group, "version": "v1alpha1", "resource": resource},
        "name": "alice-api-plane-access",
    }
    if namespace:
        request["namespace"] = namespace
    if sub_resource:
        request["subResource"] = sub_resource
    return request
