"""What the sandbox's users can do to the agent's process with connections alone, and its port.

A VM's agent is root and its users share the machine. They may open connections by the hundred
and never finish a request; they may wait for the agent to restart and take its port; and the
commands it runs for them must not share its protection from the OOM killer. Figures are
measured on the agent's own process: VmRSS from /proc/PID/status, descriptors in /proc/PID/fd.
"""

import contextlib
import errno
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2b import PtySize, Sandbox
from workspace_agent import launch
from workspace_agent.users import User

from tests.agent.sdk.agents import (
    AGENT,
    AUTH,
    TOKEN,
    Running,
    debug_env,
    holding_token,
    needs_root,
    start,
    stop,
)
from tests.ports import free_port

pytestmark = [pytest.mark.e2e, needs_root]
MIB = 1 << 20
HALF_HEADS = 300
HALF_HEAD = b"GET /health HTTP/1.1\r\nHost: agent\r\nX-Slow: "  # never finished
HEAD = b"GET /health HTTP/1.1\r\nHost: agent\r\n\r\n"
# What holding HALF_HEADS connections may cost, and what may be left once they are gone.
RSS_BOUND = 24 * MIB
FDS_LEFT = 4
HEAD_SECONDS = 3  # the deadline the test gives the agent for a request head


def rss(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def port_of(running: Running) -> int:
    return int(running.url.rsplit(":", 1)[1])


def closed(s: socket.socket, within: float) -> bool:
    """Whether the agent closes the connection within `within` seconds, having sent nothing."""
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def half_heads(port: int, count: int = HALF_HEADS) -> list[socket.socket]:
    opened = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            s.sendall(HALF_HEAD)
        opened.append(s)
    return opened


def settle(pid: int, within: float = 5.0, at_most: int | None = None) -> int:
    """The agent's descriptor count once it stops falling (or reaches `at_most`)."""
    deadline = time.monotonic() + within
    count = fds(pid)
    while time.monotonic() < deadline and (at_most is None or count > at_most):
        time.sleep(0.1)
        count = fds(pid)
    return count


@pytest.fixture
def remote_only_agent(workspace: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A `--remote-only` agent on the loopback, which then answers this machine nothing."""
    port = free_port()
    args = ["--address", f"127.0.0.1:{port}", "--root", str(workspace), "--user", "nobody"]
    process = subprocess.Popen([AGENT, *args, "--remote-only", "--log-level", "warning"])
    deadline = time.monotonic() + 15
    while True:
        assert process.poll() is None, "the agent exited"
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, "the agent never listened"
            time.sleep(0.05)
    yield process, port
    process.terminate()
    process.wait(10)


def test_with_remote_only_local_connections_are_closed_before_a_byte_is_read(
    remote_only_agent: tuple[subprocess.Popen[bytes], int],
) -> None:
    process, port = remote_only_agent
    before_rss, before_fds = rss(process.pid), fds(process.pid)
    started = time.monotonic()
    opened = half_heads(port)
    try:
        assert all(closed(s, within=5) for s in opened)
        took = time.monotonic() - started
        grown = rss(process.pid) - before_rss
        left = settle(process.pid, at_most=before_fds) - before_fds
    finally:
        for s in opened:
            s.close()
    print(  # noqa: T201  # the figures the report quotes
        f"remote-only: {HALF_HEADS} closed in {took:.2f}s, RSS {before_rss / MIB:.1f} MiB "
        f"{grown / MIB:+.1f} MiB, fds {before_fds} {left:+d}"
    )
    assert took < 5
    assert grown < RSS_BOUND
    assert left <= FDS_LEFT
    # Nor does a whole request from here get an answer: /health included.
    with socket.create_connection(("127.0.0.1", port)) as s:
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            s.sendall(HEAD)
        assert closed(s, within=5)


def test_a_request_head_not_finished_by_the_deadline_is_closed(workspace: Path) -> None:
    running = start(workspace, options=("--head-timeout", str(HEAD_SECONDS)))
    pid = running.process.pid
    try:
        before_rss, before_fds = rss(pid), fds(pid)
        opened = half_heads(port_of(running))
        try:
            assert not any(closed(s, within=0.01) for s in opened[-10:])  # still waiting
            time.sleep(0.5)
            held_fds, held_rss = fds(pid) - before_fds, rss(pid) - before_rss
            started = time.monotonic()
            assert all(closed(s, within=5) for s in opened)
            took = time.monotonic() - started
            left = settle(pid, at_most=before_fds) - before_fds
            grown = rss(pid) - before_rss
        finally:
            for s in opened:
                s.close()
        print(  # noqa: T201  # the figures the report quotes
            f"deadline: {HALF_HEADS} held {held_fds:+d} fds, RSS {before_rss / MIB:.1f} MiB "
            f"{held_rss / MIB:+.1f} MiB; closed within {took:.2f}s of the check; "
            f"after: fds {left:+d}, RSS {grown / MIB:+.1f} MiB"
        )
        assert held_fds >= HALF_HEADS - FDS_LEFT  # all accepted, and held until the deadline
        assert held_rss < RSS_BOUND
        assert took < HEAD_SECONDS + 2
        assert left <= FDS_LEFT
        assert grown < RSS_BOUND
        assert running.get("/health").status_code == 204
    finally:
        stop(running)


def test_an_idle_keep_alive_connection_outlives_the_head_deadline(workspace: Path) -> None:
    running = start(workspace, options=("--head-timeout", "1"))
    try:
        with socket.create_connection(("127.0.0.1", port_of(running))) as s:
            s.sendall(HEAD)
            assert s.recv(4096).startswith(b"HTTP/1.1 204 ")
            time.sleep(2)
            s.sendall(HEAD[:10])  # a slow head, within its own deadline
            time.sleep(0.5)
            s.sendall(HEAD[10:])
            assert s.recv(4096).startswith(b"HTTP/1.1 204 ")
    finally:
        stop(running)


def test_connections_past_the_cap_are_closed_at_accept(workspace: Path) -> None:
    running = start(workspace, options=("--max-connections", "20"))
    port = port_of(running)
    try:
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        try:
            for s in held:  # each answered, so each is one of the agent's open connections
                s.sendall(HEAD)
                assert s.recv(4096).startswith(b"HTTP/1.1 204 ")
            with socket.create_connection(("127.0.0.1", port)) as extra:
                with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                    extra.sendall(HEAD)
                assert closed(extra, within=5)
            held.pop().close()
            deadline = time.monotonic() + 5
            while True:  # the agent notices the close, and has room again
                with socket.create_connection(("127.0.0.1", port)) as again:
                    with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                        again.sendall(HEAD)
                    with contextlib.suppress(ConnectionResetError):
                        if again.recv(4096).startswith(b"HTTP/1.1 204 "):
                            break
                assert time.monotonic() < deadline, "the agent never took another connection"
                time.sleep(0.1)
        finally:
            for s in held:
                s.close()
    finally:
        stop(running)


def test_an_oversized_request_head_is_refused(agent: Running) -> None:
    with socket.create_connection(("127.0.0.1", port_of(agent))) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: agent\r\nX-Big: " + b"x" * (32 << 10))
        s.settimeout(5)
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400 "), answer


# -- the port is systemd's ------------------------------------------------------------------------

# What systemd does for a socket unit's service: the listening socket as fd 3, LISTEN_FDS=1 and
# LISTEN_PID naming the process, then exec. The test holds the socket, as systemd does.
_ACTIVATE = """
import os, sys
fd = int(sys.argv[1])
os.dup2(fd, 3)
os.close(fd)
os.environ["LISTEN_FDS"] = "1"
os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(sys.argv[2], sys.argv[2:])
"""


def activated(listener: socket.socket, workspace: Path) -> subprocess.Popen[bytes]:
    port = listener.getsockname()[1]
    # --address names the port the test holds: were it bound rather than inherited, the agent
    # would fail at once.
    args = ["--address", f"127.0.0.1:{port}", "--root", str(workspace), "--user", "nobody"]
    return subprocess.Popen(
        [sys.executable, "-c", _ACTIVATE, str(listener.fileno()), str(AGENT), *args],
        pass_fds=(listener.fileno(),),
    )


def wait_healthy(url: str, process: subprocess.Popen[bytes]) -> httpx.Response:
    deadline = time.monotonic() + 15
    while True:
        assert process.poll() is None, f"the agent exited with {process.returncode}"
        with contextlib.suppress(httpx.TransportError):
            return httpx.get(url + "/health", timeout=2)
        assert time.monotonic() < deadline, "the agent never answered"
        time.sleep(0.05)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(128)
        yield s


def test_the_port_stays_bound_while_the_agent_restarts(
    listener: socket.socket, workspace: Path
) -> None:
    port = listener.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    first = activated(listener, workspace)
    try:
        assert wait_healthy(url, first).headers["x-agent-initialized"] == "false"
        assert httpx.post(url + "/init", json={"accessToken": TOKEN}).status_code == 204
        fd3 = Path(f"/proc/{first.pid}/fdinfo/3").read_text()
        flags = int(
            next(line for line in fd3.splitlines() if line.startswith("flags:")).split()[1], 8
        )
        assert flags & os.O_CLOEXEC, "the inherited socket would pass to commands"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)

    # The agent is gone; its port is not free for anyone else to take.
    with socket.socket() as thief, pytest.raises(OSError) as taken:
        thief.bind(("127.0.0.1", port))
    assert taken.value.errno == errno.EADDRINUSE
    # A request made meanwhile waits in the queue, and the next agent answers it.
    waiting = socket.create_connection(("127.0.0.1", port))
    waiting.sendall(HEAD)

    second = activated(listener, workspace)
    try:
        waiting.settimeout(15)
        assert waiting.recv(4096).startswith(b"HTTP/1.1 204 ")
        waiting.close()
        health = wait_healthy(url, second)
        assert health.headers["x-agent-initialized"] == "false"  # a restart needs /init again
        assert httpx.post(url + "/init", json={"accessToken": TOKEN}).status_code == 204
        listed = httpx.post(
            url + "/process.Process/List",
            json={},
            headers={"connect-protocol-version": "1", **AUTH},
        )
        assert listed.status_code == 200, listed.text
    finally:
        second.terminate()
        second.wait(10)
    # After a clean stop too, the port stays held.
    with socket.socket() as thief, pytest.raises(OSError):
        thief.bind(("127.0.0.1", port))


def test_commands_see_neither_the_socket_nor_its_variables(
    listener: socket.socket, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    process = activated(listener, workspace)
    try:
        wait_healthy(url, process)
        assert httpx.post(url + "/init", json={"accessToken": TOKEN}).status_code == 204
        debug_env(monkeypatch, url)
        sandbox = holding_token(Sandbox.create())
        for user in ("root", "nobody"):
            seen = sandbox.commands.run(
                "env; for f in /proc/self/fd/*; do readlink $f; done; true", user=user
            ).stdout
            assert "LISTEN_" not in seen
            assert "socket:" not in seen, seen
    finally:
        process.terminate()
        process.wait(10)


# -- the OOM killer -------------------------------------------------------------------------------


def oom_score_adj(pid: int | str) -> int:
    return int(Path(f"/proc/{pid}/oom_score_adj").read_text())


def commands_scores(sandbox: Sandbox) -> dict[str, int]:
    """The score of a command as root, as nobody, and of a terminal's shell as nobody."""
    seen = {
        user: int(sandbox.commands.run("cat /proc/self/oom_score_adj", user=user).stdout)
        for user in ("root", "nobody")
    }
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80), user="nobody")
    out = bytearray()
    sandbox.pty.send_stdin(terminal.pid, b'echo ad""j=$(cat /proc/self/oom_score_adj); exit\n')
    for _, _, chunk in terminal:
        out.extend(chunk or b"")
    text = bytes(out).decode(errors="replace")
    seen["terminal"] = int(text.split("adj=", 1)[1].split()[0])
    return seen


