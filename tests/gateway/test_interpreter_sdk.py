"""The code interpreter through `workspace-sandbox-gateway --local`, driven by the real
`e2b_code_interpreter` SDK: its default template `code-interpreter-v1`, port 49999.

Kernels are real: IPython's (the agent's `interpreter` extra) and Deno's, from the npm `deno`
package that `scripts/js-sdk install` puts in the test cache beside the JS SDKs.
"""

import base64
import http.client
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from e2b import NotFoundException, TimeoutException
from e2b_code_interpreter import AsyncSandbox, Sandbox

from tests.gateway.sdk.gateways import (  # noqa: F401  # the fixtures
    Gateway,
    gateway,
    point_sdk_at,
    sdk_env,
)

pytestmark = pytest.mark.e2e  # starts agents or gateways

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def deno_folder() -> str:
    """The folder of the test cache's Deno binary (`scripts/js-sdk install`)."""
    found = subprocess.run(
        [str(ROOT / "scripts" / "js-sdk"), "path"], capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        message = "JavaScript in the code interpreter needs `scripts/js-sdk install` (deno)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return str(Path(found.stdout.strip()) / "node_modules" / "@deno" / "linux-x64-glibc")


@pytest.fixture(scope="module")
def interpreter(gateway: Gateway) -> Iterator[Sandbox]:  # noqa: F811  # the fixture
    """One code interpreter sandbox for the module; Deno on its PATH, as a user would add it."""
    with pytest.MonkeyPatch.context() as patch:
        point_sdk_at(gateway, patch)
        path = f"{deno_folder()}:/usr/local/bin:/usr/bin:/bin"
        sandbox = Sandbox.create(envs={"PATH": path, "FROM_CREATE": "yes"})
        yield sandbox
        sandbox.kill()


def test_the_sdk_s_default_template_is_served(interpreter: Sandbox) -> None:
    assert interpreter.get_info().template_id == "code-interpreter-v1"


def test_state_is_kept_across_calls(interpreter: Sandbox) -> None:
    interpreter.run_code("kept = 21")
    execution = interpreter.run_code("kept * 2")
    assert execution.text == "42"
    assert execution.error is None
    assert execution.execution_count is not None


def test_stdout_and_stderr_are_streamed_to_callbacks(interpreter: Sandbox) -> None:
    seen: list[tuple[str, bool]] = []
    execution = interpreter.run_code(
        "import sys\nprint('out')\nprint('err', file=sys.stderr)",
        on_stdout=lambda m: seen.append((m.line, m.error)),
        on_stderr=lambda m: seen.append((m.line, m.error)),
    )
    assert execution.logs.stdout == ["out\n"]
    assert execution.logs.stderr == ["err\n"]
    assert sorted(seen) == [("err\n", True), ("out\n", False)]


def test_a_chart_is_a_png_result(interpreter: Sandbox) -> None:
    execution = interpreter.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\nplt.show()"
    )
    assert execution.error is None, execution.error
    (chart,) = [r for r in execution.results if r.png]
    assert base64.b64decode(chart.png).startswith(PNG)
    assert not chart.is_main_result
    assert "png" in chart.formats()


def test_rich_results_carry_every_format(interpreter: Sandbox) -> None:
    execution = interpreter.run_code(
        "from IPython.display import HTML, display\ndisplay(HTML('<b>bold</b>'))\n{'a': 1}"
    )
    html, main = execution.results
    assert html.html == "<b>bold</b>"
    assert main.is_main_result
    assert main.text == "{'a': 1}"


def test_an_error_comes_with_its_traceback(interpreter: Sandbox) -> None:
    execution = interpreter.run_code("def f():\n    return 1 / 0\nf()")
    assert execution.error is not None
    assert execution.error.name == "ZeroDivisionError"
    assert execution.error.value == "division by zero"
    assert "f()" in execution.error.traceback
    assert "return 1 / 0" in execution.error.traceback
    # The context survives its errors.
    assert interpreter.run_code("kept").text == "21"


def test_a_timeout_interrupts_the_run_and_keeps_the_state(interpreter: Sandbox) -> None:
    interpreter.run_code("before_timeout = 'still here'")
    start = time.monotonic()
    with pytest.raises(TimeoutException, match="Execution timed out"):
        interpreter.run_code("import time\ntime.sleep(60)", timeout=2)
    assert time.monotonic() - start < 10
    # The kernel was interrupted, not left sleeping: the next run is not queued behind it.
    start = time.monotonic()
    assert interpreter.run_code("before_timeout").text == "'still here'"
    assert time.monotonic() - start < 10


def test_env_vars_from_create_and_per_run(interpreter: Sandbox) -> None:
    code = "import os\n(os.environ.get('FROM_CREATE'), os.environ.get('PER_RUN'))"
    assert interpreter.run_code(code, envs={"PER_RUN": "1"}).text == "('yes', '1')"
    # A run's variables are its own.
    assert interpreter.run_code(code).text == "('yes', None)"


