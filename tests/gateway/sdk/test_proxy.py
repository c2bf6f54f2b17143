"""The data plane: streaming both ways, big files, internal paths, unknown sandboxes."""

import io
import os
import time

import httpx
from e2b import Sandbox


def test_output_streams_live_through_the_proxy(sandbox: Sandbox) -> None:
    arrivals: list[tuple[float, str]] = []
    started = time.monotonic()
    sandbox.commands.run(
        "echo first; sleep 3; echo second",
        on_stdout=lambda line: arrivals.append((time.monotonic() - started, line)),
    )
    ended = time.monotonic() - started
    assert [line.strip() for _, line in arrivals] == ["first", "second"]
    assert arrivals[0][0] < ended - 2, "the first line waited for the command to end"


def test_eight_mib_both_ways(sandbox: Sandbox) -> None:
    data = os.urandom(8 * 1024 * 1024 + 123)
    sandbox.files.write("big.bin", data)  # multipart
    assert bytes(sandbox.files.read("big.bin", format="bytes")) == data
    sandbox.files.write("big-stream.bin", io.BytesIO(data))  # octet-stream, chunked
    assert bytes(sandbox.files.read("big-stream.bin", format="bytes")) == data
    assert sandbox.commands.run("wc -c < big-stream.bin").stdout.strip() == str(len(data))


def test_init_is_refused_from_outside(sandbox: Sandbox, gateway_url: str) -> None:
    for path in ("/init", "/freeze", "/unfreeze", "/fsfreeze", "/fsthaw", "/collapse"):
        answer = httpx.post(
            gateway_url + path,
            json={"accessToken": "taken", "envVars": {"EVIL": "1"}},
            headers={"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49983"},
        )
        assert answer.status_code == 403, path
        assert answer.json()["code"] == 403
    # The sandbox's token and environment are as the gateway set them.
    assert sandbox.commands.run("echo ${EVIL:-unset}").stdout == "unset\n"


def test_an_unknown_sandbox_answers_e2b_s_502(gateway_url: str) -> None:
    answer = httpx.get(gateway_url + "/health", headers={"E2b-Sandbox-Id": "nosuchsandbox"})
    assert answer.status_code == 502
    assert answer.json() == {
        "sandboxId": "nosuchsandbox",
        "message": "The sandbox was not found",
        "code": 502,
    }


def test_host_routing_reaches_the_sandbox(sandbox: Sandbox, gateway_url: str, key: str) -> None:
    health = httpx.get(
        gateway_url + "/health", headers={"Host": f"49983-{sandbox.sandbox_id}.e2b.localhost"}
    )
    assert health.status_code == 204
    api = httpx.get(
        gateway_url + f"/sandboxes/{sandbox.sandbox_id}",
        headers={"Host": "api.e2b.localhost", "X-API-Key": key},
    )
    assert api.status_code == 200
    assert api.json()["sandboxID"] == sandbox.sandbox_id


def test_the_agent_needs_the_sandbox_s_token(sandbox: Sandbox, gateway_url: str) -> None:
    answer = httpx.post(
        gateway_url + "/process.Process/List",
        json={},
        headers={"E2b-Sandbox-Id": sandbox.sandbox_id, "Connect-Protocol-Version": "1"},
    )
    assert answer.status_code == 401


def test_internal_paths_stay_refused_however_spelled(sandbox: Sandbox, gateway_url: str) -> None:
    for path in ("//init", "/%69nit", "/files/../init", "/init/"):
        answer = httpx.post(
            gateway_url + path,
            json={"accessToken": "taken"},
            headers={"E2b-Sandbox-Id": sandbox.sandbox_id},
        )
        assert answer.status_code in {403, 404}, path
    assert sandbox.commands.run("echo still mine").stdout == "still mine\n"
