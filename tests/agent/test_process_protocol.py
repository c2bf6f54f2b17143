"""The Process service on the wire, where the SDK hides it: envelopes, keepalives, timeouts."""

import base64
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent.sdk.agents import AUTH, STREAM, Envelope, Running, envelope, envelopes, gone

pytestmark = pytest.mark.e2e  # starts agents or gateways


def bash(command: str, **fields: Any) -> dict[str, Any]:
    return {"process": {"cmd": "/bin/bash", "args": ["-c", command]}, **fields}


@contextmanager
def stream(
    agent: Running, method: str, body: dict[str, Any], **headers: str
) -> Iterator[Iterator[Envelope]]:
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST",
            f"{agent.url}/process.Process/{method}",
            content=envelope(body),
            headers={**STREAM, **headers},
        ) as response,
    ):
        assert response.status_code == 200
        yield envelopes(response)


def run(agent: Running, body: dict[str, Any], **headers: str) -> list[Envelope]:
    with stream(agent, "Start", body, **headers) as events:
        return list(events)


def call(agent: Running, method: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{agent.url}/process.Process/{method}",
        json=body,
        headers={"connect-protocol-version": "1", **AUTH},
        timeout=30,
    )


def pid_of(first: Envelope) -> int:
    flags, message = first
    assert flags == 0
    pid = message["event"]["start"]["pid"]
    assert isinstance(pid, int)
    return pid


def stdout(events: list[Envelope]) -> bytes:
    return b"".join(
        base64.b64decode(m["event"]["data"]["stdout"])
        for _, m in events
        if "data" in m.get("event", {}) and "stdout" in m["event"]["data"]
    )


def test_start_streams_start_data_and_one_end_then_the_end_of_stream(agent: Running) -> None:
    events = run(agent, bash("printf 'a\\n'; exit 2", stdin=False))
    pid = pid_of(events[0])
    assert events == [
        (0, {"event": {"start": {"pid": pid}}}),
        (0, {"event": {"data": {"stdout": "YQo="}}}),
        (
            0,
            {
                "event": {
                    "end": {
                        "exitCode": 2,
                        "exited": True,
                        "status": "exit status 2",
                        "error": "exit status 2",
                    }
                }
            },
        ),
        (2, {}),
    ]


def test_success_ends_without_an_error(agent: Running) -> None:
    events = run(agent, bash("echo out; echo err >&2"))
    data = [m["event"]["data"] for _, m in events[1:-2]]
    assert sorted(data, key=str) == [{"stderr": "ZXJyCg=="}, {"stdout": "b3V0Cg=="}]
    assert events[-2:] == [
        (0, {"event": {"end": {"exited": True, "status": "exit status 0"}}}),
        (2, {}),
    ]


def test_numbers_no_int_can_read_are_ignored_not_a_crash(agent: Running) -> None:
    # '\u00b2' is a digit to str.isdigit() but not to int(). (connectrpc itself refuses a
    # Connect-Timeout-Ms that is not 1 to 10 ASCII digits.)
    events = run(agent, bash("echo ok"), **{"keepalive-ping-interval": "\u00b2".encode()})
    assert stdout(events) == b"ok\n"
    assert events[-2][1]["event"]["end"]["exited"] is True


def test_keepalives_fill_the_silences(agent: Running) -> None:
    events = run(agent, bash("sleep 2.5"), **{"keepalive-ping-interval": "1"})
    kinds = [next(iter(m["event"])) if m else "end-of-stream" for _, m in events]
    assert kinds == ["start", "keepalive", "keepalive", "end", "end-of-stream"]


