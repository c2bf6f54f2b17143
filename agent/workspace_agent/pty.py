"""Pseudo-terminals for PTY sessions: open one at a size, make it the child's, resize it."""

import fcntl
import os
import termios

from connectrpc.code import Code

from workspace_agent.errors import AgentError

MAX_SIDE = 0xFFFF  # struct winsize holds unsigned shorts


def open_terminal(rows: int, cols: int) -> tuple[int, int]:
    """A new (master, slave) pair, already at the size the client asked for."""
    _check(rows, cols)
    master, slave = os.openpty()
    termios.tcsetwinsize(slave, (rows, cols))
    return master, slave


def resize(master: int, rows: int, cols: int) -> None:
    """The kernel tells the terminal's foreground process group with SIGWINCH."""
    _check(rows, cols)
    termios.tcsetwinsize(master, (rows, cols))


def take_control() -> None:
    """Run in the child between fork and exec: its stdin, the slave, becomes its terminal.

    The child has just become a session leader (`start_new_session`), which TIOCSCTTY needs;
    without a controlling terminal, shells disable job control and ^C reaches nothing.
    """
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _check(rows: int, cols: int) -> None:
    if not (0 < rows <= MAX_SIDE and 0 < cols <= MAX_SIDE):
        raise AgentError(
            Code.INVALID_ARGUMENT,
            f"pty size {rows}x{cols}: rows and cols must be between 1 and {MAX_SIDE}",
        )
