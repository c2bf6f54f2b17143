"""Auto-suspend: past `spec.lifetime.suspendAt` the sandbox is rendered suspended.

The function can't act at a moment on its own, so the response's TTL is cut to that moment:
Crossplane calls again then, and the next render halts the sandbox. Moving `suspendAt` forward
is a keep-alive: the next render finds the deadline ahead again and runs the sandbox.
"""

import math
from dataclasses import dataclass
from datetime import datetime

from function.errors import FieldError
from function.model.platform import Preset
from function.model.spec import WorkspaceSandbox

# Crossplane's own default; a deadline further away doesn't need an earlier call.
DEFAULT_TTL_SECONDS = 60


@dataclass(frozen=True)
class Lifetime:
    expired: bool
    ttl_seconds: int


def _shown(seconds: float) -> str:
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}h{rest // 60:02d}m" if rest % 3600 else f"{hours}h"


def lifetime(ws: WorkspaceSandbox, preset_name: str, preset: Preset, now: datetime) -> Lifetime:
    deadline = ws.spec.lifetime.suspend_at
    if deadline is None:
        return Lifetime(expired=False, ttl_seconds=DEFAULT_TTL_SECONDS)
    ahead = (deadline - now).total_seconds()
    cap = preset.max_lifetime
    if cap is not None and ahead > cap.total_seconds():
        raise FieldError(
            "spec.lifetime.suspendAt",
            f"is {_shown(ahead)} ahead; preset {preset_name!r} allows at most "
            f"{_shown(cap.total_seconds())}",
        )
    if ahead <= 0:
        return Lifetime(expired=True, ttl_seconds=DEFAULT_TTL_SECONDS)
    return Lifetime(expired=False, ttl_seconds=max(1, min(DEFAULT_TTL_SECONDS, math.ceil(ahead))))
