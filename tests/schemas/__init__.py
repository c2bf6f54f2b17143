"""Schema validation of Kubernetes manifests for the test suite.

This module owns the answer to "would the API server accept this object?" for the kinds the
function renders and for the documents the repository ships:

* core and built-in API kinds: the strict JSON schemas bundled with kubernetes-validate
  (Kubernetes 1.33, or the nearest version it ships), so unknown fields are errors;
* CRD kinds: the upstream CRDs vendored in ``schemas/upstream`` (one release of each), their
  ``openAPIV3Schema`` converted to JSON Schema with Kubernetes structural-schema semantics,
  then checked again by a walk that evaluates ``x-kubernetes-validations`` (CEL) rules;
* Crossplane composite resources: the CRD schema Crossplane generates from an XRD;
* object metadata: names, namespaces, label and annotation keys and values.

Deliberate choices:

* Unknown fields are errors, even where Kubernetes would prune them silently.
* A Python ``float`` is never an integer, even ``3.0``: the API server decodes ``3.0`` as a
  float and rejects it for ``type: integer``.
* ``format`` is checked for ``int32``/``int64`` (range: a Go client cannot decode more),
  ``date-time``, ``byte``, ``cidr``, ``ipv4``, ``ipv6`` and ``uuid``; other formats are ignored.
* Defaults are applied and non-nullable nulls pruned before validation, as the API server does,
  so CEL rules see defaulted values.
* Annotation values are free text (as in Kubernetes); only annotation keys are checked.
* Object names must be DNS-1123 subdomains, except where Kubernetes is stricter or looser for
  a kind (``metadata.NAME_RULES``).

CEL support (cel-python plus the functions in ``cel_library.K8S_FUNCTIONS``):

* standard CEL: operators, ``in``, ``has()``, ``size()``, ``.all()``, ``.exists()``,
  ``.exists_one()``, ``.map()`` and ``.filter()`` (two-argument forms), ``contains``,
  ``startsWith``, ``endsWith``, ``matches``, conversions, timestamp and duration accessors;
* Kubernetes strings library: ``lowerAscii``, ``upperAscii``, ``trim``, ``split``, ``join``,
  ``replace``, ``indexOf``, ``lastIndexOf``, ``substring``, ``charAt``;
* Kubernetes lists library: ``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf``;
* Kubernetes regex library: ``find``, ``findAll``;
* Kubernetes quantity library: ``isQuantity``, ``quantity``, ``sign`` (a function, as the API
  server declares it: ``sign(q)``, never ``q.sign()``) and the methods ``isLessThan``,
  ``isGreaterThan``, ``compareTo``, ``add``, ``sub``, ``asInteger``, ``asApproximateFloat``,
  ``isInteger``.

Anything else (``url``, ``ip``, ``cidr``, ``format``, ``semver``, ``sets.*``, optional types and
``optionalOldSelf``, two-variable comprehensions, ``cel.bind``, ...) raises
``UnsupportedCELError`` naming the rule when the rule would be evaluated: a rule this module
cannot evaluate never passes.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping
from typing import Any

from tests.schemas.crossplane import check_gvk, xr_schema
from tests.schemas.defaulting import apply_defaults
from tests.schemas.json_schema import Pinned, compile_schema, core_validator, schema_errors
from tests.schemas.locate import (
    crd_for,
    crds_root,
    served_version,
    split_api_version,
    yaml_documents,
)
from tests.schemas.metadata import object_metadata_errors
from tests.schemas.vocabulary import JSON, ROOT, Schema, UnsupportedCELError
from tests.schemas.walk import NO_OLD, CompiledRule, compile_rule, walk

__all__ = [
    "CompiledRule",
    "UnsupportedCELError",
    "app_schema",
    "apply_defaults",
    "compile_rule",
    "composed_errors",
    "crd_schema",
    "crds_root",
    "generated_xr_schema",
    "validate",
    "validate_against",
    "validate_crd_object",
    "validate_xrd_object",
]


def validate(manifest: Mapping[str, Any]) -> list[str]:
    """Validate a Kubernetes object against the schema for its apiVersion and kind."""
    if not isinstance(manifest, Mapping):
        return [f"{ROOT}: a Kubernetes object must be a mapping, not {type(manifest).__name__}"]
    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return [f"{ROOT}: apiVersion and kind must be strings"]
    group, version = split_api_version(api_version)
    core = core_validator(group, version, kind)
    if core is not None:
        return schema_errors(core, manifest, "") + object_metadata_errors(manifest, "")
    try:
        schema = app_schema(kind) if group == COZYSTACK_APPS else crd_schema(api_version, kind)
    except LookupError as exc:
        return [f"{ROOT}: no schema for apiVersion={api_version} kind={kind}: {exc.args[0]}"]
    return validate_against(schema, manifest)


def composed_errors(
    resources: Mapping[str, Mapping[str, Any]], namespace: str
) -> dict[str, list[str]]:
    """Each composed resource's errors, as applied in `namespace`, a provider-kubernetes
    Object's with those of the manifest it carries; only resources that have any."""
    errors: dict[str, list[str]] = {}
    for key, m in resources.items():
        found = validate({**m, "metadata": {**m["metadata"], "namespace": namespace}})
        if m["kind"] == "Object":
            found += [f"manifest: {e}" for e in validate(m["spec"]["forProvider"]["manifest"])]
        if found:
            errors[key] = found
    return errors


