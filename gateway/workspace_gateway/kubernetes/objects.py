"""WorkspaceSandbox objects and E2B's sandboxes, each in terms of the other: plain dicts, no I/O.

The object is the whole state: its name is the sandbox ID (also on a label, so budgets, metrics
and audit events correlate with the workload), the template, start and end times, auto-pause,
metadata and env vars (sealed: see `sealed`) are annotations, pause is `spec.power: Suspended`.
A replica keeps nothing another one needs. An auto-pause sandbox also carries its end time as
`spec.lifetime.suspendAt`, so the platform suspends it even if no gateway is running.

The agent's access token is derived, never stored: HMAC-SHA256 of the namespace and sandbox ID
under a seed only the gateway holds. The namespace is part of it, so a sandbox of the same name
made by hand in another namespace has another token (see `Backend.locate`). Every object the
gateway makes also carries its mark (`mark`), under the same seed but another message: without
it an object is not the gateway's, and is never cached, shown, reaped or routed to.
An object with a `deletionTimestamp` (deleted, its finalizers still held) is killed as far as
E2B's API goes: not cached, listed, reaped or routed to, and a call on it answers 404 (`alive`).

A warm pool's member (`pools`) is an object labelled `pool: member` until a create claims it.
"""

import contextlib
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from workspace_gateway.backend import NewSandbox, Sandbox, Snapshot, State
from workspace_gateway.errors import GatewayError
from workspace_gateway.idempotency import fingerprint, label_of
from workspace_gateway.kubernetes import sealed
from workspace_gateway.kubernetes.templates import Template
from workspace_gateway.kubernetes.view import MAX_CALLER_NOTES_BYTES, notes_bytes
from workspace_gateway.times import rfc3339

GROUP = "sandbox.cozystack.io"
VERSION = "v1alpha1"
PLURAL = "workspacesandboxes"
KIND = "WorkspaceSandbox"
ID_LABEL = "sandbox.cozystack.io/sandbox-id"
PREFIX = "gateway.sandbox.cozystack.io/"
TEMPLATE, STARTED, END, AUTO_PAUSE = (
    f"{PREFIX}{n}" for n in ("template", "started-at", "end-at", "auto-pause")
)
METADATA, ENV_VARS, MARK = f"{PREFIX}metadata", f"{PREFIX}env-vars", f"{PREFIX}mark"
PRIVATE = f"{PREFIX}private-traffic"
"""`true` on a sandbox created with `network.allowPublicTraffic: false`."""
# The create's Idempotency-Key, as a label to find it by, and what the create asked for.
KEY_LABEL, REQUEST_NOTE = f"{PREFIX}idempotency-key", f"{PREFIX}idempotency-request"
POOL_LABEL = "gateway.sandbox.cozystack.io/pool"
POOL_TEMPLATE_LABEL = "gateway.sandbox.cozystack.io/pool-template"
MEMBER, HANDED_OUT = "member", "handed-out"
READY_NOTE = "gateway.sandbox.cozystack.io/pool-ready"
MADE_NOTE = "gateway.sandbox.cozystack.io/pool-made-at"
CACHED_LABELS = frozenset({ID_LABEL, POOL_LABEL, POOL_TEMPLATE_LABEL})
AGENT_PORT = 49983
WORKDIR = "/workspace"
READY_SECONDS = 300.0
MAX_MESSAGE = 500
PAUSED_PHASES = frozenset({"Suspending", "Suspended"})


def access_token(seed: bytes, namespace: str, sandbox_id: str) -> str:
    return hmac.new(seed, f"{namespace}/{sandbox_id}".encode(), hashlib.sha256).hexdigest()


def mark(seed: bytes, namespace: str, sandbox_id: str) -> str:
    """What the gateway writes on every sandbox it makes, and only it can: no tenant has the seed.

    Another message than the token's under the same seed, so the mark, which anyone who may
    read the object sees, says nothing of the token.
    """
    message = f"mark\0{namespace}/{sandbox_id}".encode()
    return hmac.new(seed, message, hashlib.sha256).hexdigest()


def _callers(
    where: tuple[str, str], request: NewSandbox, now: datetime, seed: bytes
) -> tuple[dict[str, str], dict[str, Any]]:
    """What a create request sets on its sandbox: annotations, and power and lifetime."""
    namespace, sandbox_id = where
    end_at = datetime.fromtimestamp(now.timestamp() + request.timeout, UTC)
    spec: dict[str, Any] = {"power": "Running"}
    if request.auto_pause:
        spec["lifetime"] = {"suspendAt": rfc3339(end_at, "seconds")}
    if request.network is not None:
        spec["network"] = request.network
    annotations = {
        TEMPLATE: request.template,
        STARTED: now.astimezone(UTC).isoformat(),
        END: end_at.isoformat(),
        AUTO_PAUSE: "true" if request.auto_pause else "false",
        METADATA: json.dumps(request.metadata, sort_keys=True),
        ENV_VARS: sealed.seal(seed, namespace, sandbox_id, request.env_vars),
    }
    if request.idempotency_key is not None:
        annotations[REQUEST_NOTE] = fingerprint(seed, namespace, request)
    if not request.public_traffic:
        annotations[PRIVATE] = "true"
    size = notes_bytes(annotations)
    if size > MAX_CALLER_NOTES_BYTES:
        # Past this the watch cache would not keep it (`view`).
        raise GatewayError(
            400,
            f"metadata and envVars are too large: {size} bytes once stored on the sandbox, "
            f"at most {MAX_CALLER_NOTES_BYTES}",
        )
    return annotations, spec


