"""The control API's request bodies, checked: a create's NewSandbox and egress, timeouts, JSON."""

import ipaddress
import json
from typing import Any

from workspace_gateway.backend import NewSandbox
from workspace_gateway.errors import GatewayError

DEFAULT_TIMEOUT = 300
MAX_TIMEOUT = 24 * 3600  # E2B's cap for its Pro tier
# Create fields this gateway can't honour; a request naming them gets a clear 400, never a
# sandbox without what it asked for.
NOT_OFFERED = ("mcp", "iam", "volumeMounts")
# E2B's `network` settings that map onto the sandbox's egress (`egress_of`); the others
# (a proxy, request rewriting, public URLs, DNS servers to open) are refused like the above.
NETWORK_OFFERED = ("allowOut", "denyOut")
# The WorkspaceSandbox's limit on allow-list entries (deploy/xrd.yaml).
MAX_ALLOWED = 64
ALL_TRAFFIC = frozenset({"0.0.0.0/0", "::/0"})


def timeout_of(value: object, field: str = "timeout") -> int:
    if value is None:
        return DEFAULT_TIMEOUT
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TIMEOUT:
        raise GatewayError(
            400, f"{field} must be a whole number of seconds from 0 to {MAX_TIMEOUT}"
        )
    return value


def _strings(body: dict[str, Any], field: str) -> dict[str, str]:
    value = body.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise GatewayError(400, f"{field} must be an object of strings")
    return dict(value)


def _strings_list(value: object, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise GatewayError(400, f"{field} must be a list of non-empty strings")
    return list(value)


def _allowed(entry: str, field: str) -> dict[str, str]:
    """One `allowOut` entry as an allow-list entry: an address, a range, or a host name."""
    try:
        address = ipaddress.ip_address(entry)
    except ValueError:
        pass
    else:
        return {"cidr": str(ipaddress.ip_network(address))}
    if "/" in entry:
        try:
            return {"cidr": str(ipaddress.ip_network(entry, strict=True))}
        except ValueError as e:
            raise GatewayError(400, f"{field}: {entry!r} is not an address range: {e}") from None
    return {"fqdn": entry.lower()}


def public_traffic(body: dict[str, Any]) -> bool:
    """`network.allowPublicTraffic`: previews are public unless it says false."""
    network = body.get("network")
    public = network.get("allowPublicTraffic") if isinstance(network, dict) else None
    if public is not None and not isinstance(public, bool):
        raise GatewayError(400, "network.allowPublicTraffic must be true or false")
    return public is not False


def egress_of(body: dict[str, Any]) -> dict[str, Any] | None:
    """The sandbox's `spec.network` that E2B's egress settings stand for; None: unrestricted.

    In E2B, `denyOut` takes address ranges, `allowOut` wins over it and also takes host names,
    and `allow_internet_access: false` denies all traffic. A sandbox here reaches the internet
    (less what the platform always denies), only an allow-list, or nothing; so `denyOut` may
    only deny all traffic, which is what makes `allowOut` a list of what alone is reached.
    """
    internet = body.get("allow_internet_access")
    if internet is not None and not isinstance(internet, bool):
        raise GatewayError(400, "allow_internet_access must be true or false")
    network = body.get("network")
    if network is None:
        network = {}
    if not isinstance(network, dict):
        raise GatewayError(400, "network must be an object")
    for name in sorted(network):
        if name not in {*NETWORK_OFFERED, "allowPublicTraffic"} and network[name] is not None:
            raise GatewayError(400, f"'network.{name}' is not offered by this gateway")
    denied = network.get("denyOut")
    denied = [] if denied is None else _strings_list(denied, "network.denyOut")
    partly = sorted(set(denied) - ALL_TRAFFIC)
    if partly:
        raise GatewayError(
            400,
            f"network.denyOut: only all traffic (0.0.0.0/0) can be denied here, not {partly[0]}: "
            "the platform already denies private and reserved ranges; list what to reach in "
            "network.allowOut instead",
        )
    allowed = network.get("allowOut")
    allowed = [] if allowed is None else _strings_list(allowed, "network.allowOut")
    if len(allowed) > MAX_ALLOWED:
        raise GatewayError(400, f"network.allowOut: at most {MAX_ALLOWED} entries")
    if (internet is not False and not denied) or ALL_TRAFFIC & set(allowed):
        return None  # allowOut alone, or allowing all traffic, allows what is allowed anyway
    if not allowed:
        return {"egress": "None"}
    entries = [_allowed(entry, "network.allowOut") for entry in allowed]
    unique = list({tuple(sorted(e.items())): e for e in entries}.values())
    return {"egress": "Allowlist", "allow": unique}


def new_sandbox(body: dict[str, Any]) -> NewSandbox:
    """A create request (v1 or v2), checked."""
    for name in NOT_OFFERED:
        if body.get(name) is not None:
            raise GatewayError(400, f"{name!r} is not offered by this gateway")
    network = egress_of(body)
    resume = body.get("autoResume")
    if isinstance(resume, dict) and resume.get("enabled"):
        raise GatewayError(400, "'autoResume' is not offered by this gateway")
    template = body.get("templateID", "base")
    if not isinstance(template, str) or not template:
        raise GatewayError(400, "templateID must be a non-empty string")
    auto_pause = body.get("autoPause", False)
    if not isinstance(auto_pause, bool):
        raise GatewayError(400, "autoPause must be true or false")
    return NewSandbox(
        template=template,
        timeout=timeout_of(body.get("timeout")),
        metadata=_strings(body, "metadata"),
        env_vars=_strings(body, "envVars"),
        auto_pause=auto_pause,
        network=network,
        public_traffic=public_traffic(body),
    )


def request_object(body: bytes) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except ValueError:
        raise GatewayError(400, "the request body is not valid JSON") from None
    if not isinstance(value, dict):
        raise GatewayError(400, "the request body must be a JSON object")
    return value
