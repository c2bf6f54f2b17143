"""What a Start request runs, and the fork: argv, user, environment, working directory, pipes.

The command runs as given (the SDK sends `/bin/bash -l -c <cmd>`), with no wrapper: envd's
`oom_score_adj` shell prefix fails under kubelet-managed pods and then runs nothing. Each command
leads a session of its own, so a signal to its process group reaches what it started.

A VM's agent runs with a strongly negative `oom_score_adj` (its systemd unit), so that a
command that eats the memory is what the kernel kills, not the agent. Commands must not inherit
that protection: the child raises its own score to 0 before it execs, as root still (once it is
the user, its /proc files are root's and it could not), which needs no privilege. A score at or
above 0, such as the kubelet's in a pod, is left as it is: lowering it would need privilege.
"""

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from connectrpc.code import Code

from workspace_agent import pty
from workspace_agent.errors import AgentError
from workspace_agent.users import User

# envd hands its own PATH on; ours may name the agent's venv, which is no business of commands.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TERM = "xterm-256color"
OOM_SCORE_ADJ = "/proc/self/oom_score_adj"


@dataclass(frozen=True)
class Launch:
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: Path
    user: User
    stdin: bool
    """A pipe the caller can write to; else /dev/null. Ignored under a terminal."""
    terminal: tuple[int, int] | None
    """Rows and columns of a pseudo-terminal to run under, or None for pipes."""


@dataclass
class Child:
    """A started command and the agent's ends of its stdio, each the agent's to close."""

    popen: subprocess.Popen[bytes]
    stdout: int
    """The read end of stdout, or the terminal's master."""
    stderr: int | None
    stdin: int | None
    """The write end of stdin, or the terminal's master; None for /dev/null."""

    @property
    def fds(self) -> set[int]:
        return {fd for fd in (self.stdout, self.stderr, self.stdin) if fd is not None}


def environment(
    user: User, session: dict[str, str], request: dict[str, str], *, terminal: bool
) -> dict[str, str]:
    """In envd's order, the last one winning: the basics, `/init`'s variables, the request's."""
    env = {"PATH": DEFAULT_PATH, "HOME": str(user.home), "USER": user.name, "LOGNAME": user.name}
    if terminal:
        env["TERM"] = TERM
    for source in (session, request):
        for name, value in source.items():
            if not name or "=" in name or "\0" in name:
                raise AgentError(Code.INVALID_ARGUMENT, f"invalid environment variable {name!r}")
            if "\0" in value:
                raise AgentError(
                    Code.INVALID_ARGUMENT, f"environment variable {name} holds a NUL byte"
                )
            env[name] = value
    return env


def working_directory(workdir: Path, home: Path, cwd: str | None) -> Path:
    """The request's cwd against the default workdir (absolute stays absolute), `~` the home."""
    if not cwd:
        return workdir
    if "\0" in cwd:
        raise AgentError(Code.INVALID_ARGUMENT, "cwd holds a NUL byte")
    if cwd == "~" or cwd.startswith("~/"):
        path = home / cwd[2:]
    else:
        path = workdir / cwd
    path = Path(os.path.normpath(path))
    if not path.exists():
        raise AgentError(Code.INVALID_ARGUMENT, f"cwd '{path}' does not exist")
    if not path.is_dir():
        raise AgentError(Code.INVALID_ARGUMENT, f"cwd '{path}' is not a directory")
    return path


def spawn(launch: Launch, *, privileged: bool) -> Child:
    """Fork and exec the command as its user, in a session of its own.

    Only a root agent switches users (and sets supplementary groups, which needs privilege);
    an unprivileged one has already refused every user but itself.
    """
    if not launch.argv or not launch.argv[0]:
        raise AgentError(Code.INVALID_ARGUMENT, "process.cmd is empty")
    if launch.terminal is not None:
        return _spawn_terminal(launch, launch.terminal, privileged=privileged)
    return _spawn_pipes(launch, privileged=privileged)


