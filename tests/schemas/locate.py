"""Where the schemas come from: vendored CRDs and kubernetes-validate's bundled schemas."""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from referencing import Registry, Resource

from tests.schemas.vocabulary import DEFS_URI, KUBERNETES_VERSION


def crds_root() -> Path:
    return Path(__file__).resolve().parents[2] / "schemas" / "upstream"


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


@functools.cache
def yaml_documents(path: Path) -> tuple[Any, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open(encoding="utf-8") as stream:
        return tuple(doc for doc in yaml.load_all(stream, Loader=loader) if doc)


def served_version(crd: Mapping[str, Any], version: str) -> Mapping[str, Any]:
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version and entry.get("served"):
            return entry  # type: ignore[no-any-return]
    raise LookupError(f"{crd['spec']['names']['kind']} does not serve version {version!r}")


@functools.cache
def crd_for(group: str, kind: str, version: str) -> Mapping[str, Any]:
    root = crds_root()
    # Upstream CRD files are named <group>_<plural>.yaml; only those can hold the group's CRDs.
    found = [
        (path, doc)
        for path in sorted(root.rglob(f"{group}_*.yaml"))
        for doc in yaml_documents(path)
        if _is_crd_for(doc, group, kind, version)
    ]
    if not found:
        api_version = f"{group}/{version}" if group else version
        raise LookupError(f"no CRD under {root} serves {api_version} {kind}")
    if len(found) > 1:
        places = ", ".join(str(path.relative_to(root)) for path, _ in found)
        raise LookupError(f"several vendored CRDs define it; keep one release: {places}")
    return found[0][1]


def _is_crd_for(doc: Any, group: str, kind: str, version: str) -> bool:
    if not isinstance(doc, Mapping) or doc.get("kind") != "CustomResourceDefinition":
        return False
    spec = doc["spec"]
    return (
        spec["group"] == group
        and spec["names"]["kind"] == kind
        and any(v["name"] == version and v.get("served") for v in spec["versions"])
    )


@functools.cache
def k8s_schema_dir() -> Path:
    base = Path(str(importlib.resources.files("kubernetes_validate"))) / "kubernetes-json-schema"
    shipped: dict[tuple[int, int], Path] = {}
    for entry in base.iterdir():
        match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+-local-strict", entry.name)
        if match:
            shipped[(int(match[1]), int(match[2]))] = entry
    # Prefer the newest release not newer than the target; else the oldest shipped.
    older = [v for v in shipped if v <= KUBERNETES_VERSION]
    return shipped[max(older)] if older else shipped[min(shipped)]


@functools.cache
def k8s_registry() -> Registry[Any]:
    definitions = json.loads((k8s_schema_dir() / "_definitions.json").read_text("utf-8"))
    registry: Registry[Any] = Registry().with_resource(
        DEFS_URI, Resource.from_contents(definitions)
    )
    return registry
