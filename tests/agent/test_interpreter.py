"""The code interpreter the agent runs: Jupyter's messages as the SDK reads them, the order
kernels really send them in, `/init`'s `codeInterpreter`, and the child the agent keeps alive.

The SDKs' own runs through the gateway are tests/gateway/test_interpreter_sdk.py and
test_js_sdk.py.
"""

import asyncio
import getpass
import json
import os
import signal
from pathlib import Path
from queue import Empty
from typing import Any

import httpx
import pytest
from workspace_agent.interpreter import kernels, outputs
from workspace_agent.interpreting import Interpreter
from workspace_agent.process import ProcessService
from workspace_agent.server import build_app
from workspace_agent.state import Agent
from workspace_agent.users import Users

from tests.ports import free_port

pytestmark = pytest.mark.e2e  # starts agents or gateways


def message(kind: str, msg_id: str = "run", **content: Any) -> dict[str, Any]:
    return {"msg_type": kind, "parent_header": {"msg_id": msg_id}, "content": content}


def test_streams_results_errors_and_counts_become_the_sdk_s_lines() -> None:
    out = outputs.translate(message("stream", name="stdout", text="hi\n"))
    assert out is not None
    assert (out["type"], out["text"]) == ("stdout", "hi\n")
    err = outputs.translate(message("stream", name="stderr", text="oops\n"))
    assert err is not None
    assert err["type"] == "stderr"
    data = {"text/plain": "42", "image/png": "iVBOR", "application/vnd.custom+json": {"a": 1}}
    assert outputs.translate(message("execute_result", data=data)) == {
        "type": "result",
        "is_main_result": True,
        "text": "42",
        "png": "iVBOR",
        "extra": {"application/vnd.custom+json": {"a": 1}},
    }
    shown = outputs.translate(message("display_data", data={"text/html": "<b>b</b>"}))
    assert shown == {"type": "result", "is_main_result": False, "html": "<b>b</b>"}
    error = message("error", ename="ValueError", evalue="bad", traceback=["one", "two"])
    assert outputs.translate(error) == {
        "type": "error",
        "name": "ValueError",
        "value": "bad",
        "traceback": "one\ntwo",
    }
    counted = message("execute_input", execution_count=3, code="x")
    assert outputs.translate(counted) == {"type": "number_of_executions", "execution_count": 3}
    assert outputs.translate(message("status", execution_state="busy")) is None
    assert json.loads(outputs.line({"type": "stdout", "text": "é"})) == {
        "type": "stdout",
        "text": "é",
    }


class Kernel:
    """A kernel's client and manager that say what they are given, in that order."""

    def __init__(self, messages: list[dict[str, Any]], *, alive: bool = True) -> None:
        self.messages = messages
        self.alive = alive

    async def get_iopub_msg(self, timeout: float) -> dict[str, Any]:  # noqa: ASYNC109  # jupyter_client's
        if not self.messages:
            await asyncio.sleep(min(timeout, 0.01))
            raise Empty
        return self.messages.pop(0)

    async def is_alive(self) -> bool:
        return self.alive


def context(kernel: Kernel, language: kernels.Language) -> kernels.Context:
    return kernels.Context("c", language, Path("/"), manager=kernel, client=kernel)  # type: ignore[arg-type]


async def replies(kernel: Kernel, language: kernels.Language) -> list[str]:
    found = [m["msg_type"] async for m in kernels._replies(context(kernel, language), "run")]
    return found


async def test_outputs_that_trail_deno_s_idle_are_still_the_run_s() -> None:
    """Deno's kernel was seen to publish `idle` before a run's stream and result."""
    sent = [
        message("status", execution_state="busy"),
        message("execute_input", execution_count=1),
        message("status", execution_state="idle"),
        message("stream", name="stdout", text="hi\n"),
        message("execute_result", data={"text/plain": "42"}),
        message("stream", msg_id="another run", name="stdout", text="not ours\n"),
    ]
    assert await replies(Kernel(list(sent)), kernels.JAVASCRIPT) == [
        "execute_input",
        "stream",
        "execute_result",
    ]
    # IPython's kernel sends `idle` last: a run ends there, and what follows is the next's.
    assert await replies(Kernel(list(sent)), kernels.PYTHON) == ["execute_input"]


async def test_a_kernel_that_dies_mid_run_ends_the_run_with_an_error() -> None:
    died = await replies(Kernel([message("execute_input")], alive=False), kernels.PYTHON)
    assert died == ["execute_input", "error"]
    assert outputs.translate(kernels._died())["name"] == "KernelDied"  # type: ignore[index]


@pytest.fixture
def in_process(tmp_path: Path) -> tuple[Agent, httpx.AsyncClient]:
    agent = Agent(root=tmp_path, users=Users(tmp_path, getpass.getuser()))
    app = build_app(agent, ProcessService(agent))
    return agent, httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a")


async def test_init_asks_for_the_interpreter_by_a_boolean_and_only_where_it_can_run(
    in_process: tuple[Agent, httpx.AsyncClient],
) -> None:
    agent, client = in_process
    async with client:
        odd = await client.post("/init", json={"accessToken": "t", "codeInterpreter": "yes"})
        assert (odd.status_code, odd.json()["message"]) == (
            400,
            "codeInterpreter must be true or false",
        )
        # The tests' agent was made without one: refused, and nothing of the /init applied.
        none = await client.post("/init", json={"accessToken": "t", "codeInterpreter": True})
        assert none.status_code == 400
        assert none.json()["message"] == (
            "codeInterpreter: this sandbox cannot run it: "
            "the agent was started without a code interpreter"
        )
        assert not agent.session.initialised
        done = await client.post("/init", json={"accessToken": "t", "codeInterpreter": False})
        assert done.status_code == 204


async def execute(port: int, code: str) -> str:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        answer = await client.post("/execute", json={"code": code})
    (result,) = [r for r in map(json.loads, answer.text.splitlines()) if r["type"] == "result"]
    return str(result["text"])


async def test_the_agent_keeps_its_interpreter_running_with_init_s_variables(
    tmp_path: Path,
) -> None:
    port = free_port()
    users = Users(tmp_path, getpass.getuser())
    interpreter = Interpreter(("127.0.0.1", port), tmp_path, privileged=False)
    user = users.resolve(None)
    try:
        await interpreter.configure(user, {"FROM_INIT": "1"})
        code = "import os; os.environ.get('FROM_INIT'), os.getcwd()"
        assert await execute(port, code) == repr(("1", str(tmp_path)))
        first = interpreter.process
        assert first is not None
        # The same settings again (an agent's restart, /init once more): left as it is.
        await interpreter.configure(user, {"FROM_INIT": "1"})
        assert interpreter.process is first
        # Killed, it comes back by itself.
        os.kill(first.pid, signal.SIGKILL)
        for _ in range(200):
            if interpreter.process not in {None, first}:
                break
            await asyncio.sleep(0.05)
        await interpreter._listening()
        assert await execute(port, code) == repr(("1", str(tmp_path)))
        # New variables: a new interpreter that has them.
        await interpreter.configure(user, {"FROM_INIT": "2"})
        assert await execute(port, code) == repr(("2", str(tmp_path)))
    finally:
        await interpreter.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