def keyed_labels(namespace: str, request: NewSandbox, seed: bytes) -> dict[str, str]:
    """The label a create with an Idempotency-Key is found by again."""
    if request.idempotency_key is None:
        return {}
    return {KEY_LABEL: label_of(seed, namespace, request.idempotency_key)}


def manifest(
    where: tuple[str, str],
    template_name: str,
    template: Template,
    request: NewSandbox,
    now: datetime,
    *,
    seed: bytes,
) -> dict[str, Any]:
    """The WorkspaceSandbox a create request stands for, in `where` (namespace, sandbox ID)."""
    annotations, spec = _callers(where, request, now, seed)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": where[1],
            "labels": {ID_LABEL: where[1], **keyed_labels(where[0], request, seed)},
            "annotations": {**annotations, TEMPLATE: template_name, MARK: mark(seed, *where)},
        },
        "spec": {**template.spec(), **spec},
    }


def member_manifest(
    where: tuple[str, str], template_name: str, template: Template, now: datetime, *, seed: bytes
) -> dict[str, Any]:
    """A pool member: the template's spec, running, and nothing of any caller's."""
    sandbox_id = where[1]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": sandbox_id,
            "labels": {
                ID_LABEL: sandbox_id,
                POOL_LABEL: MEMBER,
                POOL_TEMPLATE_LABEL: template_name,
            },
            "annotations": {
                TEMPLATE: template_name,
                MADE_NOTE: now.astimezone(UTC).isoformat(),
                MARK: mark(seed, *where),
            },
        },
        "spec": {**template.spec(), "power": "Running"},
    }


def handout_patch(
    member: Mapping[str, Any], request: NewSandbox, now: datetime, seed: bytes
) -> dict[str, Any]:
    """The claim: member to handed-out at the version read, with the caller's settings.

    One merge patch, so the label moves only if nobody wrote the object since it was read, and
    a member is never seen handed out without its caller's metadata and sealed env vars.
    """
    metadata = member["metadata"]
    where = (metadata["namespace"], metadata["name"])
    annotations, spec = _callers(where, request, now, seed)
    return {
        "metadata": {
            "resourceVersion": metadata["resourceVersion"],
            "labels": {POOL_LABEL: HANDED_OUT, **keyed_labels(where[0], request, seed)},
            "annotations": {**annotations, READY_NOTE: None},
        },
        "spec": spec,
    }


def labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def notes(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def is_member(obj: Mapping[str, Any]) -> bool:
    """Not yet handed out: the E2B API answers for it as for an unknown sandbox."""
    return labels(obj).get(POOL_LABEL) == MEMBER


def is_ready(obj: Mapping[str, Any]) -> bool:
    return is_member(obj) and notes(obj).get(READY_NOTE) == "true"


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


# How Crossplane reports a FATAL result of the function on the XR (its Synced condition):
# crossplane/crossplane internal/controller/apiextensions/composite, errFmtFatalResult.
FATAL = re.compile(r'pipeline step "[^"]*" returned a fatal result: (.+)', re.DOTALL)


def refusal_of(obj: Mapping[str, Any]) -> str | None:
    """What the function said when it refused the sandbox (bad input); None if it hasn't.

    Such a sandbox never becomes ready until its spec changes, so a caller waiting for it is
    told at once, with the field the function names. A condition from before the spec's last
    change (its observedGeneration behind) says nothing of the spec as it is.
    """
    conditions = (obj.get("status") or {}).get("conditions") or []
    generation = (obj.get("metadata") or {}).get("generation")
    for c in conditions:
        seen = c.get("observedGeneration")
        stale = isinstance(seen, int) and isinstance(generation, int) and seen < generation
        if c.get("type") == "Synced" and c.get("status") == "False" and not stale:
            found = FATAL.search(str(c.get("message") or ""))
            if found:
                return found.group(1)[:MAX_MESSAGE]
    return None


def is_paused(obj: Mapping[str, Any]) -> bool:
    phase = (obj.get("status") or {}).get("phase")
    return (obj.get("spec") or {}).get("power") == "Suspended" or phase in PAUSED_PHASES


def agent_url(obj: Mapping[str, Any], port: int) -> str | None:
    """The agent's URL once the platform says the sandbox is up: Ready, Running, an endpoint."""
    status = obj.get("status") or {}
    host = status.get("endpoint")
    if is_paused(obj) or status.get("phase") != "Running" or not _condition(obj, "Ready"):
        return None
    return f"http://{host}:{port}" if isinstance(host, str) and host else None


def _json_strings(text: str | None) -> dict[str, str]:
    with contextlib.suppress(ValueError, TypeError):
        value = json.loads(text or "{}")
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
    return {}


def moment(text: str | None, default: datetime) -> datetime:
    try:
        moment = datetime.fromisoformat(text or "")
    except ValueError:
        return default
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def ours(obj: Mapping[str, Any], seed: bytes) -> bool:
    """Made by the gateway: its ID label names it and it carries the gateway's mark.

    Anything else is ignored, never cached, shown or routed to: a tenant may make an object of
    any name and labels, but not the mark of another namespace's sandbox.
    """
    metadata = obj.get("metadata") or {}
    name, namespace = metadata.get("name"), metadata.get("namespace")
    if not (isinstance(name, str) and name and isinstance(namespace, str)):
        return False
    if (metadata.get("labels") or {}).get(ID_LABEL) != name:
        return False
    given = (metadata.get("annotations") or {}).get(MARK)
    return isinstance(given, str) and hmac.compare_digest(
        given.encode(), mark(seed, namespace, name).encode()
    )


def is_deleting(obj: Mapping[str, Any]) -> bool:
    """Deleted, and kept only until its finalizers are done: for E2B's API, killed.

    Crossplane holds its finalizer while it deletes what it composed, so a killed sandbox stays
    for a while with its `deletionTimestamp` set.
    """
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def spec_snapshots(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    taken = (obj.get("spec") or {}).get("snapshots")
    return [s for s in taken if isinstance(s, dict)] if isinstance(taken, list) else []


def snapshots_of(obj: Mapping[str, Any]) -> tuple[Snapshot, ...]:
    """A sandbox's `spec.snapshots`, each with what its `status.snapshots` reports."""
    reported = (obj.get("status") or {}).get("snapshots")
    status = {
        s.get("name"): s
        for s in (reported if isinstance(reported, list) else [])
        if isinstance(s, Mapping)
    }
    sandbox_id = obj["metadata"]["name"]
    out = []
    for entry in spec_snapshots(obj):
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        seen = status.get(name) or {}
        volume = seen.get("volumeSnapshot")
        volume = volume if isinstance(volume, str) else ""
        ready = seen.get("readyToUse") is True and bool(volume)
        out.append(Snapshot(sandbox_id, name, ready=ready, volume=volume if ready else ""))
    return tuple(out)


def alive(obj: Mapping[str, Any], seed: bytes) -> bool:
    """The gateway's, and not being deleted: what the cache keeps and calls act on."""
    return ours(obj, seed) and not is_deleting(obj)


def shown(obj: Mapping[str, Any], seed: bytes) -> bool:
    """What the E2B API answers for: alive, and not a pool member still in its pool."""
    return alive(obj, seed) and not is_member(obj)


@dataclass(frozen=True)
class Settings:
    templates: Mapping[str, Template]
    seed: bytes
    agent_port: int = AGENT_PORT
    workdir: str = WORKDIR
    ready_seconds: float = READY_SECONDS


def sandbox_of(obj: Mapping[str, Any], settings: Settings, envd_version: str = "") -> Sandbox:
    metadata = obj["metadata"]
    notes = metadata.get("annotations") or {}
    epoch = datetime.fromtimestamp(0, UTC)
    started = moment(notes.get(STARTED), epoch)
    template = settings.templates.get(notes.get(TEMPLATE, ""))
    cpu, memory, disk = template.figures() if template else (0, 0, 0)
    return Sandbox(
        sandbox_id=metadata["name"],
        template=notes.get(TEMPLATE, ""),
        metadata=_json_strings(notes.get(METADATA)),
        state=State.PAUSED if is_paused(obj) else State.RUNNING,
        started_at=started,
        end_at=moment(notes.get(END), started),
        cpu_count=cpu,
        memory_mb=memory,
        disk_size_mb=disk,
        envd_version=envd_version,
        access_token=access_token(settings.seed, metadata["namespace"], metadata["name"]),
        auto_pause=notes.get(AUTO_PAUSE) == "true",
        public_traffic=notes.get(PRIVATE) != "true",
        endpoint=agent_url(obj, settings.agent_port),
        namespace=metadata["namespace"],
        ports=preview_ports(obj, settings.agent_port),
        network=_network(obj),
    )


def _network(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    network = (obj.get("spec") or {}).get("network")
    return dict(network) if isinstance(network, Mapping) else None


def preview_ports(obj: Mapping[str, Any], agent_port: int) -> frozenset[int]:
    """The ports of its `spec.ports`: what its Service and its policies open to the gateway."""
    ports = (obj.get("spec") or {}).get("ports")
    if not isinstance(ports, list):
        return frozenset()
    found = {p.get("port") for p in ports if isinstance(p, Mapping)}
    return frozenset(p for p in found if isinstance(p, int) and p != agent_port)
