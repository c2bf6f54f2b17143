"""Sandboxes as WorkspaceSandbox objects in each tenant's namespace, through the official client.

The object is the whole state: its name is the sandbox ID (also on a label, so budgets, metrics
and audit events correlate with the workload), the template, start and end times, auto-pause,
metadata and env vars are annotations, pause is `spec.power: Suspended`. A replica keeps
nothing another one needs. An auto-pause sandbox also carries its end time as
`spec.lifetime.suspendAt`, so the platform suspends it even if no gateway is running.

The agent's access token is derived, never stored: HMAC-SHA256 of the namespace and sandbox ID
under a seed only the gateway holds. The namespace is part of it, so a sandbox of the same name
made by hand in another namespace has another token (see `Backend.locate`).
"""

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import secrets
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx
from kubernetes.client.exceptions import ApiException

from workspace_gateway.backend import NewSandbox, Sandbox, State, always, choose
from workspace_gateway.errors import GatewayError, not_found
from workspace_gateway.templates import Template

GROUP = "sandbox.cozystack.io"
VERSION = "v1alpha1"
PLURAL = "workspacesandboxes"
KIND = "WorkspaceSandbox"
ID_LABEL = "sandbox.cozystack.io/sandbox-id"
PREFIX = "gateway.sandbox.cozystack.io/"
TEMPLATE, STARTED, END, AUTO_PAUSE = (
    f"{PREFIX}{n}" for n in ("template", "started-at", "end-at", "auto-pause")
)
METADATA, ENV_VARS = f"{PREFIX}metadata", f"{PREFIX}env-vars"
ID_ALPHABET = string.ascii_lowercase + string.digits
ID_LENGTH = 20
AGENT_PORT = 49983
WORKDIR = "/workspace"
READY_SECONDS = 300.0
POLL_SECONDS = 0.5
MERGE_PATCH = "application/merge-patch+json"
UPDATE_ATTEMPTS = 5
MAX_MESSAGE = 500
PAUSED_PHASES = frozenset({"Suspending", "Suspended"})

log = logging.getLogger("workspace_gateway")
T = TypeVar("T")


def new_id() -> str:
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


