"""The control API's snapshot routes: take, fork, list and delete, and a create's restore.

A snapshot here is of a sandbox's files (its WorkspaceSandbox's `spec.snapshots`), never of
its memory; E2B's SDK deletes one as a template.
"""

import asyncio
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from workspace_gateway import not_offered
from workspace_gateway.backend import Backend, NewSandbox, Sandbox, Snapshot
from workspace_gateway.errors import GatewayError
from workspace_gateway.listing import limit_of, query_value
from workspace_gateway.reply import Reply
from workspace_gateway.request_bodies import request_object, timeout_of
from workspace_gateway.sandbox_json import sandbox_json

MAX_FORKS = 20  # the SDK's own bound
SNAPSHOT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?")
"""A name of `spec.snapshots`: a DNS label of at most 40 characters."""


def snapshot_json(snapshot: Snapshot) -> dict[str, Any]:
    """`SnapshotInfo`, and what kind of snapshot it is: E2B's fields, then this gateway's."""
    return {
        "snapshotID": snapshot.snapshot_id,
        "names": [snapshot.name],
        "sandboxID": snapshot.sandbox_id,
        "memory": False,
        "kind": "filesystem",
        "readyToUse": snapshot.ready,
    }


async def reads_files(acts: Callable[[], Awaitable[bool]]) -> None:
    """Refuse a caller who may not act on the namespace's sandboxes a restore or a fork.

    Either hands its caller a copy of a sandbox's files, with the copy's token: as much as a
    read of the sandbox's own token gives, which needs the same right.
    """
    if not await acts():
        raise GatewayError(
            403,
            "a restore or a fork gives you a copy of a sandbox's files: it needs the right to "
            "act on the namespace's sandboxes (update on workspacesandboxes), not only to "
            "create them",
        )


class SnapshotRoutes:
    """The routes over one Backend's snapshots; `domain` goes into the forks' answers."""

    def __init__(self, backend: Backend, domain: str) -> None:
        self.backend = backend
        self.domain = domain

    async def restoring(self, namespace: str, request: NewSandbox, restore: Snapshot) -> NewSandbox:
        """A create from a snapshot (`Sandbox.create(snapshot_id)`): its sandbox's template."""
        known = {s.snapshot_id: s for s in await self.backend.snapshots(namespace)}
        found = known.get(restore.snapshot_id)
        if found is None:
            raise GatewayError(404, f"snapshot {restore.snapshot_id!r} not found")
        if not found.ready:
            raise GatewayError(
                409, f"snapshot {restore.snapshot_id!r} is still being taken; try again shortly"
            )
        source = await self.backend.get(namespace, restore.sandbox_id)
        return replace(request, template=source.template, restore=found)

    async def take_snapshot(
        self, sandbox_id: str, *, namespace: str, body: bytes, **_: object
    ) -> Reply:
        """`create_snapshot`: a filesystem snapshot, which the answer says it is."""
        asked = request_object(body)
        if asked.get("memory") is True:
            raise GatewayError(501, not_offered.MEMORY)
        if asked.get("memory") not in {None, False}:
            raise GatewayError(400, "memory must be true or false")
        name = asked.get("name")
        if name is None:
            name = "snap-" + secrets.token_hex(4)
        elif not isinstance(name, str) or not SNAPSHOT_NAME.fullmatch(name):
            raise GatewayError(
                400,
                f"name {name!r}: a snapshot's name here is a DNS label of at most 40 characters "
                "(lower-case letters, digits and '-'), with no project or tag",
            )
        taken = await self.backend.snapshot(namespace, sandbox_id, name)
        return Reply(201, snapshot_json(taken))

    async def fork(
        self,
        sandbox_id: str,
        *,
        namespace: str,
        body: bytes,
        acts: Callable[[], Awaitable[bool]],
        **_: object,
    ) -> Reply:
        """`fork`: `count` sandboxes from one filesystem snapshot of this one, taken now.

        The snapshot (`fork-...`) is kept, listed with the others; the forks have the source's
        files, template, metadata, egress and preview privacy, and none of its processes.
        """
        asked = request_object(body)
        timeout = timeout_of(asked.get("timeout"))
        count = asked.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_FORKS:
            raise GatewayError(400, f"count must be a whole number from 1 to {MAX_FORKS}")
        source = await self.backend.get(namespace, sandbox_id)
        await reads_files(acts)
        taken = await self.backend.snapshot(namespace, sandbox_id, "fork-" + secrets.token_hex(4))
        if not taken.ready:
            raise GatewayError(
                504,
                f"the fork's snapshot {taken.snapshot_id!r} is not ready yet: create sandboxes "
                "from it with Sandbox.create once list_snapshots says it is",
            )
        request = NewSandbox(
            template=source.template,
            timeout=timeout,
            metadata=dict(source.metadata),
            auto_pause=source.auto_pause,
            network=source.network,
            public_traffic=source.public_traffic,
            restore=taken,
        )
        made = await asyncio.gather(
            *(self.backend.create(namespace, request) for _ in range(count)),
            return_exceptions=True,
        )
        results: list[dict[str, Any]] = []
        for one in made:
            if isinstance(one, Sandbox):
                results.append({"sandbox": sandbox_json(one, self.domain)})
            elif isinstance(one, GatewayError):
                results.append({"error": one.body()})
            else:
                raise one
        return Reply(201, results)

    async def list_snapshots(
        self, *, namespace: str, query: dict[str, list[str]], **_: object
    ) -> Reply:
        """`list_snapshots`: by sandbox and by name (or ID), a page at a time."""
        sandbox_id, name = query_value(query, "sandboxID"), query_value(query, "name")
        limit = limit_of(query)
        chosen = sorted(
            (
                s
                for s in await self.backend.snapshots(namespace)
                if (not sandbox_id or s.sandbox_id == sandbox_id)
                and (not name or name in {s.name, s.snapshot_id})
            ),
            key=lambda s: s.snapshot_id,
        )
        token = query_value(query, "nextToken")
        if token:
            chosen = [s for s in chosen if s.snapshot_id > token]
        headers = (("x-next-token", chosen[limit - 1].snapshot_id),) if len(chosen) > limit else ()
        return Reply(200, [snapshot_json(s) for s in chosen[:limit]], headers)

    async def delete_template(self, name: str, *, namespace: str, **_: object) -> Reply:
        """`delete_snapshot` (E2B's snapshots are templates); any other template is refused."""
        snapshot = Snapshot.of(name)
        if snapshot is None:
            raise GatewayError(501, not_offered.TEMPLATES)
        await self.backend.delete_snapshot(namespace, snapshot)
        return Reply(204)
