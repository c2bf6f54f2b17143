"""The command line: a key made and printed, bad arguments refused in one line."""

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from workspace_gateway.kubernetes.main import open_cluster
from workspace_gateway.kubernetes.secret_keys import SecretKeys
from workspace_gateway.kubernetes.tokens import TokenReviews
from workspace_gateway.main import parser

from tests.gateway import kube_fake
from tests.ports import free_port

pytestmark = pytest.mark.e2e  # starts agents or gateways

GATEWAY = Path(sys.executable).with_name("workspace-sandbox-gateway")


def test_without_a_key_one_is_made_printed_and_required() -> None:
    port = free_port()
    process = subprocess.Popen(
        [GATEWAY, "--local", "--address", f"127.0.0.1:{port}", "--log-level", "warning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.fullmatch(r"API key: (e2b_[0-9a-f]{40})\n", line)
        assert match, line
        url = f"http://127.0.0.1:{port}/v2/sandboxes"
        deadline = time.monotonic() + 15
        while True:
            try:
                answer = httpx.get(url, headers={"X-API-Key": match[1]})
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert (answer.status_code, answer.json()) == (200, [])
        assert httpx.get(url).status_code == 401
    finally:
        process.terminate()
        _, err = process.communicate(timeout=15)
    assert "no isolation" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--address", "127.0.0.1:1"], "give exactly one of --local and --kubernetes"),
        (
            ["--kubernetes", "--address", "127.0.0.1:1"],
            "--kubernetes needs --templates and --token-seed-file",
        ),
        (
            [
                "--kubernetes",
                "--address",
                "127.0.0.1:1",
                "--templates",
                "/nonexistent",
                "--token-seed-file",
                "/nonexistent",
            ],
            "/nonexistent: No such file or directory",
        ),
        (["--local", "--address", "127.0.0.1:1", "--api-key", "e2b_abc"], "an API key is e2b_"),
        (["--local", "--address", "nowhere"], "'nowhere' is not HOST:PORT"),
        (["--local", "--address", "127.0.0.1:1", "--api-key", "sk-123"], "an API key is e2b_"),
        (["--local", "--address", "127.0.0.1:1", "--domain", "a..b"], "'a..b' is not a domain"),
        (
            ["--local", "--address", "127.0.0.1:1", "--auth", "kubernetes-tokens"],
            "--local takes API keys only",
        ),
        (["--local", "--address", "127.0.0.1:1", "--auth", "oidc"], "invalid choice: 'oidc'"),
        (
            ["--kubernetes", "--address", "127.0.0.1:1", "--pool-size", "2"],
            "--pool-size and --pool-temperature go with --local",
        ),
        (["--local", "--address", "127.0.0.1:1", "--pool-size", "-1"], "is not a pool size"),
        (["--local", "--address", "127.0.0.1:1", "--pool-temperature", "hot"], "invalid choice"),
        (["--local", "--address", "127.0.0.1:1", "--metrics-address", "x"], "is not HOST:PORT"),
        (
            [
                *("--kubernetes", "--address", "127.0.0.1:1", "--token-audience", "a"),
                *("--templates", "/nonexistent", "--token-seed-file", "/nonexistent"),
            ],
            "--token-audience goes with --auth kubernetes-tokens",
        ),
    ],
)
def test_bad_arguments_are_one_line(args: list[str], message: str) -> None:
    done = subprocess.run([GATEWAY, *args], capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("auth", "kind"), [([], SecretKeys), (["--auth", "kubernetes-tokens"], TokenReviews)]
)
def test_the_cluster_s_callers_are_known_by_keys_unless_tokens_are_asked_for(
    tmp_path: Path, auth: list[str], kind: type
) -> None:
    (tmp_path / "templates.yaml").write_text("templates: {base: {image: ubuntu-24.04}}\n")
    (tmp_path / "seed").write_text("s" * 32)
    kubeconfig = kube_fake.kubeconfig("http://127.0.0.1:1", tmp_path)
    args = parser().parse_args(
        [
            *("--kubernetes", "--address", "127.0.0.1:1", "--kubeconfig", str(kubeconfig)),
            *("--templates", str(tmp_path / "templates.yaml")),
            *("--token-seed-file", str(tmp_path / "seed"), *auth),
            *(["--token-audience", "sandboxes"] if auth else []),
        ]
    )
    _, keys, _ = open_cluster(args)
    assert type(keys) is kind
    if isinstance(keys, TokenReviews):
        assert keys.audiences == ("sandboxes",)
