"""What a control route answers: a status, a JSON body, headers."""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()