COZYSTACK_APPS = "apps.cozystack.io"


@functools.cache
def app_schema(kind: str) -> dict[str, Any]:
    """A Cozystack application's object schema: its ApplicationDefinition's values as `spec`.

    Cozystack serves `apps.cozystack.io/v1alpha1` kinds from its own API server, with no CRD;
    the ApplicationDefinition's `openAPISchema` (the chart's values.schema.json) is what it
    validates `spec` against.

    Raises:
        LookupError: no ApplicationDefinition defines that kind.
    """
    for path in sorted((crds_root() / "cozystack" / "applicationdefinitions").glob("*.yaml")):
        for doc in yaml_documents(path):
            application = (doc or {}).get("spec", {}).get("application", {})
            if application.get("kind") == kind:
                values = json.loads(application["openAPISchema"])
                status = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                return {"type": "object", "properties": {"spec": values, "status": status}}
    raise LookupError(f"no Cozystack ApplicationDefinition defines kind {kind}")


def crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    """Return the served ``openAPIV3Schema`` for a CRD kind from the vendored CRDs.

    Raises:
        LookupError: no CRD serves that version of that kind, or the choice is ambiguous.
    """
    group, version = split_api_version(api_version)
    crd = crd_for(group, kind, version)
    schema: dict[str, Any] = served_version(crd, version)["schema"]["openAPIV3Schema"]
    return schema


def validate_against(schema: Schema, obj: JSON, *, old: JSON = None, path: str = "") -> list[str]:
    """Validate ``obj`` against an ``openAPIV3Schema``, including its CEL rules.

    ``path`` is where ``obj`` sits; the empty path means ``obj`` is a whole Kubernetes object,
    so ``apiVersion``, ``kind`` and ``metadata`` are implicitly allowed and metadata is checked.
    ``old`` is the previous version of the object, for transition rules (``oldSelf``).
    Schemas are cached by identity, so do not mutate a schema after first use.
    """
    root = path == ""
    compiled = compile_schema(Pinned(schema), root=root)
    current = apply_defaults(copy.deepcopy(obj), schema)
    previous = NO_OLD if old is None else apply_defaults(copy.deepcopy(old), schema)
    errors = schema_errors(compiled, current, path)
    errors += walk(schema, current, previous, path, object_root=root)
    if root and isinstance(current, Mapping):
        errors += object_metadata_errors(current, path)
    return errors


def validate_xrd_object(
    xrd: Mapping[str, Any], obj: Mapping[str, Any], *, old: Mapping[str, Any] | None = None
) -> list[str]:
    """Validate a composite resource against the CRD Crossplane generates from ``xrd``."""
    spec = xrd["spec"]
    version, errors = check_gvk(obj, spec["group"], spec["names"]["kind"])
    if errors:
        return errors
    try:
        schema = xr_schema(Pinned(xrd), version)
    except LookupError as exc:
        return [f"apiVersion: {exc.args[0]}"]
    return validate_against(schema, obj, old=old)


def generated_xr_schema(xrd: Mapping[str, Any], version: str) -> dict[str, Any]:
    """The schema Crossplane generates for composite resources of ``xrd`` at ``version``."""
    return xr_schema(Pinned(xrd), version)


def validate_crd_object(
    crd: Mapping[str, Any], obj: Mapping[str, Any], *, old: Mapping[str, Any] | None = None
) -> list[str]:
    """Validate an object against a given apiextensions.k8s.io/v1 CRD document."""
    spec = crd["spec"]
    version, errors = check_gvk(obj, spec["group"], spec["names"]["kind"])
    if errors:
        return errors
    try:
        served = served_version(crd, version)
    except LookupError as exc:
        return [f"apiVersion: {exc.args[0]}"]
    return validate_against(served["schema"]["openAPIV3Schema"], obj, old=old)
