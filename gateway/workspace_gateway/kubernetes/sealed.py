"""A sandbox's env vars, sealed on its WorkspaceSandbox.

Callers pass credentials as env vars (E2B's examples put API keys there). They live on the XR
because any replica may have to run `/init` again after a resume; but anyone who may read the
tenant's `workspacesandboxes`, an Argo CD instance or a read-only role, could read an annotation.
So the annotation holds AES-GCM ciphertext under a key derived from the gateway's seed, with
the namespace and sandbox ID as associated data: a copy pasted onto another sandbox, in this
namespace or another, does not open.
"""

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from workspace_gateway.errors import GatewayError

VERSION = "v1:"
NONCE_BYTES = 12


def _cipher(seed: bytes) -> AESGCM:
    # A key of its own, so that the access tokens' HMAC and this cipher never share one.
    return AESGCM(hmac.new(seed, b"workspace-sandbox-gateway env-vars", hashlib.sha256).digest())


def _bound_to(namespace: str, sandbox_id: str) -> bytes:
    return f"{namespace}/{sandbox_id}".encode()


def seal(seed: bytes, namespace: str, sandbox_id: str, values: Mapping[str, str]) -> str:
    nonce = secrets.token_bytes(NONCE_BYTES)
    plain = json.dumps(dict(values), sort_keys=True).encode()
    sealed = _cipher(seed).encrypt(nonce, plain, _bound_to(namespace, sandbox_id))
    return VERSION + base64.b64encode(nonce + sealed).decode()


def unseal(seed: bytes, namespace: str, sandbox_id: str, text: str | None) -> dict[str, str]:
    """The env vars; none when the annotation is absent; an error when it was altered."""
    if not text:
        return {}
    altered = GatewayError(
        500,
        f"sandbox {sandbox_id!r}: its env vars annotation was altered; kill it and create another",
    )
    if not text.startswith(VERSION):
        raise altered
    try:
        raw = base64.b64decode(text.removeprefix(VERSION), validate=True)
        plain = _cipher(seed).decrypt(
            raw[:NONCE_BYTES], raw[NONCE_BYTES:], _bound_to(namespace, sandbox_id)
        )
    except (binascii.Error, InvalidTag, ValueError):
        raise altered from None
    value = json.loads(plain)
    return {str(k): str(v) for k, v in value.items()}
