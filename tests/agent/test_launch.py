"""What a Start request becomes before anything runs, and how an exit is reported."""

import os
import subprocess
from pathlib import Path

import pytest
from workspace_agent.errors import AgentError
from workspace_agent.events import end_event
from workspace_agent.launch import DEFAULT_PATH, environment, working_directory
from workspace_agent.users import User

USER = User(name="dev", uid=1000, gid=1000, groups=(1000,), home=Path("/workspace"))


def test_the_request_overrides_the_session_which_overrides_the_basics() -> None:
    env = environment(
        USER,
        {"PATH": "/opt/bin", "A": "session", "B": "session"},
        {"B": "request", "HOME": "/elsewhere"},
        terminal=False,
    )
    assert env == {
        "PATH": "/opt/bin",
        "HOME": "/elsewhere",
        "USER": "dev",
        "LOGNAME": "dev",
        "A": "session",
        "B": "request",
    }


def test_a_terminal_gets_a_term_the_request_may_replace() -> None:
    assert environment(USER, {}, {}, terminal=True)["TERM"] == "xterm-256color"
    assert environment(USER, {}, {"TERM": "dumb"}, terminal=True)["TERM"] == "dumb"
    assert environment(USER, {}, {}, terminal=False) == {
        "PATH": DEFAULT_PATH,
        "HOME": "/workspace",
        "USER": "dev",
        "LOGNAME": "dev",
    }


@pytest.mark.parametrize(
    ("envs", "message"),
    [
        pytest.param({"A=B": "x"}, "invalid environment variable 'A=B'", id="equals-in-name"),
        pytest.param({"": "x"}, "invalid environment variable ''", id="empty-name"),
        pytest.param({"A": "x\0y"}, "environment variable A holds a NUL byte", id="nul-in-value"),
    ],
)
def test_environment_variables_that_cannot_exist_are_refused(
    envs: dict[str, str], message: str
) -> None:
    with pytest.raises(AgentError) as caught:
        environment(USER, {}, envs, terminal=False)
    assert caught.value.message == message


def test_cwd_defaults_to_the_workdir_and_resolves_against_it(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    assert working_directory(tmp_path, Path("/"), None) == tmp_path
    assert working_directory(tmp_path, Path("/"), "") == tmp_path
    assert working_directory(tmp_path, Path("/"), "sub") == tmp_path / "sub"
    assert working_directory(tmp_path, Path("/"), "sub/../sub/.") == tmp_path / "sub"
    assert working_directory(tmp_path, Path("/"), "/usr") == Path("/usr")
    assert working_directory(Path("/"), tmp_path, "~/sub") == tmp_path / "sub"
    assert working_directory(Path("/"), tmp_path, "~") == tmp_path


@pytest.mark.parametrize(
    ("cwd", "message"),
    [
        pytest.param("missing", "cwd '{root}/missing' does not exist", id="missing"),
        pytest.param("file", "cwd '{root}/file' is not a directory", id="a-file"),
        pytest.param("a\0b", "cwd holds a NUL byte", id="nul"),
    ],
)
def test_a_cwd_that_is_no_directory_is_an_invalid_argument(
    tmp_path: Path, cwd: str, message: str
) -> None:
    (tmp_path / "file").touch()
    with pytest.raises(AgentError) as caught:
        working_directory(tmp_path, Path("/"), cwd)
    assert caught.value.message == message.format(root=tmp_path)


def status_of(script: str) -> int:
    """The raw wait status of a real shell running `script`."""
    child = subprocess.Popen(["/bin/sh", "-c", script])
    _, status = os.waitpid(child.pid, 0)
    child.returncode = 0  # reaped here; keep Popen from waiting again
    return status


@pytest.mark.parametrize(
    ("script", "want"),
    [
        pytest.param("exit 0", (0, True, "exit status 0", None), id="success"),
        pytest.param("exit 2", (2, True, "exit status 2", "exit status 2"), id="failure"),
        pytest.param(
            "kill -KILL $$", (-1, False, "signal: killed", "signal: killed"), id="sigkill"
        ),
        pytest.param(
            "kill -TERM $$",
            (-1, False, "signal: terminated", "signal: terminated"),
            id="sigterm",
        ),
        pytest.param(
            "kill -INT $$", (-1, False, "signal: interrupt", "signal: interrupt"), id="sigint"
        ),
    ],
)
def test_the_end_reads_like_gos_process_state(
    script: str, want: tuple[int, bool, str, str | None]
) -> None:
    end = end_event(status_of(script))
    got = (end.exit_code, end.exited, end.status, end.error if end.has_field("error") else None)
    assert got == want


def test_an_exit_someone_else_reaped_still_ends() -> None:
    end = end_event(None)
    assert (end.exit_code, end.exited, end.status) == (-1, False, "wait: no child processes")