def test_the_workspace_is_the_working_directory(interpreter: Sandbox) -> None:
    interpreter.files.write("from-files.txt", "shared")
    assert interpreter.run_code("open('from-files.txt').read()").text == "'shared'"
    interpreter.run_code("open('from-kernel.txt', 'w').write('back')")
    assert interpreter.files.read("from-kernel.txt") == "back"


def test_contexts_are_made_listed_restarted_and_removed(interpreter: Sandbox) -> None:
    interpreter.files.make_dir("sub")
    context = interpreter.create_code_context(cwd="sub")
    assert context.language == "python"
    assert context.cwd.endswith("/sub")
    assert interpreter.run_code("import os; os.getcwd()", context=context).text.endswith("/sub'")
    interpreter.run_code("mine = 1", context=context)
    # Contexts are apart from each other and from the default one.
    assert interpreter.run_code("'mine' in dir()").text == "False"
    assert context.id in [c.id for c in interpreter.list_code_contexts()]
    interpreter.restart_code_context(context)
    gone = interpreter.run_code("mine", context=context)
    assert gone.error is not None
    assert gone.error.name == "NameError"
    interpreter.remove_code_context(context.id)
    assert context.id not in [c.id for c in interpreter.list_code_contexts()]
    with pytest.raises(NotFoundException):
        interpreter.run_code("1", context=context)


def test_javascript_runs_in_deno_s_kernel(interpreter: Sandbox) -> None:
    interpreter.run_code("const base = 40", language="javascript")
    execution = interpreter.run_code("console.log('from js'); base + 2", language="js")
    assert execution.error is None, execution.error
    assert execution.logs.stdout == ["from js\n"]
    assert execution.text == "42"
    failed = interpreter.run_code("throw new Error('boom')", language="javascript")
    assert failed.error is not None
    assert failed.error.value == "boom"


def test_typescript_has_its_own_context(interpreter: Sandbox) -> None:
    context = interpreter.create_code_context(language="typescript")
    assert context.language == "typescript"
    execution = interpreter.run_code("const n: number = 6; n * 7", context=context)
    assert execution.text == "42"


def test_a_language_without_a_kernel_is_refused_by_name(interpreter: Sandbox) -> None:
    with pytest.raises(Exception, match="language 'r' has no kernel"):
        interpreter.run_code("1", language="r")


async def test_the_async_sdk_runs_code() -> None:
    sandbox = await AsyncSandbox.create()
    try:
        await sandbox.run_code("x = 2")
        assert (await sandbox.run_code("x ** 10")).text == "1024"
    finally:
        await sandbox.kill()


def test_the_port_is_never_public(
    gateway: Gateway,  # noqa: F811  # the fixture
    interpreter: Sandbox,
) -> None:
    """Whoever knows the ID runs nothing: `/execute` takes the access token alone, and the
    traffic token opens the contexts only."""
    other = Sandbox.create(template="base")
    try:
        route = {"E2b-Sandbox-Id": interpreter.sandbox_id, "E2b-Sandbox-Port": "49999"}
        run = {"code": "open('pwned', 'w')"}
        url = gateway.url
        assert httpx.post(url + "/execute", json=run, headers=route).status_code == 401
        assert httpx.get(url + "/contexts", headers=route).status_code == 401
        traffic = {**route, "E2B-Traffic-Access-Token": interpreter.traffic_access_token or ""}
        assert httpx.post(url + "/execute", json=run, headers=traffic).status_code == 401
        assert httpx.get(url + "/contexts", headers=traffic).status_code == 200
        # Another sandbox's tokens open nothing here.
        stranger = {
            **route,
            "X-Access-Token": other._envd_access_token or "",  # its token
            "E2B-Traffic-Access-Token": other.traffic_access_token or "",
        }
        assert httpx.post(url + "/execute", json=run, headers=stranger).status_code == 401
        assert httpx.get(url + "/contexts", headers=stranger).status_code == 401
        # A path that names /execute once its dot segments are gone is no context's path, and
        # is refused before anything is forwarded: sent as written (httpx would resolve it).
        host, port = url.removeprefix("http://").split(":")
        for path in ("/contexts/../execute", "/./execute", "/contexts/%2e%2e/execute"):
            for headers in (traffic, {**route, "X-Access-Token": interpreter._envd_access_token}):
                connection = http.client.HTTPConnection(host, int(port), timeout=30)
                connection.request("POST", path, body=json.dumps(run), headers=headers)
                status = connection.getresponse().status
                connection.close()
                assert status in {400, 401, 404}, (path, headers, status)
        assert not interpreter.files.exists("pwned")
        # A sandbox of another template has no interpreter: the SDK's 502, not a hang.
        assert httpx.get(
            url + "/contexts",
            headers={
                "E2b-Sandbox-Id": other.sandbox_id,
                "E2b-Sandbox-Port": "49999",
                "E2B-Traffic-Access-Token": other.traffic_access_token or "",
            },
        ).json() == {
            "code": 502,
            "message": "The sandbox is running but port is not open: 49999",
            "sandboxId": other.sandbox_id,
        }
    finally:
        other.kill()