def _spawn_pipes(launch: Launch, *, privileged: bool) -> Child:
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    in_read, in_write = os.pipe() if launch.stdin else (subprocess.DEVNULL, None)
    ours = [out_read, err_read] + ([in_write] if in_write is not None else [])
    theirs = [out_write, err_write] + ([in_read] if in_write is not None else [])
    try:
        popen = _popen(launch, (in_read, out_write, err_write), privileged=privileged)
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:
        for fd in theirs:
            os.close(fd)
    for fd in ours:
        os.set_blocking(fd, False)
    return Child(popen, stdout=out_read, stderr=err_read, stdin=in_write)


def _spawn_terminal(launch: Launch, size: tuple[int, int], *, privileged: bool) -> Child:
    master, slave = pty.open_terminal(*size)
    try:
        if privileged:
            # What login(1) does: the user owns the terminal it was given.
            os.fchown(slave, launch.user.uid, -1)
        popen = _popen(launch, (slave, slave, slave), privileged=privileged)
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    os.set_blocking(master, False)
    return Child(popen, stdout=master, stderr=None, stdin=master)


def _popen(
    launch: Launch, stdio: tuple[int, int, int], *, privileged: bool
) -> subprocess.Popen[bytes]:
    user = launch.user
    # Popen enters cwd before it drops to the user: a root agent enters it in the child instead,
    # after, so a user is refused a directory it may not enter, as envd refuses it.
    enter = launch.cwd if privileged and user.uid != 0 else None
    try:
        return subprocess.Popen(  # noqa: S603  # running the caller's command is the point
            launch.argv,
            stdin=stdio[0],
            stdout=stdio[1],
            stderr=stdio[2],
            cwd=None if enter else launch.cwd,
            env=launch.env,
            start_new_session=True,
            # System calls on modules already imported need no lock that another thread could
            # hold at the fork.
            preexec_fn=_in_child(  # noqa: PLW1509  # see above: no lock to hold
                user if privileged else None, enter, terminal=launch.terminal is not None
            ),
        )
    except OSError as e:  # the executable, or the cwd (then named)
        where = f": {e.filename}" if e.filename not in (None, launch.argv[0]) else ""
        raise AgentError(
            Code.INVALID_ARGUMENT, f"cannot start {launch.argv[0]!r}: {e.strerror}{where}"
        ) from None
    except ValueError as e:  # a NUL byte in an argument
        raise AgentError(Code.INVALID_ARGUMENT, f"cannot start {launch.argv[0]!r}: {e}") from None
    except subprocess.SubprocessError:  # _in_child failed; the cwd was checked to be a directory
        raise AgentError(
            Code.INVALID_ARGUMENT if enter else Code.INTERNAL,
            f"cwd '{enter}' is not accessible to {user.name}"
            if enter
            else f"could not prepare the command's process for {user.name}",
        ) from None


def as_user(user: User | None) -> Callable[[], None]:
    """What a child runs between fork and exec to become `user` (None: stay who it is)."""
    return _in_child(user, None, terminal=False)


def _in_child(user: User | None, cwd: Path | None, *, terminal: bool) -> Callable[[], None]:
    """What runs between fork and exec: the OOM score, the user, its cwd, the terminal."""

    def run() -> None:
        lose_oom_protection()
        if user is not None:
            os.setgroups(list(user.groups))
            os.setresgid(user.gid, user.gid, user.gid)
            os.setresuid(user.uid, user.uid, user.uid)
        if cwd is not None:
            os.chdir(cwd)
        if terminal:
            pty.take_control()

    return run


def lose_oom_protection() -> None:
    """Raise this process's `oom_score_adj` to 0 if it is below: the agent's is not for commands.

    Read first, and opened for writing only when it must change: an agent that changed its ids
    after its start (as the tests' pod agent does) is not dumpable, its /proc files are root's,
    and only reading them is open to it.
    """
    fd = os.open(OOM_SCORE_ADJ, os.O_RDONLY)
    try:
        if int(os.read(fd, 32)) >= 0:
            return
    finally:
        os.close(fd)
    # O_TRUNC is nothing to procfs, which takes each write whole; it keeps the test's stand-in
    # file (tests/agent/test_connections.py) meaning what procfs means.
    fd = os.open(OOM_SCORE_ADJ, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)
