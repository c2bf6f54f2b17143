"""Label selectors: `matchLabels` and `matchExpressions`, as Kubernetes and Cilium read them.

One matcher for the verdict evaluator (endpoint, pod and namespace selectors) and for the tests
that play the API server's admission (a policy's `namespaceSelector`). Keys may carry a Cilium
label source: `k8s:` and `any:` both match Kubernetes labels, `reserved:` stays as written.
"""

from collections.abc import Mapping
from typing import Any


class NotModelledError(ValueError):
    """A policy uses a feature the evaluator does not model; no verdict would be trustworthy."""


def label_key(key: str) -> str:
    """The label a selector key names, without a `k8s:` or `any:` source."""
    for source in ("k8s:", "any:"):
        if key.startswith(source):
            return key[len(source) :]
    return key


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Kubernetes label-selector semantics; NotIn and DoesNotExist match an absent key."""
    for raw, value in (selector.get("matchLabels") or {}).items():
        if labels.get(label_key(raw)) != ("" if value is None else value):
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = label_key(expression["key"]), expression["operator"]
        values = expression.get("values") or []
        if operator == "In":
            ok = key in labels and labels[key] in values
        elif operator == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif operator in ("Exists", "DoesNotExist"):
            ok = (key in labels) == (operator == "Exists")
        else:
            raise NotModelledError(f"label selector operator {operator!r}")
        if not ok:
            return False
    return True


def selector_keys(selector: Mapping[str, Any]) -> set[str]:
    """Every label key the selector constrains."""
    keys = {label_key(k) for k in selector.get("matchLabels") or {}}
    return keys | {label_key(e["key"]) for e in selector.get("matchExpressions") or []}


def show(selector: Mapping[str, Any]) -> str:
    """The selector on one line: `{app=api, tier NotIn (db)}`."""
    parts = [f"{label_key(k)}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for e in selector.get("matchExpressions") or []:
        values = f" ({','.join(e.get('values') or [])})" if e.get("values") else ""
        parts.append(f"{label_key(e['key'])} {e['operator']}{values}")
    return "{" + ", ".join(parts) + "}"
