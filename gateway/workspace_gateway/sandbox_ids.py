"""Sandbox IDs, as both backends make them: 20 lower-case letters and digits.

On a cluster the ID is also the WorkspaceSandbox's name and a label's value, so it must be a
DNS-1123 name, and `is_id` keeps any other text away from a label selector or an API path.
"""

import secrets
import string

ID_ALPHABET = string.ascii_lowercase + string.digits
ID_LENGTH = 20


def new_id() -> str:
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


def is_id(text: str) -> bool:
    return len(text) == ID_LENGTH and not set(text) - set(ID_ALPHABET)
