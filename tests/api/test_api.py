"""The shipped APIs against the models that read them, and against the real schemas.

The XRD (tenant API) and the input CRD (platform API) are written by hand, and the pydantic
models in function/model/ are the source of truth. These tests walk both together, so a field,
enum value, bound, default or required flag added on one side only fails here.
"""

import copy
import re
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from ipaddress import IPv4Address, IPv4Network, IPv6Network
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import pytest
import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError, create_model
from pydantic.fields import FieldInfo

from function.errors import FieldError
from function.model import parse
from function.model.names import DnsSubdomain, LabelKey, LabelValue, PortName, SnapshotName
from function.model.platform import (
    DEFAULT_PYTHON,
    USER_WRITABLE,
    Image,
    Interpreter,
    Placement,
    Runtime,
    SandboxPlatform,
)
from function.model.quantity import parse_quantity
from function.model.spec import (
    MAX_ALLOW_RULES,
    MAX_PORTS,
    MAX_SNAPSHOTS,
    MAX_SSH_KEYS,
    SshKey,
    WorkspaceSandbox,
    WorkspaceSandboxSpec,
)
from function.model.types import Bytes, Cidr, Cpu, IpAddress, TenantBytes, Time
from tests import schemas

ROOT = Path(__file__).resolve().parents[2]
XRD = yaml.safe_load((ROOT / "apis" / "workspacesandbox" / "definition.yaml").read_text())
INPUT_CRD = yaml.safe_load(
    (ROOT / "package" / "input" / "sandbox.fn.cozystack.io_sandboxplatforms.yaml").read_text()
)
COMPOSITION = yaml.safe_load(
    (ROOT / "function" / "compositions" / "workspacesandbox.yaml").read_text()
)
PACKAGE = yaml.safe_load((ROOT / "package" / "crossplane.yaml").read_text())
EXAMPLES = sorted((ROOT / "examples").glob("*/xr.yaml"))

XR_SCHEMA = XRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
INPUT_SCHEMA = INPUT_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
STEP_INPUT = COMPOSITION["spec"]["pipeline"][0]["input"]

# Fields one side has for reasons of its own: Crossplane adds spec.crossplane to every v2 XR,
# and every Kubernetes object has apiVersion, kind and metadata.
IGNORED = {"spec.crossplane", "input.apiVersion", "input.kind", "input.metadata"}


# --------------------------------------------------------------------------- walking the models


@dataclass(frozen=True)
class Shape:
    """What a model annotation means for a schema: its kind, element type and constraints."""

    kind: Literal["model", "list", "map", "scalar"]
    base: Any = None  # the model class, or the scalar type(s)
    item: "Shape | None" = None  # list items or map values
    enum: tuple[object, ...] | None = None
    bounds: Mapping[str, Any] = field(default_factory=dict)


_BOUNDS = {
    annotated_types.MaxLen: ("max_length", "max_length"),
    annotated_types.MinLen: ("min_length", "min_length"),
    annotated_types.Ge: ("ge", "ge"),
    annotated_types.Le: ("le", "le"),
}


