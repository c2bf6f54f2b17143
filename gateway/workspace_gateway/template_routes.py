"""The control API's template routes: the platform's mapping, as E2B's templates.

Each template has one build, ready, tagged `default`, made when the gateway started.
"""

import uuid
from datetime import datetime
from typing import Any

from workspace_gateway.backend import Backend
from workspace_gateway.errors import GatewayError
from workspace_gateway.reply import Reply
from workspace_gateway.times import rfc3339


def template_build(name: str) -> str:
    """A template's one build, as a UUID: the same for its name on every replica."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"workspace-sandbox-gateway:template:{name}"))


class TemplateRoutes:
    """The routes over one Backend's templates; `started` is when the gateway started."""

    def __init__(self, backend: Backend, started: datetime) -> None:
        self.backend = backend
        self.started = started

    async def template_alias(self, name: str, **_: object) -> Reply:
        """`Template.exists`: the templates of this gateway's mapping, the same for everyone."""
        if name not in self.backend.templates():
            raise GatewayError(404, f"template {name!r} not found")
        return Reply(200, {"templateID": name, "public": True})

    def _template(self, name: str) -> dict[str, Any]:
        """E2B's `Template`, from the mapping: one build, ready, the only tag `default`."""
        cpu, memory, disk = self.backend.figures(name)
        return {
            "templateID": name,
            "buildID": template_build(name),
            "cpuCount": cpu,
            "memoryMB": memory,
            "diskSizeMB": disk,
            "public": True,
            "aliases": [name],
            "names": [name],
            "createdAt": rfc3339(self.started),
            "updatedAt": rfc3339(self.started),
            "createdBy": None,
            "lastSpawnedAt": None,
            "spawnCount": 0,
            "buildCount": 1,
            "envdVersion": "",
            "buildStatus": "ready",
        }

    async def list_templates(self, **_: object) -> Reply:
        """`GET /templates`: the mapping's templates (E2B CLI's `template list`)."""
        return Reply(200, [self._template(n) for n in sorted(self.backend.templates())])

    async def get_template(self, name: str, **_: object) -> Reply:
        if name not in self.backend.templates():
            raise GatewayError(404, f"template {name!r} not found")
        template = self._template(name)
        build = {
            "buildID": template["buildID"],
            "status": "ready",
            "createdAt": template["createdAt"],
            "updatedAt": template["updatedAt"],
            "finishedAt": template["createdAt"],
            "cpuCount": template["cpuCount"],
            "memoryMB": template["memoryMB"],
            "diskSizeMB": template["diskSizeMB"],
        }
        return Reply(200, {**template, "builds": [build]})

    async def template_tags(self, name: str, **_: object) -> Reply:
        """`Template.get_tags`: a mapping's template has one build, tagged `default`."""
        if name not in self.backend.templates():
            raise GatewayError(404, f"template {name!r} not found")
        created = rfc3339(self.started)
        return Reply(
            200, [{"tag": "default", "buildID": template_build(name), "createdAt": created}]
        )