def test_the_timeout_kills_the_command_and_what_it_started(agent: Running) -> None:
    started = time.monotonic()
    with stream(
        agent, "Start", bash("sleep 30 & echo $!; wait"), **{"connect-timeout-ms": "1000"}
    ) as events:
        pid = pid_of(next(events))
        _, output = next(events)
        child = int(base64.b64decode(output["event"]["data"]["stdout"]))
        rest = list(events)
    assert rest == [
        (
            2,
            {
                "error": {
                    "code": "deadline_exceeded",
                    "message": f"process {pid} ran past its timeout and was killed",
                }
            },
        )
    ]
    assert 0.9 < time.monotonic() - started < 4
    assert gone(pid)
    assert gone(child)


def test_a_timeout_of_zero_is_no_timeout(agent: Running) -> None:
    events = run(agent, bash("sleep 0.3; echo fine"), **{"connect-timeout-ms": "0"})
    assert stdout(events) == b"fine\n"


def test_a_late_connect_still_gets_start_and_end(agent: Running) -> None:
    pid = pid_of(run(agent, bash("exit 4"))[0])
    with stream(agent, "Connect", {"process": {"pid": pid}}) as events:
        assert list(events) == [
            (0, {"event": {"start": {"pid": pid}}}),
            (
                0,
                {
                    "event": {
                        "end": {
                            "exitCode": 4,
                            "exited": True,
                            "status": "exit status 4",
                            "error": "exit status 4",
                        }
                    }
                },
            ),
            (2, {}),
        ]


def test_a_command_outlives_its_stream_and_can_be_found_again(agent: Running) -> None:
    with stream(agent, "Start", bash("sleep 1; echo tagged", tag="job")) as events:
        pid = pid_of(next(events))
    listed = call(agent, "List", {}).json()
    assert listed == {
        "processes": [
            {
                "config": {"cmd": "/bin/bash", "args": ["-c", "sleep 1; echo tagged"]},
                "pid": pid,
                "tag": "job",
            }
        ]
    }
    with stream(agent, "Connect", {"process": {"tag": "job"}}) as events:
        rest = list(events)
    assert rest[0] == (0, {"event": {"start": {"pid": pid}}})
    assert stdout(rest) == b"tagged\n"
    assert rest[-2] == (0, {"event": {"end": {"exited": True, "status": "exit status 0"}}})
    assert call(agent, "List", {}).json() == {}


def test_sigterm_ends_the_command_with_terminated(agent: Running) -> None:
    with stream(agent, "Start", bash("sleep 30")) as events:
        pid = pid_of(next(events))
        answer = call(agent, "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGTERM"})
        assert (answer.status_code, answer.json()) == (200, {})
        assert list(events) == [
            (
                0,
                {
                    "event": {
                        "end": {
                            "exitCode": -1,
                            "status": "signal: terminated",
                            "error": "signal: terminated",
                        }
                    }
                },
            ),
            (2, {}),
        ]


def test_only_sigkill_and_sigterm_can_be_sent(agent: Running) -> None:
    with stream(agent, "Start", bash("sleep 30")) as events:
        pid = pid_of(next(events))
        answer = call(
            agent, "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_UNSPECIFIED"}
        )
        assert (answer.status_code, answer.json()) == (
            501,
            {
                "code": "unimplemented",
                "message": "invalid signal: SIGNAL_UNSPECIFIED; only SIGNAL_SIGKILL and SIGNAL_SIGTERM are supported",
            },
        )
        call(agent, "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
        rest = list(events)
    assert rest[0][1]["event"]["end"]["status"] == "signal: killed"


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("SendSignal", {"process": {"pid": 999999}, "signal": "SIGNAL_SIGKILL"}),
        ("SendInput", {"process": {"pid": 999999}, "input": {"stdin": "eA=="}}),
        ("CloseStdin", {"process": {"pid": 999999}}),
        ("Update", {"process": {"pid": 999999}, "pty": {"size": {"rows": 1, "cols": 1}}}),
    ],
)
def test_an_unknown_pid_is_not_found(agent: Running, method: str, body: dict[str, Any]) -> None:
    answer = call(agent, method, body)
    assert (answer.status_code, answer.json()) == (
        404,
        {"code": "not_found", "message": "process with pid 999999 not found"},
    )


