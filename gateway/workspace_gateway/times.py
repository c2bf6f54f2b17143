"""Moments on the wire: RFC 3339 in UTC, with `Z`, as E2B's API and the platform write them."""

from datetime import UTC, datetime
from typing import Literal


def rfc3339(moment: datetime, timespec: Literal["auto", "seconds"] = "auto") -> str:
    """`auto` keeps microseconds when there are any, as E2B's JSON carries them.

    `seconds` drops them: `spec.lifetime.suspendAt` is written to the second.
    """
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")
