"""Who a request acts as: the user named in `Authorization: Basic`, else the default user.

Running as root (in a VM), the agent runs commands and touches files as any local user, root
included, as envd does; the VM and the network policies are the boundary. Running as anyone
else (in a pod, as the pod's fixed user), it can only be itself, and says so rather than
pretending. Every user but root has the workspace as its home: relative paths, the default
working directory and `HOME` all mean the workspace. Root keeps its own home, so that caches
root writes don't land in the workspace owned by root.
"""

import base64
import binascii
import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from connectrpc.code import Code

from workspace_agent.errors import AgentError


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: Path
    """`HOME` for its commands."""


def basic_user(authorization: str | None) -> str | None:
    """The user name in `Authorization: Basic base64("<user>:")`; None without the header."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "basic":
        raise AgentError(Code.UNAUTHENTICATED, f"unsupported authorization scheme {scheme!r}")
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise AgentError(Code.UNAUTHENTICATED, "malformed basic authorization") from None
    name = decoded.partition(":")[0]
    return name or None


class Users:
    def __init__(self, root: Path, default: str) -> None:
        self.root = root
        self.privileged = os.geteuid() == 0
        self._own = os.geteuid()
        try:
            own_name = pwd.getpwuid(self._own).pw_name
        except KeyError:  # a pod's fixed UID need not be in the image's passwd
            own_name = None
        self._own_names = {n for n in (own_name, default) if n}
        self.default = default
        self.resolve(default)  # fail at start, not at the first request

    def resolve(self, name: str | None) -> User:
        """The user a request acts as; the default user when it names none."""
        name = name or self.default
        if not self.privileged:
            if name not in self._own_names:
                raise AgentError(
                    Code.PERMISSION_DENIED,
                    f"this sandbox runs everything as its own user {self.default!r}; "
                    f"it cannot act as {name!r}",
                )
            return self._self(name)
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise AgentError(Code.UNAUTHENTICATED, f"invalid username: {name!r}") from None
        home = Path(entry.pw_dir) if entry.pw_uid == 0 else self.root
        return User(
            name=name,
            uid=entry.pw_uid,
            gid=entry.pw_gid,
            groups=tuple(os.getgrouplist(name, entry.pw_gid)),
            home=home,
        )

    def set_default(self, name: str) -> None:
        """Make `name` the user of requests that name none (`/init`'s `defaultUser`)."""
        self.resolve(name)
        self.default = name

    def _self(self, name: str) -> User:
        return User(
            name=name,
            uid=self._own,
            gid=os.getegid(),
            groups=tuple(os.getgroups()),
            home=self.root,
        )
