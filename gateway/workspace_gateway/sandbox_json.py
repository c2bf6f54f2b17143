"""E2B's JSON for a sandbox: as created or connected, listed, in detail, and its metrics."""

from datetime import UTC, datetime
from typing import Any

from workspace_gateway import credentials
from workspace_gateway.backend import Sandbox
from workspace_gateway.errors import GatewayError
from workspace_gateway.times import rfc3339

CLIENT_ID = "workspace-sandbox-gateway"


def sandbox_json(sandbox: Sandbox, domain: str) -> dict[str, Any]:
    """The `Sandbox` body of create and connect."""
    return {
        "templateID": sandbox.template,
        "sandboxID": sandbox.sandbox_id,
        "clientID": CLIENT_ID,
        "envdVersion": sandbox.envd_version,
        "envdAccessToken": sandbox.access_token,
        # Not E2B's (whose is null for public previews): what the code interpreter SDK sends
        # to its port for contexts, where it sends no access token (`credentials`).
        "trafficAccessToken": credentials.traffic_token(sandbox.access_token),
        # Always: without it the SDK falls back to e2b.app and sends envd traffic there.
        "domain": domain,
    }


def listed_json(sandbox: Sandbox) -> dict[str, Any]:
    """`ListedSandbox`: no access token in a list."""
    return {
        "templateID": sandbox.template,
        "sandboxID": sandbox.sandbox_id,
        "clientID": CLIENT_ID,
        "startedAt": rfc3339(sandbox.started_at),
        "endAt": rfc3339(sandbox.end_at),
        "envdVersion": sandbox.envd_version,
        "cpuCount": sandbox.cpu_count,
        "memoryMB": sandbox.memory_mb,
        "diskSizeMB": sandbox.disk_size_mb,
        "state": sandbox.state.value,
        "metadata": sandbox.metadata,
    }


def detail_json(sandbox: Sandbox, domain: str, *, token: bool = True) -> dict[str, Any]:
    """`SandboxDetail`: the pause keeps files, not memory, so `pauseMode` is `filesystem`.

    Without `token` (a caller who may only read the sandbox) `envdAccessToken` is left out:
    the token runs commands as root in the sandbox and reads its env vars.
    """
    secret = {"envdAccessToken": sandbox.access_token} if token else {}
    return {
        **listed_json(sandbox),
        **secret,
        "domain": domain,
        "lifecycle": {
            "autoResume": False,
            "onTimeout": "pause" if sandbox.auto_pause else "kill",
        },
        "pauseMode": "filesystem",
    }


def metric_json(envd: dict[str, Any]) -> dict[str, Any]:
    """`SandboxMetric` from the agent's envd `/metrics` sample."""
    try:
        ts = int(envd["ts"])
        return {
            "timestamp": rfc3339(datetime.fromtimestamp(ts, UTC)),
            "timestampUnix": ts,
            "cpuCount": int(envd["cpu_count"]),
            "cpuUsedPct": float(envd["cpu_used_pct"]),
            "memUsed": int(envd["mem_used"]),
            "memTotal": int(envd["mem_total"]),
            "memCache": int(envd.get("mem_cache", 0)),
            "diskUsed": int(envd["disk_used"]),
            "diskTotal": int(envd["disk_total"]),
        }
    except (KeyError, TypeError, ValueError):
        raise GatewayError(502, "the sandbox's agent answered /metrics with no sample") from None
