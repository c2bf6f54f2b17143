"""Commands as users run them: `sandbox.commands` and `sandbox.pty` of the real SDK."""

import time

import pytest
from e2b import (
    CommandExitException,
    InvalidArgumentException,
    PtySize,
    Sandbox,
    SandboxException,
    TimeoutException,
)

from tests.agent.sdk.agents import Running, gone

pytestmark = pytest.mark.e2e  # starts agents or gateways


def test_output_reaches_the_callbacks_while_the_command_runs(sandbox: Sandbox) -> None:
    seen: list[tuple[str, str, float]] = []
    result = sandbox.commands.run(
        "echo first; echo oops >&2; sleep 2; echo second",
        on_stdout=lambda text: seen.append(("out", text, time.monotonic())),
        on_stderr=lambda text: seen.append(("err", text, time.monotonic())),
    )
    assert [(kind, text) for kind, text, _ in seen] == [
        ("out", "first\n"),
        ("err", "oops\n"),
        ("out", "second\n"),
    ]
    assert seen[2][2] - seen[0][2] > 1.5, "the first line came only with the last"
    assert (result.stdout, result.stderr, result.exit_code) == ("first\nsecond\n", "oops\n", 0)


def test_a_background_command_can_be_waited_for(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("sleep 0.5; echo done", background=True)
    assert handle.pid > 0
    assert handle.wait().stdout == "done\n"


def test_a_non_zero_exit_raises_with_the_output(sandbox: Sandbox) -> None:
    with pytest.raises(CommandExitException) as caught:
        sandbox.commands.run("echo out; echo err >&2; exit 3")
    assert caught.value.exit_code == 3
    assert caught.value.error == "exit status 3"
    assert (caught.value.stdout, caught.value.stderr) == ("out\n", "err\n")


def test_stdin_is_empty_unless_asked_for(sandbox: Sandbox) -> None:
    started = time.monotonic()
    assert sandbox.commands.run("cat; echo eof").stdout == "eof\n"
    assert time.monotonic() - started < 5


def test_input_reaches_stdin_until_it_is_closed(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.send_stdin(handle.pid, "hello ")
    handle.send_stdin(b"world\n")
    sandbox.commands.close_stdin(handle.pid)
    assert handle.wait().stdout == "hello world\n"


def test_input_streams_to_stdin(sandbox: Sandbox) -> None:
    if not hasattr(sandbox.commands, "stream_input"):
        pytest.skip("this SDK has no commands.stream_input")
    handle = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.stream_input(handle.pid, ["one ", b"two ", "three\n"])
    sandbox.commands.close_stdin(handle.pid)
    assert handle.wait().stdout == "one two three\n"


def test_environment_has_the_user_and_the_request_variables(
    sandbox: Sandbox, agent: Running
) -> None:
    result = sandbox.commands.run(
        'echo "$GREETING|$USER|$LOGNAME|$HOME"', envs={"GREETING": "hello there"}
    )
    assert result.stdout == f"hello there|nobody|nobody|{agent.root}\n"


def test_commands_run_as_the_default_user_in_the_workspace(
    sandbox: Sandbox, agent: Running
) -> None:
    assert sandbox.commands.run("id -un; pwd").stdout == f"nobody\n{agent.root}\n"


def test_commands_run_as_the_user_asked_for(sandbox: Sandbox) -> None:
    assert sandbox.commands.run("id -un; echo $HOME", user="root").stdout == "root\n/root\n"


def test_a_relative_cwd_is_inside_the_workspace(sandbox: Sandbox, agent: Running) -> None:
    (agent.root / "sub").mkdir()
    assert sandbox.commands.run("pwd", cwd="sub").stdout == f"{agent.root}/sub\n"
    assert sandbox.commands.run("pwd", cwd="/usr").stdout == "/usr\n"


def test_a_missing_cwd_is_an_invalid_argument(sandbox: Sandbox, agent: Running) -> None:
    with pytest.raises(InvalidArgumentException, match=r"cwd '/nonexistent/dir' does not exist"):
        sandbox.commands.run("pwd", cwd="/nonexistent/dir")
    with pytest.raises(InvalidArgumentException, match=rf"cwd '{agent.root}/missing' does not"):
        sandbox.commands.run("pwd", cwd="missing")


def test_a_timeout_raises_and_kills_the_command(sandbox: Sandbox) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutException):
        sandbox.commands.run("sleep 10", timeout=1)
    assert time.monotonic() - started < 5
    handle = sandbox.commands.run("sleep 10", background=True, timeout=1)
    with pytest.raises(TimeoutException):
        handle.wait()
    assert gone(handle.pid)
    deadline = time.monotonic() + 5
    while sandbox.commands.list() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox.commands.list() == []


def test_kill_ends_a_command_with_a_signal(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("sleep 30", background=True)
    assert sandbox.commands.kill(handle.pid) is True
    with pytest.raises(CommandExitException) as caught:
        handle.wait()
    assert (caught.value.exit_code, caught.value.error) == (-1, "signal: killed")
    assert sandbox.commands.kill(handle.pid) is False
    assert gone(handle.pid)


def test_list_shows_running_commands_as_they_were_started(sandbox: Sandbox, agent: Running) -> None:
    (agent.root / "sub").mkdir()
    handle = sandbox.commands.run("sleep 30", background=True, envs={"A": "1"}, cwd="sub")
    try:
        [info] = sandbox.commands.list()
        assert (info.pid, info.tag, info.cmd, info.args, info.envs, info.cwd) == (
            handle.pid,
            None,
            "/bin/bash",
            ["-l", "-c", "sleep 30"],
            {"A": "1"},
            "sub",
        )
    finally:
        handle.kill()


def test_connect_reattaches_to_a_running_command(sandbox: Sandbox) -> None:
    handle = sandbox.commands.run("echo one; sleep 1; echo two", background=True)
    handle.disconnect()
    again = sandbox.commands.connect(handle.pid)
    assert again.pid == handle.pid
    result = again.wait()
    assert result.stdout.endswith("two\n")
    assert result.exit_code == 0


def test_a_pty_runs_a_login_shell_on_a_terminal_that_can_be_resized(sandbox: Sandbox) -> None:
    output = bytearray()
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    sandbox.pty.send_stdin(terminal.pid, b"stty size; echo $TERM; ")
    sandbox.pty.send_stdin(
        terminal.pid, b"test $(cut -d' ' -f7 /proc/$$/stat) != 0 && echo c''tty\n"
    )
    events = iter(terminal)
    while b"ctty\r\n" not in output:  # the first line has run: now resize
        _, _, chunk = next(events)
        output.extend(chunk or b"")
    sandbox.pty.resize(terminal.pid, PtySize(rows=30, cols=100))
    sandbox.pty.send_stdin(terminal.pid, b"stty size; exit 7\n")
    for _, _, chunk in events:
        output.extend(chunk or b"")
    with pytest.raises(CommandExitException) as caught:
        terminal.wait()
    assert caught.value.exit_code == 7
    text = output.decode(errors="replace").replace("\r\n", "\n")
    assert "24 80\nxterm-256color\nctty\n" in text
    assert "30 100\n" in text


def test_a_pty_can_be_killed(sandbox: Sandbox) -> None:
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    assert sandbox.pty.kill(terminal.pid) is True
    with pytest.raises(CommandExitException) as caught:
        terminal.wait()
    assert caught.value.exit_code == -1
    assert gone(terminal.pid)


def test_in_a_pod_commands_run_as_the_pods_user(pod_sandbox: Sandbox, pod_agent: Running) -> None:
    result = pod_sandbox.commands.run("id -un; echo $HOME; pwd")
    assert result.stdout == f"nobody\n{pod_agent.root}\n{pod_agent.root}\n"


def test_in_a_pod_another_user_is_refused(pod_sandbox: Sandbox) -> None:
    with pytest.raises(SandboxException) as caught:
        pod_sandbox.commands.run("id -un", user="root")
    assert "this sandbox runs everything as its own user 'nobody'" in str(caught.value)
    assert "it cannot act as 'root'" in str(caught.value)
