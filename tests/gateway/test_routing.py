"""Which side a request goes to: a sandbox by header or Host, else the control API."""

import pytest
from workspace_gateway.app import Target, route
from workspace_gateway.proxy import forwarded_headers, internal

DOMAIN = "sbx.example.com"


def test_the_sdk_s_header_names_the_sandbox_and_port() -> None:
    headers = {"e2b-sandbox-id": "abc123", "e2b-sandbox-port": "49983", "host": "127.0.0.1:3000"}
    assert route(headers, DOMAIN) == Target("abc123", 49983)


def test_the_header_without_a_port_means_the_agent_s() -> None:
    assert route({"e2b-sandbox-id": "abc123"}, DOMAIN) == Target("abc123", 49983)


def test_a_port_that_is_not_a_number_matches_no_port() -> None:
    assert route({"e2b-sandbox-id": "abc", "e2b-sandbox-port": "x"}, DOMAIN) == Target("abc", -1)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("49983-abc123.sbx.example.com", Target("abc123", 49983)),
        ("49983-abc123.sbx.example.com:443", Target("abc123", 49983)),
        ("8080-abc123.SBX.example.com", Target("abc123", 8080)),
        ("api.sbx.example.com", None),
        ("api.sbx.example.com:8443", None),
        ("49983-abc123.other.example.com", None),  # not this gateway's domain
        ("49983-abc-123.sbx.example.com", None),  # IDs have no dashes
        ("49983-abc123.evil.sbx.example.com", None),
        ("127.0.0.1:3000", None),
        ("[::1]:3000", None),
        ("", None),
    ],
)
def test_host_names_the_sandbox_only_under_the_domain(host: str, expected: Target | None) -> None:
    assert route({"host": host}, DOMAIN) == expected


def test_the_header_wins_over_the_host() -> None:
    headers = {"e2b-sandbox-id": "fromheader", "host": "49983-fromhost.sbx.example.com"}
    assert route(headers, DOMAIN) == Target("fromheader", 49983)


@pytest.mark.parametrize(
    "path", ["/init", "/init/", "//init", "/./init", "/files/../init", "/fsfreeze", "/collapse"]
)
def test_internal_paths_are_recognised_however_spelled(path: str) -> None:
    assert internal(path)


@pytest.mark.parametrize("path", ["/files", "/health", "/initial", "/process.Process/Start"])
def test_other_paths_are_not_internal(path: str) -> None:
    assert not internal(path)


def test_forwarded_headers_lose_hop_by_hop_ones_and_the_api_key() -> None:
    raw = [
        (b"Host", b"127.0.0.1:3000"),
        (b"Connection", b"keep-alive, X-Private"),
        (b"X-Private", b"1"),
        (b"Transfer-Encoding", b"chunked"),
        (b"TE", b"trailers"),
        (b"Upgrade", b"h2c"),
        (b"X-API-Key", b"e2b_secret"),
        (b"X-Access-Token", b"token"),
        (b"E2b-Sandbox-Id", b"abc"),
        (b"Content-Type", b"application/json"),
    ]
    assert forwarded_headers(raw) == [
        (b"X-Access-Token", b"token"),
        (b"E2b-Sandbox-Id", b"abc"),
        (b"Content-Type", b"application/json"),
    ]