@pytest.mark.parametrize("terminal", [None, (24, 80)], ids=["pipes", "terminal"])
@pytest.mark.parametrize(("agent", "command"), [("-900", "0"), ("0", "0"), ("300", "300")])
def test_commands_do_not_keep_the_agents_oom_protection(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    terminal: tuple[int, int] | None,
    agent: str,
    command: str,
) -> None:
    """Between fork and exec the child raises a score below 0 to 0, and leaves any other.

    Lowering a process's own score, as the unit does for the agent, needs CAP_SYS_RESOURCE,
    which this project's CI machines withhold even from root: so the child's write is pointed
    at a file standing for its /proc/self/oom_score_adj, which the fork inherits, and the
    command proves it ran after it by reading the file itself.
    """
    score = tmp_path / "oom_score_adj"
    score.write_text(agent)
    monkeypatch.setattr(launch, "OOM_SCORE_ADJ", str(score))
    me = pwd.getpwuid(os.geteuid())
    user = User(me.pw_name, me.pw_uid, me.pw_gid, (me.pw_gid,), tmp_path)
    seen = tmp_path / "seen"
    script = f"cat {score} > {seen}"
    started = launch.Launch(
        argv=("/bin/sh", "-c", script),
        env={},
        cwd=tmp_path,
        user=user,
        stdin=False,
        terminal=terminal,
    )
    child = launch.spawn(started, privileged=False)
    try:
        assert child.popen.wait(10) == 0
    finally:
        for fd in child.fds:
            os.close(fd)
    assert (score.read_text(), seen.read_text()) == (command, command)


def test_a_score_above_zero_is_the_commands_too(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod's kubelet may set one; lowering it would need privilege, and isn't the agent's."""
    running = start(workspace, wrapper=("choom", "-n", "300", "--"))
    try:
        debug_env(monkeypatch, running.url)
        scores = commands_scores(holding_token(Sandbox.create()))
        assert scores == {"root": 300, "nobody": 300, "terminal": 300}
    finally:
        stop(running)
