from decimal import Decimal

import pytest

from function.model.quantity import format_bytes, format_cpu, parse_bytes, parse_cpu


@pytest.mark.parametrize(
    ("text", "cores"),
    [
        pytest.param("2", Decimal(2), id="whole-cores"),
        pytest.param("500m", Decimal("0.5"), id="millicores"),
        pytest.param("1.5", Decimal("1.5"), id="decimal-cores"),
        pytest.param(2.0, Decimal(2), id="struct-float-is-a-whole-number"),
        pytest.param(0.25, Decimal("0.25"), id="struct-float-fraction"),
    ],
)
def test_cpu_parses_to_exact_cores(text: object, cores: Decimal) -> None:
    assert parse_cpu(text) == cores


@pytest.mark.parametrize(
    ("text", "size"),
    [
        pytest.param("4Gi", Decimal(4 * 2**30), id="binary-suffix"),
        pytest.param("4096Mi", Decimal(4 * 2**30), id="same-size-other-suffix"),
        pytest.param("4G", Decimal(4 * 10**9), id="decimal-suffix"),
        pytest.param("1073741824", Decimal(2**30), id="plain-bytes"),
    ],
)
def test_sizes_parse_to_exact_bytes(text: str, size: Decimal) -> None:
    assert parse_bytes(text) == size


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("2 cores", "'2 cores' is not a quantity", id="words"),
        pytest.param("4GB", "'4GB' is not a quantity", id="not-a-suffix"),
        pytest.param("1e400", "'1e400' is not a quantity", id="exponent"),
        pytest.param("-1", "'-1' is not a quantity", id="negative"),
        pytest.param("0", "must be more than zero", id="zero"),
        pytest.param("0.0001", "whole number of millicores", id="sub-millicore-precision"),
        pytest.param("99999999999999999999Ei", "far larger", id="absurdly-large"),
        pytest.param(True, "not a boolean", id="boolean"),
        pytest.param(["2"], "must be a quantity", id="list"),
    ],
)
def test_bad_cpu_is_refused_with_a_reason(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cpu(text)


def test_fractional_bytes_are_refused() -> None:
    with pytest.raises(ValueError, match="whole number of bytes"):
        parse_bytes("0.5")


@pytest.mark.parametrize(
    ("size", "text"),
    [
        pytest.param(Decimal(4 * 2**30), "4Gi", id="gibibytes"),
        pytest.param(Decimal(1536 * 2**20), "1536Mi", id="largest-exact-suffix"),
        pytest.param(Decimal(4 * 10**9), "3906250Ki", id="decimal-sizes-in-kibibytes"),
        pytest.param(Decimal(1000), "1000", id="bytes"),
    ],
)
def test_sizes_print_canonically(size: Decimal, text: str) -> None:
    assert format_bytes(size) == text


@pytest.mark.parametrize(
    ("cores", "text"),
    [
        pytest.param(Decimal(2), "2", id="whole"),
        pytest.param(Decimal("1.5"), "1500m", id="millicores"),
    ],
)
def test_cpu_prints_canonically(cores: Decimal, text: str) -> None:
    assert format_cpu(cores) == text
