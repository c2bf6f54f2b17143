"""Env vars sealed on the WorkspaceSandbox: readable by the gateway alone, bound to one sandbox."""

import base64

import pytest
from workspace_gateway.errors import GatewayError
from workspace_gateway.kubernetes.sealed import seal, unseal

SEED = b"s" * 32
VALUES = {"OPENAI_API_KEY": "sk-very-secret", "EMPTY": "", "UNICODE": "grüße"}


def test_a_sealed_annotation_opens_to_the_same_values_and_shows_none_of_them() -> None:
    text = seal(SEED, "team-a", "a" * 20, VALUES)
    assert text.startswith("v1:")
    for value in ("sk-very-secret", "OPENAI_API_KEY", "grüße"):
        assert value not in text
    assert unseal(SEED, "team-a", "a" * 20, text) == VALUES


def test_each_seal_is_fresh() -> None:
    # A random nonce each time: two sandboxes with the same env vars do not look alike.
    assert seal(SEED, "team-a", "a" * 20, VALUES) != seal(SEED, "team-a", "a" * 20, VALUES)


def test_no_annotation_is_no_env_vars() -> None:
    assert unseal(SEED, "team-a", "a" * 20, None) == {}
    assert unseal(SEED, "team-a", "a" * 20, "") == {}


@pytest.mark.parametrize(
    ("seed", "namespace", "sandbox_id"),
    [
        (b"t" * 32, "team-a", "a" * 20),  # another gateway's seed
        (SEED, "team-b", "a" * 20),  # copied onto a sandbox of that name in another namespace
        (SEED, "team-a", "b" * 20),  # copied onto another sandbox of the same tenant
    ],
)
def test_a_seal_opens_only_for_its_own_sandbox_under_its_own_seed(
    seed: bytes, namespace: str, sandbox_id: str
) -> None:
    text = seal(SEED, "team-a", "a" * 20, VALUES)
    with pytest.raises(GatewayError) as raised:
        unseal(seed, namespace, sandbox_id, text)
    assert raised.value.status == 500
    assert "env vars annotation was altered" in raised.value.message


@pytest.mark.parametrize(
    "text",
    [
        '{"A": "1"}',  # clear text written by hand
        "v1:not base64!",
        "v1:",
        "v1:" + "A" * 16,
        "v2:AAAA",
    ],
)
def test_an_edited_annotation_is_one_clear_error(text: str) -> None:
    with pytest.raises(GatewayError) as raised:
        unseal(SEED, "team-a", "a" * 20, text)
    assert raised.value.message == (
        f"sandbox {'a' * 20!r}: its env vars annotation was altered; kill it and create another"
    )


@pytest.mark.parametrize("at", [0, 12, -1])  # the nonce, the ciphertext, the tag
def test_a_flipped_bit_is_refused(at: int) -> None:
    raw = bytearray(base64.b64decode(seal(SEED, "team-a", "a" * 20, VALUES).removeprefix("v1:")))
    raw[at] ^= 1
    with pytest.raises(GatewayError):
        unseal(SEED, "team-a", "a" * 20, "v1:" + base64.b64encode(raw).decode())