def refusal(e: ApiException) -> str:
    """The message of the API server's Status, without the rest of its body."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return str(json.loads(e.body)["message"])[:MAX_MESSAGE]
    return str(e.reason)


def is_id(text: str) -> bool:
    return len(text) == ID_LENGTH and not set(text) - set(ID_ALPHABET)


def access_token(seed: bytes, namespace: str, sandbox_id: str) -> str:
    return hmac.new(seed, f"{namespace}/{sandbox_id}".encode(), hashlib.sha256).hexdigest()


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def manifest(
    sandbox_id: str, template_name: str, template: Template, request: NewSandbox, now: datetime
) -> dict[str, Any]:
    """The WorkspaceSandbox a create request stands for."""
    end = now.timestamp() + request.timeout
    end_at = datetime.fromtimestamp(end, UTC)
    spec: dict[str, Any] = {**template.spec(), "power": "Running"}
    if request.auto_pause:
        spec["lifetime"] = {"suspendAt": rfc3339(end_at)}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": sandbox_id,
            "labels": {ID_LABEL: sandbox_id},
            "annotations": {
                TEMPLATE: template_name,
                STARTED: now.astimezone(UTC).isoformat(),
                END: end_at.isoformat(),
                AUTO_PAUSE: "true" if request.auto_pause else "false",
                METADATA: json.dumps(request.metadata, sort_keys=True),
                ENV_VARS: json.dumps(request.env_vars, sort_keys=True),
            },
        },
        "spec": spec,
    }


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


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


def _moment(text: str | None, default: datetime) -> datetime:
    try:
        moment = datetime.fromisoformat(text or "")
    except ValueError:
        return default
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def ours(obj: Mapping[str, Any]) -> bool:
    """Made by the gateway: its ID label names it. Anything else in a namespace is not shown."""
    metadata = obj.get("metadata") or {}
    return bool(metadata.get("name")) and (metadata.get("labels") or {}).get(
        ID_LABEL
    ) == metadata.get("name")


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
    started = _moment(notes.get(STARTED), epoch)
    template = settings.templates.get(notes.get(TEMPLATE, ""))
    cpu, memory, disk = template.figures() if template else (0, 0, 0)
    return Sandbox(
        sandbox_id=metadata["name"],
        template=notes.get(TEMPLATE, ""),
        metadata=_json_strings(notes.get(METADATA)),
        state=State.PAUSED if is_paused(obj) else State.RUNNING,
        started_at=started,
        end_at=_moment(notes.get(END), started),
        cpu_count=cpu,
        memory_mb=memory,
        disk_size_mb=disk,
        envd_version=envd_version,
        access_token=access_token(settings.seed, metadata["namespace"], metadata["name"]),
        auto_pause=notes.get(AUTO_PAUSE) == "true",
        endpoint=agent_url(obj, settings.agent_port),
        namespace=metadata["namespace"],
    )


class KubernetesBackend:
    """The Backend over a cluster; `custom` is the client's `CustomObjectsApi`."""

    REAP_EVERY = 5.0  # a list of every sandbox per round

    def __init__(self, custom: Any, settings: Settings, http: httpx.AsyncClient) -> None:
        self.custom = custom
        self.settings = settings
        self.http = http

    def templates(self) -> frozenset[str]:
        return frozenset(self.settings.templates)

    async def create(self, namespace: str, request: NewSandbox) -> Sandbox:
        template = self.settings.templates.get(request.template)
        if template is None:
            raise GatewayError(404, f"template {request.template!r} not found")
        sandbox_id = new_id()
        body = manifest(sandbox_id, request.template, template, request, datetime.now(UTC))
        await self._call(
            self.custom.create_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, body
        )
        try:
            return await self._ready(namespace, sandbox_id)
        except BaseException:
            # A sandbox that never became usable is not left behind to cost anything.
            with contextlib.suppress(GatewayError):
                await self._delete(namespace, sandbox_id)
            raise

    async def get(self, namespace: str, sandbox_id: str) -> Sandbox:
        return sandbox_of(await self._get(namespace, sandbox_id), self.settings)

    async def list(self, namespace: str) -> list[Sandbox]:
        listed = await self._call(
            self.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            label_selector=ID_LABEL,
        )
        return [sandbox_of(o, self.settings) for o in listed.get("items", []) if ours(o)]

    async def suspend(self, namespace: str, sandbox_id: str) -> None:
        def change(obj: Mapping[str, Any]) -> dict[str, Any]:
            if is_paused(obj):
                raise GatewayError(409, f"sandbox {sandbox_id!r} is already paused")
            return {"spec": {"power": "Suspended"}}

        await self._update(namespace, sandbox_id, change)

    async def resume(
        self, namespace: str, sandbox_id: str, end_at: datetime
    ) -> tuple[Sandbox, bool]:
        def change(obj: Mapping[str, Any]) -> dict[str, Any]:
            current = sandbox_of(obj, self.settings)
            end = max(end_at, current.end_at)  # connect only ever extends
            patch: dict[str, Any] = {"metadata": {"annotations": {END: end.isoformat()}}}
            spec: dict[str, Any] = {"power": "Running"} if is_paused(obj) else {}
            if current.auto_pause:
                spec["lifetime"] = {"suspendAt": rfc3339(end)}
            return {**patch, "spec": spec} if spec else patch

        before = await self._update(namespace, sandbox_id, change)
        resumed = is_paused(before)
        if resumed or agent_url(before, self.settings.agent_port) is None:
            return await self._ready(namespace, sandbox_id), resumed
        return sandbox_of(await self._get(namespace, sandbox_id), self.settings), False

    async def delete(self, namespace: str, sandbox_id: str) -> None:
        await self._get(namespace, sandbox_id)  # only the gateway's own
        await self._delete(namespace, sandbox_id)

    async def set_end(self, namespace: str, sandbox_id: str, end_at: datetime) -> None:
        def change(obj: Mapping[str, Any]) -> dict[str, Any]:
            patch: dict[str, Any] = {"metadata": {"annotations": {END: end_at.isoformat()}}}
            if (obj["metadata"].get("annotations") or {}).get(AUTO_PAUSE) == "true":
                patch["spec"] = {"lifetime": {"suspendAt": rfc3339(end_at)}}
            return patch

        await self._update(namespace, sandbox_id, change)

    async def locate(self, sandbox_id: str, access_token: str | None) -> Sandbox | None:
        if not is_id(sandbox_id):
            return None  # a header's text never reaches a label selector
        listed = await self._call(
            self.custom.list_cluster_custom_object,
            GROUP,
            VERSION,
            PLURAL,
            label_selector=f"{ID_LABEL}={sandbox_id}",
        )
        found = [
            sandbox_of(o, self.settings)
            for o in listed.get("items", [])
            if ours(o) and o["metadata"]["name"] == sandbox_id
        ]
        return choose(found, access_token)

    async def reap(self, now: datetime, leading: Callable[[], bool] = always) -> None:
        """Kill running sandboxes past their end time; the platform pauses auto-pause ones.

        A paused sandbox is kept, as E2B keeps it, until it is killed or resumed.
        """
        listed = await self._call(
            self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, label_selector=ID_LABEL
        )
        for obj in listed.get("items", []):
            sandbox = sandbox_of(obj, self.settings)
            expired = sandbox.state is State.RUNNING and sandbox.end_at <= now
            if ours(obj) and expired and not sandbox.auto_pause and leading():
                with contextlib.suppress(GatewayError):
                    await self._delete(sandbox.namespace, sandbox.sandbox_id)

    async def close(self) -> None:
        await self.http.aclose()

    async def _ready(self, namespace: str, sandbox_id: str) -> Sandbox:
        """Wait for the platform to run it and its agent to answer, then `/init` it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.ready_seconds
        while loop.time() < deadline:
            obj = await self._get(namespace, sandbox_id)
            url = agent_url(obj, self.settings.agent_port)
            if url is not None:
                version = await self._health(url)
                if version is not None:
                    await self._init(obj, url)
                    return sandbox_of(obj, self.settings, version)
            await asyncio.sleep(POLL_SECONDS)
        seconds = self.settings.ready_seconds
        raise GatewayError(504, f"sandbox {sandbox_id!r} was not ready within {seconds:.0f} s")

    async def _health(self, url: str) -> str | None:
        try:
            answer = await self.http.get(url + "/health", timeout=2.0)
        except httpx.TransportError:
            return None
        return str(answer.headers.get("x-envd-version", "0.1.0")) if answer.is_success else None

    async def _init(self, obj: Mapping[str, Any], url: str) -> None:
        sandbox = sandbox_of(obj, self.settings)
        notes = obj["metadata"].get("annotations") or {}
        body = {
            "envVars": _json_strings(notes.get(ENV_VARS)),
            "accessToken": sandbox.access_token,
            "defaultWorkdir": self.settings.workdir,
            "timestamp": datetime.now(UTC).isoformat(),
        }
        headers = {"X-Access-Token": sandbox.access_token}
        answer = await self.http.post(url + "/init", json=body, headers=headers, timeout=10.0)
        if answer.status_code != 204:  # noqa: PLR2004
            raise GatewayError(500, f"the sandbox's agent refused /init: {answer.text[:200]}")

    async def _get(self, namespace: str, sandbox_id: str) -> dict[str, Any]:
        if not is_id(sandbox_id):
            raise not_found(sandbox_id)  # never a name the cluster would read as a path
        obj = await self._call(
            self.custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            sandbox_id,
            missing=sandbox_id,
        )
        if not ours(obj):
            raise not_found(sandbox_id)
        return dict(obj)

    async def _update(
        self, namespace: str, sandbox_id: str, change: Callable[[Mapping[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """Read, decide, merge-patch at that resourceVersion; read again if it moved meanwhile.

        The platform writes status all the time, so a conflict is routine, not an error. The
        object as it was decided on is returned.
        """
        for _ in range(UPDATE_ATTEMPTS):
            obj = await self._get(namespace, sandbox_id)
            patch = change(obj)
            version = {"resourceVersion": obj["metadata"]["resourceVersion"]}
            patch = {**patch, "metadata": {**patch.get("metadata", {}), **version}}
            try:
                await self._call(
                    self.custom.patch_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    sandbox_id,
                    patch,
                    missing=sandbox_id,
                    _content_type=MERGE_PATCH,
                )
            except GatewayError as e:
                if e.status != 409:  # noqa: PLR2004
                    raise
                continue
            return obj
        raise GatewayError(409, f"sandbox {sandbox_id!r} kept changing; try again")

    async def _delete(self, namespace: str, sandbox_id: str) -> None:
        await self._call(
            self.custom.delete_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            sandbox_id,
            missing=sandbox_id,
        )

    async def _call(
        self, method: Callable[..., T], *args: Any, missing: str | None = None, **kwargs: Any
    ) -> T:
        """One client call, off the event loop, its errors turned into the gateway's."""
        try:
            return await asyncio.to_thread(method, *args, **kwargs)
        except ApiException as e:
            if e.status == 404 and missing is not None:  # noqa: PLR2004
                raise not_found(missing) from None
            if e.status == 409:  # noqa: PLR2004
                raise GatewayError(409, "the sandbox changed meanwhile; try again") from None
            if e.status in {400, 422}:
                # The API server or the platform's admission refused what the caller asked for.
                raise GatewayError(400, f"the platform refused the sandbox: {refusal(e)}") from None
            if e.status == 403:  # noqa: PLR2004
                log.error("the cluster refused the gateway: %s", e.reason)
                raise GatewayError(500, "the gateway may not do that in this namespace") from None
            log.error("the cluster answered %s: %s", e.status, e.reason)
            raise GatewayError(502, "the cluster did not answer as expected") from None
        except Exception:
            log.exception("calling the cluster failed")
            raise GatewayError(502, "the cluster could not be reached") from None