def _bounds(metadata: tuple[Any, ...]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in metadata:
        if isinstance(item, FieldInfo):
            found |= _bounds(tuple(item.metadata))
        elif isinstance(item, annotated_types.GroupedMetadata):
            found |= _bounds(tuple(item))
        elif type(item) in _BOUNDS:
            key, attr = _BOUNDS[type(item)]
            found[key] = getattr(item, attr)
    return found


_UNIONS = (Union, types.UnionType)
# tuple[X, ...] is a list of X; dict[K, V] a map of V.
_CONTAINERS: Mapping[Any, tuple[Literal["list", "map"], int]] = {
    tuple: ("list", 0),
    dict: ("map", 1),
}


def shape(annotation: Any, metadata: tuple[Any, ...] = ()) -> Shape:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return shape(args[0], (*metadata, *annotation.__metadata__))
    # X | None is an optional X; IPv4Network | IPv6Network is one string in the schema.
    arms = tuple(a for a in args if a is not type(None)) if origin in _UNIONS else ()
    if len(arms) == 1:
        return shape(arms[0], metadata)
    if origin in _CONTAINERS:
        kind, index = _CONTAINERS[origin]
        return Shape(kind, item=shape(args[index]), bounds=_bounds(metadata))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return Shape("model", annotation)
    if origin is Literal:
        return Shape("scalar", str, enum=args)
    return Shape("scalar", arms or annotation, bounds=_bounds(metadata))


Level = tuple[str, Shape, Mapping[str, Any]]


@dataclass(frozen=True)
class FieldNode:
    """One model field next to its schema node (None when the schema lacks it)."""

    path: str
    info: FieldInfo
    shape: Shape
    node: Mapping[str, Any] | None

    def levels(self) -> Iterator[Level]:
        """The field itself, then its list items or map values, down to the element."""
        path, s, node = self.path, self.shape, self.node or {}
        while True:
            yield path, s, node
            if s.item is None:
                return
            is_list = s.kind == "list"
            path += "[]" if is_list else "{}"
            s, node = s.item, node.get("items" if is_list else "additionalProperties") or {}


def models(
    model: type[BaseModel], node: Mapping[str, Any], path: str
) -> Iterator[tuple[type[BaseModel], Mapping[str, Any], str]]:
    """Every model reachable from `model`, with its schema node and path."""
    yield model, node, path
    for f in fields(model, node, path):
        if f.node is None:
            continue
        inner_path, inner, inner_node = list(f.levels())[-1]
        if inner.kind == "model":
            yield from models(inner.base, inner_node, inner_path)


def fields(model: type[BaseModel], node: Mapping[str, Any], path: str) -> Iterator[FieldNode]:
    properties = node.get("properties") or {}
    for name, info in model.model_fields.items():
        alias = info.alias or name
        if f"{path}.{alias}" in IGNORED:
            continue
        yield FieldNode(
            f"{path}.{alias}",
            info,
            shape(info.annotation, tuple(info.metadata)),
            properties.get(alias),
        )


def all_fields(model: type[BaseModel], node: Mapping[str, Any], path: str) -> list[FieldNode]:
    # A field the schema lacks is reported by the drift test; the other tests compare the rest.
    found = (f for m, n, p in models(model, node, path) for f in fields(m, n, p))
    return [f for f in found if f.node is not None]


def drift(model: type[BaseModel], node: Mapping[str, Any], path: str) -> list[str]:
    """Where the schema's property names and the model's aliases differ, level by level."""
    problems = []
    for sub, sub_node, sub_path in models(model, node, path):
        aliases = {f.path.rsplit(".", 1)[1] for f in fields(sub, sub_node, sub_path)}
        props = {p for p in sub_node.get("properties") or {} if f"{sub_path}.{p}" not in IGNORED}
        if only := sorted(props - aliases):
            problems.append(f"{sub_path}: only in the schema: {', '.join(only)}")
        if only := sorted(aliases - props):
            problems.append(f"{sub_path}: only in the model: {', '.join(only)}")
    return problems


XR_SPEC = XR_SCHEMA["properties"]["spec"]
FIELDS = [
    *all_fields(WorkspaceSandboxSpec, XR_SPEC, "spec"),
    *all_fields(SandboxPlatform, INPUT_SCHEMA, "input"),
]
PAIRS = [
    *models(WorkspaceSandboxSpec, XR_SPEC, "spec"),
    *models(SandboxPlatform, INPUT_SCHEMA, "input"),
]


def node_at(schema: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """A schema node by path: `spec.ports[].name`, `presets{}.runtime`."""
    node = schema
    for part in path.split("."):
        name = part.rstrip("[]{}")
        if name:
            node = node["properties"][name]
        for marker in part[len(name) :].replace("][", "] [").split():
            node = node["items" if marker == "[]" else "additionalProperties"]
    return node


# --------------------------------------------------------------------------- drift


@pytest.mark.parametrize(
    ("model", "schema", "root"),
    [
        pytest.param(WorkspaceSandboxSpec, XR_SPEC, "spec", id="xrd-spec-is-the-tenant-model"),
        pytest.param(SandboxPlatform, INPUT_SCHEMA, "input", id="input-crd-is-the-platform-model"),
    ],
)
def test_schema_properties_are_the_model_aliases(
    model: type[BaseModel], schema: Mapping[str, Any], root: str
) -> None:
    assert drift(model, schema, root) == []


def test_drift_is_caught_on_either_side() -> None:
    schema = copy.deepcopy(XR_SPEC)
    schema["properties"]["network"]["properties"]["proxy"] = {"type": "string"}
    assert drift(WorkspaceSandboxSpec, schema, "spec") == [
        "spec.network: only in the schema: proxy"
    ]

    grown = create_model("Grown", __base__=WorkspaceSandboxSpec, gpu_count=(int, 0))
    assert drift(grown, XR_SPEC, "spec") == ["spec: only in the model: gpuCount"]


@pytest.mark.parametrize(("model", "node", "path"), PAIRS, ids=[p for _, _, p in PAIRS])
def test_required_fields_match(model: type[BaseModel], node: Mapping[str, Any], path: str) -> None:
    required = {f.path.rsplit(".", 1)[1] for f in fields(model, node, path) if f.info.is_required()}
    declared = {r for r in node.get("required", []) if f"{path}.{r}" not in IGNORED}
    assert declared == required


# --------------------------------------------------------------------------- per field

_TYPES: list[tuple[Any, Mapping[str, Any]]] = [
    (str, {"type": "string"}),
    (int, {"type": "integer"}),
    (bool, {"type": "boolean"}),
    (Decimal, {"x-kubernetes-int-or-string": True}),
    (datetime, {"type": "string", "format": "date-time"}),
    (timedelta, {"type": "string"}),
    (IPv4Network, {"type": "string", "format": "cidr"}),
    (IPv6Network, {"type": "string", "format": "cidr"}),
    (IPv4Address, {"type": "string"}),
]


def _expected_type(s: Shape) -> Mapping[str, Any]:
    if s.kind == "model":
        return {"type": "object"}
    if s.kind == "list":
        return {"type": "array"}
    if s.kind == "map":
        return {"type": "object"}
    base = s.base[0] if isinstance(s.base, tuple) else s.base
    return next(want for kind, want in _TYPES if base is kind)


@pytest.mark.parametrize("f", FIELDS, ids=[f.path for f in FIELDS])
def test_types_match(f: FieldNode) -> None:
    for path, s, node in f.levels():
        want = _expected_type(s)
        assert {k: node.get(k) for k in want} == want, path


@pytest.mark.parametrize("f", FIELDS, ids=[f.path for f in FIELDS])
def test_enums_are_the_model_literals(f: FieldNode) -> None:
    for path, s, node in f.levels():
        assert node.get("enum") == (list(s.enum) if s.enum else None), path


def _bound_names(s: Shape) -> dict[str, str]:
    """The model bounds a shape can carry, and the schema keyword for each."""
    if s.kind == "list":
        return {"max_length": "maxItems", "min_length": "minItems"}
    if s.kind == "map":
        return {"max_length": "maxProperties", "min_length": "minProperties"}
    if s.base is int:
        return {"ge": "minimum", "le": "maximum"}
    if s.base is str and s.enum is None:
        names = {"min_length": "minLength"}
        # Every XR string has a maxLength so that CEL cost estimates stay bounded; where the
        # model sets no limit, the schema's is not compared.
        if "max_length" in s.bounds:
            names["max_length"] = "maxLength"
        return names
    return {}


@pytest.mark.parametrize("f", FIELDS, ids=[f.path for f in FIELDS])
def test_bounds_match(f: FieldNode) -> None:
    for path, s, node in f.levels():
        names = _bound_names(s)
        declared = {key: node[name] for key, name in names.items() if name in node}
        assert declared == {k: v for k, v in s.bounds.items() if k in names}, path


@pytest.mark.parametrize("f", FIELDS, ids=[f.path for f in FIELDS])
def test_defaults_match(f: FieldNode) -> None:
    default = None if f.info.is_required() else f.info.get_default(call_default_factory=True)
    node = f.node or {}
    if default is None or (not isinstance(default, bool | int) and not default):
        # Empty defaults stay out of the schema, so objects aren't stored with empty fields.
        assert "default" not in node
    elif isinstance(default, BaseModel):
        # A nested model default is an empty object: its own fields default themselves.
        assert node.get("default", {}) == {}
    elif isinstance(default, Decimal):
        # Quantities: the schema writes them for people ("1Gi"), the model holds the value.
        assert parse_quantity(node.get("default")) == default
    else:
        assert node.get("default") == TypeAdapter(f.info.annotation).dump_python(
            default, mode="json"
        )


@pytest.mark.parametrize(
    ("path", "limit"),
    [
        pytest.param("spec.network.allow", MAX_ALLOW_RULES, id="allow-rules"),
        pytest.param("spec.ports", MAX_PORTS, id="ports"),
        pytest.param("spec.snapshots", MAX_SNAPSHOTS, id="snapshots"),
        pytest.param("spec.ssh.authorizedKeys", MAX_SSH_KEYS, id="ssh-keys"),
        pytest.param("status.snapshots", MAX_SNAPSHOTS, id="status-has-one-entry-per-snapshot"),
    ],
)
def test_list_limits_are_the_model_constants(path: str, limit: int) -> None:
    assert node_at(XR_SCHEMA, path)["maxItems"] == limit


@pytest.mark.parametrize(
    ("path", "literal"),
    [
        pytest.param("status.runtime", Runtime, id="status-runtime"),
        pytest.param("status.placement", Placement, id="status-placement"),
    ],
)
def test_status_enums_are_the_platform_literals(path: str, literal: Any) -> None:
    assert node_at(XR_SCHEMA, path)["enum"] == list(get_args(literal))


@pytest.mark.parametrize("path", ["spec.ports", "spec.snapshots", "status.snapshots"])
def test_named_entries_are_list_maps_keyed_by_name(path: str) -> None:
    # The API server then refuses two entries with one name, and server-side apply merges
    # entries by name instead of replacing the whole list.
    node = node_at(XR_SCHEMA, path)
    assert node["x-kubernetes-list-type"] == "map"
    assert node["x-kubernetes-list-map-keys"] == ["name"]


def _strings(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if node.get("type") == "string" or node.get("x-kubernetes-int-or-string"):
        yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from _strings(child, f"{path}.{name}")
    if isinstance(node.get("items"), Mapping):
        yield from _strings(node["items"], f"{path}[]")


def test_every_xr_string_is_bounded_for_cel_cost() -> None:
    unbounded = [p for p, n in _strings(XR_SCHEMA, "") if "maxLength" not in n and "enum" not in n]
    assert unbounded == []


# --------------------------------------------------------------------------- values


_KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIJ59QzKAgaweWutMQQYQMAhdmOo8JHFmw4Y3BLQLyb4k"
_DIGEST = "sha256:" + "0" * 64
_OCI = Image.model_fields["oci"].annotation


@pytest.mark.parametrize(
    ("schema", "path", "model_type", "value", "valid"),
    [
        pytest.param(XR_SCHEMA, "spec.resources.memory", Bytes, "4Gi", True, id="binary-size"),
        pytest.param(XR_SCHEMA, "spec.resources.memory", Bytes, "4G", True, id="decimal-size"),
        pytest.param(XR_SCHEMA, "spec.resources.memory", Bytes, 2**32, True, id="size-as-integer"),
        pytest.param(
            XR_SCHEMA, "spec.resources.memory", TenantBytes, "1.5Gi", False, id="fraction-gi"
        ),
        pytest.param(
            XR_SCHEMA, "spec.resources.memory", TenantBytes, "1.5G", True, id="fraction-g"
        ),
        pytest.param(XR_SCHEMA, "spec.resources.memory", Bytes, "0", False, id="zero-size"),
        pytest.param(XR_SCHEMA, "spec.resources.memory", Bytes, "0.0Gi", False, id="zero-gi"),
        pytest.param(XR_SCHEMA, "spec.resources.memory", Bytes, 0, False, id="zero-integer"),
        pytest.param(XR_SCHEMA, "spec.resources.memory", Bytes, "-1Gi", False, id="negative"),
        pytest.param(XR_SCHEMA, "spec.resources.memory", Bytes, "+1Gi", False, id="signed"),
        pytest.param(XR_SCHEMA, "spec.resources.memory", Bytes, "1e9", False, id="exponent"),
        pytest.param(XR_SCHEMA, "spec.resources.memory", Bytes, "4GB", False, id="not-a-suffix"),
        pytest.param(XR_SCHEMA, "spec.resources.memory", Bytes, "4gi", False, id="lowercase-gi"),
        pytest.param(XR_SCHEMA, "spec.resources.memory", Bytes, "", False, id="empty-size"),
        pytest.param(XR_SCHEMA, "spec.resources.cpu", Cpu, "1500m", True, id="millicores"),
        pytest.param(XR_SCHEMA, "spec.resources.cpu", Cpu, ".5", True, id="leading-dot"),
        pytest.param(XR_SCHEMA, "spec.resources.cpu", Cpu, "2.", True, id="trailing-dot"),
        pytest.param(XR_SCHEMA, "spec.resources.cpu", Cpu, 2, True, id="cores-as-integer"),
        pytest.param(XR_SCHEMA, "spec.ports[].name", PortName, "preview", True, id="port-name"),
        pytest.param(XR_SCHEMA, "spec.ports[].name", PortName, "1-a", True, id="digit-first"),
        pytest.param(XR_SCHEMA, "spec.ports[].name", PortName, "8080", False, id="no-letter"),
        pytest.param(XR_SCHEMA, "spec.ports[].name", PortName, "a--b", False, id="double-dash"),
        pytest.param(XR_SCHEMA, "spec.ports[].name", PortName, "a-", False, id="trailing-dash"),
        pytest.param(XR_SCHEMA, "spec.ports[].name", PortName, "a" * 16, False, id="long-name"),
        pytest.param(XR_SCHEMA, "spec.snapshots[].name", SnapshotName, "a" * 40, True, id="snap"),
        pytest.param(
            XR_SCHEMA, "spec.snapshots[].name", SnapshotName, "a" * 41, False, id="snap-too-long"
        ),
        pytest.param(
            XR_SCHEMA, "spec.snapshots[].name", SnapshotName, "Nightly", False, id="snap-upper"
        ),
        pytest.param(
            XR_SCHEMA, "spec.restoreFrom.snapshot", DnsSubdomain, "a.b-c", True, id="subdomain"
        ),
        pytest.param(
            XR_SCHEMA, "spec.restoreFrom.snapshot", DnsSubdomain, "a..b", False, id="empty-label"
        ),
        pytest.param(
            XR_SCHEMA, "spec.lifetime.suspendAt", Time, "2026-12-01T18:00:00Z", True, id="utc"
        ),
        pytest.param(
            XR_SCHEMA,
            "spec.lifetime.suspendAt",
            Time,
            "2026-12-01T18:00:00.123456789+02:00",
            True,
            id="nanoseconds-and-offset",
        ),
        pytest.param(
            XR_SCHEMA, "spec.lifetime.suspendAt", Time, "2026-12-01T18:00:00", False, id="no-zone"
        ),
        pytest.param(
            XR_SCHEMA, "spec.lifetime.suspendAt", Time, "2026-12-01 18:00Z", False, id="space"
        ),
        pytest.param(
            XR_SCHEMA, "spec.lifetime.suspendAt", Time, "2026-13-01T18:00:00Z", False, id="month"
        ),
        pytest.param(
            XR_SCHEMA,
            "spec.ssh.authorizedKeys[]",
            SshKey,
            f"ssh-ed25519 {_KEY} alice@laptop",
            True,
            id="ssh-key",
        ),
        pytest.param(
            XR_SCHEMA, "spec.ssh.authorizedKeys[]", SshKey, f"ssh-dss {_KEY}", False, id="ssh-dss"
        ),
        pytest.param(
            XR_SCHEMA,
            "spec.ssh.authorizedKeys[]",
            SshKey,
            f"ssh-ed25519 {_KEY} a\nssh-ed25519 {_KEY} b",
            False,
            id="ssh-two-lines",
        ),
        pytest.param(
            XR_SCHEMA,
            "spec.ssh.authorizedKeys[]",
            SshKey,
            f"ssh-ed25519 {_KEY} {'c' * 101}",
            False,
            id="ssh-long-comment",
        ),
        pytest.param(
            XR_SCHEMA, "spec.network.allow[].cidr", Cidr, "2001:db9::/32", True, id="cidr-v6"
        ),
        pytest.param(XR_SCHEMA, "spec.network.allow[].cidr", Cidr, "pypi", False, id="not-cidr"),
        pytest.param(
            INPUT_SCHEMA,
            "images{}.oci",
            _OCI,
            f"ghcr.io/acme/dev:1.0@{_DIGEST}",
            True,
            id="oci-tag-and-digest",
        ),
        pytest.param(
            INPUT_SCHEMA, "images{}.oci", _OCI, "ghcr.io/acme/dev:1.0", False, id="oci-unpinned"
        ),
        pytest.param(
            INPUT_SCHEMA,
            "network.resolvers[]",
            IpAddress,
            "2620:fe::fe",
            True,
            id="resolver-v6",
        ),
        pytest.param(
            INPUT_SCHEMA,
            "network.resolvers[]",
            IpAddress,
            "dns.quad9.net",
            False,
            id="resolver-name",
        ),
        pytest.param(
            INPUT_SCHEMA,
            "presets{}.scheduling.tolerations[].key",
            LabelKey,
            "node-role.kubernetes.io/sandbox",
            True,
            id="label-key-with-prefix",
        ),
        pytest.param(
            INPUT_SCHEMA,
            "presets{}.scheduling.tolerations[].key",
            LabelKey,
            "a/b/c",
            False,
            id="label-key-two-slashes",
        ),
        pytest.param(
            INPUT_SCHEMA,
            "presets{}.scheduling.tolerations[].key",
            LabelKey,
            "k" * 64,
            False,
            id="label-key-name-too-long",
        ),
        pytest.param(
            INPUT_SCHEMA, "gateway.podLabels{}", LabelValue, "", True, id="empty-label-value"
        ),
        pytest.param(
            INPUT_SCHEMA, "gateway.podLabels{}", LabelValue, "-x", False, id="label-value-dash"
        ),
        pytest.param(
            INPUT_SCHEMA, "agent.python", Interpreter, "/usr/bin/python3", True, id="python-default"
        ),
        pytest.param(
            INPUT_SCHEMA,
            "agent.python",
            Interpreter,
            "/opt/py-3.12/bin/python3.12",
            True,
            id="python-elsewhere",
        ),
        pytest.param(
            INPUT_SCHEMA,
            "agent.python",
            Interpreter,
            "/.venv/bin/python",
            True,
            id="python-hidden-part",
        ),
        pytest.param(
            INPUT_SCHEMA,
            "agent.python",
            Interpreter,
            "/workspacefoo/python3",
            True,
            id="python-beside-the-workspace",
        ),
        pytest.param(INPUT_SCHEMA, "agent.python", Interpreter, "python3", False, id="python-bare"),
        pytest.param(
            INPUT_SCHEMA,
            "agent.python",
            Interpreter,
            "/usr/../workspace/python3",
            False,
            id="python-dot-dot",
        ),
        pytest.param(
            INPUT_SCHEMA,
            "agent.python",
            Interpreter,
            "/usr//bin/python3",
            False,
            id="python-empty-part",
        ),
        pytest.param(
            INPUT_SCHEMA,
            "agent.python",
            Interpreter,
            "/usr/bin/python3 -S",
            False,
            id="python-with-argument",
        ),
        pytest.param(
            INPUT_SCHEMA,
            "agent.python",
            Interpreter,
            "/workspace/.local/bin/python3",
            False,
            id="python-in-the-workspace",
        ),
        pytest.param(
            INPUT_SCHEMA,
            "agent.python",
            Interpreter,
            "/home/user/python3",
            False,
            id="python-in-a-home",
        ),
        *(
            pytest.param(INPUT_SCHEMA, "agent.python", Interpreter, f"{p}/x", False, id=f"in-{p}")
            for p in USER_WRITABLE
        ),
        pytest.param(
            INPUT_SCHEMA, "agent.python", Interpreter, "/" + "p" * 255, False, id="python-too-long"
        ),
    ],
)
def test_schema_and_model_agree_on_values(
    schema: Mapping[str, Any], path: str, model_type: Any, value: Any, *, valid: bool
) -> None:
    assert (schemas.validate_against(node_at(schema, path), value, path=path) == []) is valid
    try:
        TypeAdapter(model_type).validate_python(value)
    except ValidationError:
        assert not valid
    else:
        assert valid


def test_the_input_crd_refuses_the_interpreter_where_the_model_does() -> None:
    (rule,) = node_at(INPUT_SCHEMA, "agent.python")["x-kubernetes-validations"]
    listed = re.search(r"\[([^\]]*)\]", rule["rule"])
    assert listed
    assert tuple(p.strip(" '") for p in listed[1].split(",")) == USER_WRITABLE
    assert node_at(INPUT_SCHEMA, "agent.python")["default"] == DEFAULT_PYTHON


@pytest.mark.parametrize(
    ("fqdn", "valid"),
    [
        pytest.param("pypi.org", True, id="host"),
        pytest.param("*.pypi.org", True, id="subdomain-wildcard"),
        pytest.param("*", False, id="everything-wildcard"),
        pytest.param("pypi.*", False, id="wildcard-not-leading"),
        pytest.param("PyPI.org", False, id="uppercase"),
        pytest.param("https://pypi.org", False, id="url"),
        pytest.param("pypi.org.", False, id="trailing-dot"),
    ],
)
def test_fqdn_shapes(fqdn: str, *, valid: bool) -> None:
    node = node_at(XR_SCHEMA, "spec.network.allow[].fqdn")
    assert (schemas.validate_against(node, fqdn, path="fqdn") == []) is valid


# --------------------------------------------------------------------------- shipped documents


def test_composition_input_parses_with_the_platform_model() -> None:
    platform = parse(SandboxPlatform, STEP_INPUT, "input")
    assert platform.default_preset in platform.presets


def test_composition_input_validates_against_the_input_crd() -> None:
    assert schemas.validate_crd_object(INPUT_CRD, STEP_INPUT) == []


AGENT_EXAMPLE = yaml.safe_load((ROOT / "examples" / "composition-with-agent.yaml").read_text())


def test_the_agent_example_is_the_shipped_composition_with_the_agent_set() -> None:
    example = copy.deepcopy(AGENT_EXAMPLE)
    step_input = example["spec"]["pipeline"][0]["input"]
    assert set(step_input.pop("agent")) == {"image"}
    assert example["metadata"].pop("name") == "workspacesandbox-with-agent"
    shipped = copy.deepcopy(COMPOSITION)
    shipped["metadata"].pop("name")
    assert example == shipped


def test_the_agent_example_validates_against_the_input_crd() -> None:
    step_input = AGENT_EXAMPLE["spec"]["pipeline"][0]["input"]
    assert schemas.validate_crd_object(INPUT_CRD, step_input) == []
    assert schemas.validate(AGENT_EXAMPLE) == []
    assert parse(SandboxPlatform, step_input, "input").agent is not None


@pytest.mark.parametrize(
    "manifest",
    [
        pytest.param(XRD, id="xrd"),
        pytest.param(COMPOSITION, id="composition"),
        pytest.param(INPUT_CRD, id="input-crd"),
        pytest.param(
            yaml.safe_load((ROOT / "examples" / "functions.yaml").read_text()),
            id="function-for-crossplane-render",
        ),
    ],
)
def test_shipped_manifests_validate(manifest: Mapping[str, Any]) -> None:
    assert schemas.validate(manifest) == []


def test_composition_serves_the_xrd() -> None:
    ref = COMPOSITION["spec"]["compositeTypeRef"]
    assert ref == {
        "apiVersion": f"{XRD['spec']['group']}/{XRD['spec']['versions'][0]['name']}",
        "kind": XRD["spec"]["names"]["kind"],
    }
    assert XRD["spec"]["defaultCompositionRef"] == {"name": COMPOSITION["metadata"]["name"]}
    assert COMPOSITION["spec"]["pipeline"][0]["functionRef"]["name"] == PACKAGE["metadata"]["name"]
    assert STEP_INPUT["apiVersion"] == f"{INPUT_CRD['spec']['group']}/v1beta1"


def test_package_metadata() -> None:
    # meta.pkg.crossplane.io kinds are read by the package manager and have no CRD to check.
    assert PACKAGE["apiVersion"] == "meta.pkg.crossplane.io/v1"
    assert PACKAGE["kind"] == "Function"
    assert PACKAGE["spec"]["crossplane"]["version"] == ">=v2.0.0"
    assert PACKAGE["spec"]["capabilities"] == ["composition"]
    assert set(PACKAGE["metadata"]["annotations"]) >= {
        f"meta.crossplane.io/{k}" for k in ("maintainer", "source", "license", "description")
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_examples_are_valid_workspace_sandboxes(path: Path) -> None:
    xr = yaml.safe_load(path.read_text())
    assert schemas.validate_xrd_object(XRD, xr) == []
    parse(WorkspaceSandbox, {"metadata": xr["metadata"], "spec": xr["spec"]}, "")


# --------------------------------------------------------------------------- CEL rules


def _xr(spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "sandbox.cozystack.io/v1alpha1",
        "kind": "WorkspaceSandbox",
        "metadata": {"name": "alice-api", "namespace": "tenant-acme"},
        "spec": {"image": "ubuntu-24.04", **(spec or {})},
    }


_RESTORE_ONCE = (
    "spec: restoreFrom can only be set when the sandbox is created; it cannot be added, changed"
    " or removed afterwards"
)
_ALLOWLIST_ONLY = "spec.network: allow entries are only used with egress: Allowlist"
_ONE_DESTINATION = "spec.network.allow[0]: set exactly one of fqdn, cidr and bundle"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"network": {"egress": "Internet", "allow": [{"fqdn": "pypi.org"}]}},
            _ALLOWLIST_ONLY,
            id="allow-with-egress-internet",
        ),
        pytest.param(
            {"network": {"allow": [{"fqdn": "pypi.org"}]}},
            _ALLOWLIST_ONLY,
            id="allow-with-default-egress",
        ),
        pytest.param(
            {"network": {"egress": "None", "allow": [{"cidr": "203.0.112.0/24"}]}},
            _ALLOWLIST_ONLY,
            id="allow-with-egress-none",
        ),
        pytest.param(
            {
                "network": {
                    "egress": "Allowlist",
                    "allow": [{"fqdn": "pypi.org", "cidr": "203.0.112.0/24"}],
                }
            },
            _ONE_DESTINATION,
            id="both-fqdn-and-cidr",
        ),
        pytest.param(
            {"network": {"egress": "Allowlist", "allow": [{"ports": [443]}]}},
            _ONE_DESTINATION,
            id="neither-fqdn-nor-cidr",
        ),
        pytest.param(
            {"snapshots": [{"name": "nightly"}, {"name": "nightly"}]},
            "spec.snapshots: each snapshot name can be listed only once",
            id="two-snapshots-with-one-name",
        ),
        pytest.param(
            {"ports": [{"name": "web", "port": 3000}, {"name": "api", "port": 3000}]},
            "spec.ports: each port number can be listed only once",
            id="two-ports-with-one-number",
        ),
    ],
)
def test_cel_rules_refuse_what_the_model_refuses(spec: dict[str, Any], message: str) -> None:
    assert message in schemas.validate_xrd_object(XRD, _xr(spec))
    with pytest.raises(FieldError):
        parse(WorkspaceSandboxSpec, _xr(spec)["spec"], "spec")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param(
            {"restoreFrom": {"snapshot": "alice-api-nightly"}},
            {"restoreFrom": {"snapshot": "alice-api-before-refactor"}},
            id="restore-from-changed",
        ),
        pytest.param(
            {}, {"restoreFrom": {"snapshot": "alice-api-nightly"}}, id="restore-from-added-later"
        ),
        pytest.param(
            {"restoreFrom": {"snapshot": "alice-api-nightly"}}, {}, id="restore-from-removed"
        ),
    ],
)
def test_restore_from_is_fixed_at_creation(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert _RESTORE_ONCE in schemas.validate_xrd_object(XRD, _xr(new), old=_xr(old))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param({}, {"restoreFrom": {"snapshot": "a"}}, id="created-with-restore-from"),
        pytest.param(
            {"restoreFrom": {"snapshot": "a"}},
            {"restoreFrom": {"snapshot": "a"}, "power": "Suspended"},
            id="other-fields-change-freely",
        ),
    ],
)
def test_restore_from_allows_creation_and_unrelated_updates(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    previous = _xr(old) if old else None
    assert schemas.validate_xrd_object(XRD, _xr(new), old=previous) == []


def _platform(change: Any) -> dict[str, Any]:
    data = copy.deepcopy(STEP_INPUT)
    change(data)
    return data


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            lambda d: d.update(defaultPreset="large"),
            "<root>: defaultPreset must be the name of one of the presets",
            id="default-preset-not-offered",
        ),
        pytest.param(
            lambda d: d["images"]["ubuntu-24.04"]["kubevirt"].update(
                snapshot={"namespace": "cozy-public", "name": "golden"}
            ),
            "images[ubuntu-24.04].kubevirt: set exactly one of pvc, dataSource and snapshot",
            id="image-with-two-sources",
        ),
        pytest.param(
            lambda d: d["images"]["ubuntu-24.04"].update(kubevirt={}),
            "images[ubuntu-24.04].kubevirt: set exactly one of pvc, dataSource and snapshot",
            id="image-with-no-source",
        ),
        pytest.param(
            lambda d: d["presets"].update({"p" * 64: d["presets"]["standard"]}),
            "presets: preset names are at most 63 characters",
            id="preset-name-too-long",
        ),
        pytest.param(
            lambda d: d["images"].update({"i" * 64: d["images"]["ubuntu-24.04"]}),
            "images: image names are at most 63 characters",
            id="image-name-too-long",
        ),
    ],
)
def test_input_cel_rules_refuse_what_the_model_refuses(change: Any, message: str) -> None:
    data = _platform(change)
    assert message in schemas.validate_crd_object(INPUT_CRD, data)
    with pytest.raises(FieldError):
        parse(SandboxPlatform, data, "input")
