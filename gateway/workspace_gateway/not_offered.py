"""E2B routes this gateway does not serve, each answered `501` with what to do instead.

The SDKs turn a 404 into "not found" (`create_snapshot` raises `SandboxNotFoundException` for a
live sandbox, `delete_snapshot` returns False), and agents act on exception types: they
recreate a sandbox they think is gone. A 501 comes out as a plain `SandboxException` carrying
the message, written for whoever reads it: an agent or its developer. No route here looks a
sandbox up, so the answer says nothing about whether one exists.
"""

from dataclasses import dataclass

MEMORY = (
    "snapshots of memory are not offered by this gateway: a snapshot here is of the sandbox's "
    "files (its workspace disk), and a sandbox made from it starts with none of the source's "
    "processes; ask for mode='filesystem', or leave the mode out"
)
TEMPLATES = (
    "building, changing or deleting templates is not offered by this gateway: its templates "
    "are the platform's. To add one, the platform builds the image (images/sandbox/Dockerfile "
    "is the reference), pushes it, names it in the SandboxPlatform's image catalog, and maps a "
    "template name to it in the gateway's templates.yaml (docs/gateway.md, Templates and "
    "keys); then create sandboxes from it by that name"
)


@dataclass(frozen=True)
class NotOffered:
    method: str
    template: str
    """The path, with `{id}` for a sandbox ID and `{name}` for any other one segment."""
    message: str


ROUTES = (
    NotOffered(
        "PUT",
        "/sandboxes/{id}/network",
        "changing a sandbox's network after create is not offered by this gateway: its egress "
        "(allow_internet_access, network allow_out and deny_out) is set when it is created and "
        "stays; create a new sandbox with the network it needs",
    ),
    NotOffered(
        "POST",
        "/sandboxes/{id}/resume",
        "resume is not offered by this gateway: Sandbox.connect resumes a paused sandbox",
    ),
    NotOffered(
        "POST",
        "/sandboxes/{id}/refreshes",
        "refreshes are not offered by this gateway: set_timeout moves a sandbox's end time",
    ),
    *(
        NotOffered(
            "GET",
            path,
            "sandbox logs are not offered by this gateway: run the command through "
            "commands.run, whose output streams back, or read the sandbox's files",
        )
        for path in ("/sandboxes/{id}/logs", "/v2/sandboxes/{id}/logs")
    ),
    NotOffered(
        "GET",
        "/sandboxes/metrics",
        "metrics of many sandboxes at once are not offered by this gateway: ask each sandbox",
    ),
    *(
        NotOffered(
            method,
            path,
            "volumes are not offered by this gateway: each sandbox has one persistent "
            "workspace, kept across pause and connect",
        )
        for method, path in (
            ("GET", "/volumes"),
            ("POST", "/volumes"),
            ("GET", "/volumes/{name}"),
            ("DELETE", "/volumes/{name}"),
        )
    ),
    *(
        NotOffered(
            method,
            path,
            "secrets are not offered by this gateway: pass values to a sandbox as envs when it "
            "is created, or as envs of a single command",
        )
        for method, path in (
            ("GET", "/secrets"),
            ("POST", "/secrets"),
            ("GET", "/secrets/{name}"),
            ("POST", "/secrets/{name}"),
            ("DELETE", "/secrets/{name}"),
        )
    ),
    *(
        NotOffered(method, path, TEMPLATES)
        for method, path in (
            ("POST", "/v3/templates"),
            ("POST", "/v2/templates/{name}/builds/{name}"),
            ("GET", "/templates/{name}/builds/{name}/status"),
            ("GET", "/templates/{name}/builds/{name}/logs"),
            ("PATCH", "/templates/{name}"),
            ("PATCH", "/v2/templates/{name}"),
            ("POST", "/templates/tags"),
            ("DELETE", "/templates/tags"),
        )
    ),
    *(
        NotOffered(
            "GET",
            path,
            "this template listing is not offered by this gateway: its templates are read with "
            "GET /templates, GET /templates/<name>, its tags with GET /templates/<name>/tags, "
            "and Template.exists",
        )
        for path in (
            "/v2/templates",
            "/default-templates",
            "/templates/{name}/tags/count",
            "/templates/{name}/tags/exists",
            "/templates/{name}/tags/groups",
            "/templates/{name}/tags/{name}/assignments",
            "/templates/{name}/files/{name}",
        )
    ),
)
"""`DELETE /templates/{name}` is `Control.delete_template`: the SDK's `delete_snapshot` when it
names a snapshot, else refused with `TEMPLATES`."""