def test_connecting_to_an_unknown_tag_is_not_found(agent: Running) -> None:
    with stream(agent, "Connect", {"process": {"tag": "nothing"}}) as events:
        assert list(events) == [
            (2, {"error": {"code": "not_found", "message": "process with tag nothing not found"}})
        ]


def test_a_missing_cwd_is_refused_before_anything_runs(agent: Running) -> None:
    events = run(agent, {"process": {"cmd": "/bin/true", "cwd": "/nonexistent"}})
    assert events == [
        (
            2,
            {
                "error": {
                    "code": "invalid_argument",
                    "message": "cwd '/nonexistent' does not exist",
                }
            },
        )
    ]


def test_a_missing_executable_is_an_invalid_argument(agent: Running) -> None:
    assert run(agent, {"process": {"cmd": "/nonexistent/sh"}}) == [
        (
            2,
            {
                "error": {
                    "code": "invalid_argument",
                    "message": "cannot start '/nonexistent/sh': No such file or directory",
                }
            },
        )
    ]


def test_a_cwd_the_user_may_not_enter_is_named(agent: Running, tmp_path: Path) -> None:
    private = tmp_path / "private"  # pytest's temp folders are root's alone
    private.mkdir(mode=0o700)
    events = run(agent, {"process": {"cmd": "/bin/pwd", "cwd": str(private)}})
    assert events == [
        (
            2,
            {
                "error": {
                    "code": "invalid_argument",
                    "message": f"cwd '{private}' is not accessible to nobody",
                }
            },
        )
    ]


def test_an_unknown_user_is_unauthenticated(agent: Running) -> None:
    token = base64.b64encode(b"no-such-user-here:").decode()
    events = run(agent, bash("id"), authorization=f"Basic {token}")
    assert events == [
        (
            2,
            {
                "error": {
                    "code": "unauthenticated",
                    "message": "invalid username: 'no-such-user-here'",
                }
            },
        )
    ]


def test_a_background_child_holding_the_pipes_does_not_hold_the_end(agent: Running) -> None:
    started = time.monotonic()
    events = run(agent, bash("sleep 1000 & echo $!"))
    child = int(stdout(events))
    try:
        assert time.monotonic() - started < 3
        assert events[-2] == (0, {"event": {"end": {"exited": True, "status": "exit status 0"}}})
        assert not gone(child, within=0.1), "the end came because the child was killed"
    finally:
        os.kill(child, signal.SIGKILL)


def test_input_streams_to_stdin_until_closed(agent: Running) -> None:
    with stream(agent, "Start", bash("cat")) as events:
        pid = pid_of(next(events))
        body = envelope({"start": {"process": {"pid": pid}}}) + b"".join(
            envelope({"data": {"input": {"stdin": base64.b64encode(part).decode()}}})
            for part in (b"one ", b"two\n")
        )
        answer = httpx.post(
            f"{agent.url}/process.Process/StreamInput", content=body, headers=STREAM, timeout=30
        )
        assert (answer.status_code, list(envelopes(answer))) == (200, [(0, {}), (2, {})])
        call(agent, "SendInput", {"process": {"pid": pid}, "input": {"stdin": "dGhyZWUK"}})
        call(agent, "CloseStdin", {"process": {"pid": pid}})
        rest = list(events)
    assert stdout(rest) == b"one two\nthree\n"
    assert rest[-2][1]["event"]["end"]["status"] == "exit status 0"


