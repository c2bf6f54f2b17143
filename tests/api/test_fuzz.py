"""Arbitrary input never breaks the function: a valid render or exactly one FATAL result."""

import asyncio
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from function.fn import FunctionRunner
from tests.schemas import validate
from tests.strategies import specs
from tests.support import NAMESPACE, NOW, platform_input, request, xr

LOOP = asyncio.new_event_loop()
RUNNER = FunctionRunner(clock=lambda: NOW)

# JSON as a protobuf Struct can carry it: no NaN, numbers as doubles.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, base: Any) -> Any:
    """`base` with one value somewhere inside replaced by arbitrary JSON."""
    if not isinstance(base, dict | list) or not base or draw(st.integers(0, 3)) == 0:
        return draw(json_values)
    if isinstance(base, dict):
        key = draw(st.sampled_from(sorted(base)) | st.text(max_size=8))
        return {**base, key: draw(mutated(base.get(key)))}
    index = draw(st.integers(0, len(base) - 1))
    return [*base[:index], draw(mutated(base[index])), *base[index + 1 :]]


def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    return LOOP.run_until_complete(RUNNER.RunFunction(req, None))


def plain(value: Any) -> Any:
    """JSON as the API server reads it: a Struct's 3.0 is the integer 3 again."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


def check(rsp: fnv1.RunFunctionResponse, *, schemas: bool) -> None:
    fatal = [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    if fatal:
        assert len(fatal) == 1
        assert ": " in fatal[0].message  # a field path, then what is wrong
        assert "Traceback" not in fatal[0].message
        assert not rsp.desired.resources
        return
    desired = {
        k: plain(resource.struct_to_dict(v.resource)) for k, v in rsp.desired.resources.items()
    }
    kinds = {m["kind"] for m in desired.values()}
    assert {"Service", "NetworkPolicy"} <= kinds
    assert desired["service"]["spec"]["type"] == "ClusterIP"
    if "cilium-policy" in desired:
        assert desired["cilium-policy"]["spec"]["egressDeny"]
    if schemas:
        for m in desired.values():
            applied = {**m, "metadata": {**m["metadata"], "namespace": NAMESPACE}}
            assert validate(applied) == [], m["kind"]


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(spec=json_values)
def test_any_json_as_the_spec(spec: Any) -> None:
    composite = {**xr(), "spec": spec}
    check(run(request(composite)), schemas=False)


@FUZZ
@given(spec=specs.flatmap(mutated))
def test_a_valid_spec_with_one_value_replaced(spec: Any) -> None:
    check(run(request({**xr(), "spec": spec})), schemas=True)


@FUZZ
@given(meta=mutated({"name": "alice-api", "namespace": "tenant-acme", "labels": {"a": "b"}}))
def test_any_metadata(meta: Any) -> None:
    check(run(request({**xr(), "metadata": meta})), schemas=False)


@FUZZ
@given(step_input=mutated(platform_input()))
def test_a_platform_input_with_one_value_replaced(step_input: Any) -> None:
    if not isinstance(step_input, dict):
        step_input = {"value": step_input}
    check(run(request(xr(), step_input=step_input)), schemas=True)


@FUZZ
@given(
    observed=st.dictionaries(
        st.sampled_from(["vm", "workspace-volume", "service", "sandbox", "snapshot-a", "x"]),
        json_values.filter(lambda v: isinstance(v, dict)),
        max_size=4,
    )
)
def test_any_observed_state(observed: dict[str, Any]) -> None:
    # Observed objects come from the API server, already valid for their kind; the function
    # re-emits an existing disk's spec as it finds it, so schemas aren't checked here, only
    # that garbage never breaks the function.
    check(run(request(xr({"snapshots": [{"name": "a"}]}), observed)), schemas=False)