def test_input_needs_an_open_stdin(agent: Running) -> None:
    with stream(agent, "Start", bash("sleep 30", stdin=False)) as events:
        pid = pid_of(next(events))
        answer = call(agent, "SendInput", {"process": {"pid": pid}, "input": {"stdin": "eA=="}})
        call(agent, "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
        list(events)
    assert (answer.status_code, answer.json()) == (
        400,
        {
            "code": "failed_precondition",
            "message": f"process {pid} has no open stdin: it was started without one, or it was closed",
        },
    )


def test_input_nobody_reads_waits_no_longer_than_the_request(agent: Running) -> None:
    big = base64.b64encode(b"x" * 300_000).decode()  # beyond any pipe's buffer
    with stream(agent, "Start", bash("sleep 30")) as events:
        pid = pid_of(next(events))
        started = time.monotonic()
        answer = httpx.post(
            f"{agent.url}/process.Process/SendInput",
            json={"process": {"pid": pid}, "input": {"stdin": big}},
            headers={"connect-protocol-version": "1", "connect-timeout-ms": "1000", **AUTH},
            timeout=30,
        )
        assert 0.9 < time.monotonic() - started < 4
        assert (answer.status_code, answer.json()) == (
            504,
            {
                "code": "deadline_exceeded",
                "message": "the process did not take its input before the timeout",
            },
        )
        call(agent, "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
        list(events)


def test_input_nobody_reads_fails_when_the_command_exits(agent: Running) -> None:
    big = base64.b64encode(b"x" * 300_000).decode()
    with stream(agent, "Start", bash("sleep 1")) as events:
        pid = pid_of(next(events))
        answer = call(agent, "SendInput", {"process": {"pid": pid}, "input": {"stdin": big}})
        list(events)
    assert answer.status_code == 400
    assert answer.json()["code"] == "failed_precondition"
    assert answer.json()["message"].startswith(f"process {pid} ")


def test_stream_input_must_first_name_the_process(agent: Running) -> None:
    answer = httpx.post(
        f"{agent.url}/process.Process/StreamInput",
        content=envelope({"data": {"input": {"stdin": "eA=="}}}),
        headers=STREAM,
        timeout=30,
    )
    assert list(envelopes(answer)) == [
        (
            2,
            {
                "error": {
                    "code": "invalid_argument",
                    "message": "the first StreamInput message must be start, naming the process",
                }
            },
        )
    ]


def test_a_command_without_a_pty_cannot_be_resized(agent: Running) -> None:
    with stream(agent, "Start", bash("sleep 30")) as events:
        pid = pid_of(next(events))
        answer = call(
            agent, "Update", {"process": {"pid": pid}, "pty": {"size": {"rows": 5, "cols": 5}}}
        )
        call(agent, "SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
        list(events)
    assert (answer.status_code, answer.json()) == (
        400,
        {"code": "failed_precondition", "message": f"process {pid} has no pty"},
    )


def test_stopping_the_agent_kills_its_commands(agent: Running) -> None:
    with stream(agent, "Start", bash("sleep 30")) as events:
        pid = pid_of(next(events))
    agent.process.terminate()
    agent.process.wait(10)
    assert gone(pid)


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of each child of `pid`, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append((int(stat.parent.name), fields[0]))
    return found


def test_many_commands_leave_no_zombies_and_no_open_fds(agent: Running) -> None:
    agent_pid = agent.process.pid
    fds = Path(f"/proc/{agent_pid}/fd")
    body = envelope({"process": {"cmd": "/bin/echo", "args": ["x"]}})
    missing = envelope({"process": {"cmd": "/nonexistent/echo"}})
    with httpx.Client(timeout=30) as client:

        def once() -> None:
            with client.stream(
                "POST", f"{agent.url}/process.Process/Start", content=body, headers=STREAM
            ) as response:
                assert [m for _, m in envelopes(response)][-2]["event"]["end"]["exited"]

        once()
        before = len(list(fds.iterdir()))
        for n in range(200):
            once()
            if n % 20 == 0:  # a start that fails after its pipes were made
                with client.stream(
                    "POST", f"{agent.url}/process.Process/Start", content=missing, headers=STREAM
                ) as response:
                    assert "error" in next(envelopes(response))[1]
        after = len(list(fds.iterdir()))
    assert after == before
    assert children(agent_pid) == []
