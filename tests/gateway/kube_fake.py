"""An in-process fake of the few Kubernetes API endpoints the gateway uses, on a loopback port.

Secrets and namespaced custom objects: get, list (by namespace or across all, with equality and
existence label selectors), create (409 when the name is taken), merge-patch and delete, each
object with a resourceVersion that every write moves on, and watches of a collection (see
`watch_stream`). Custom objects are kept as the API server keeps those of a CRD with a status
subresource: `metadata.generation` starts at 1 and moves on with every change outside metadata
and status, writes to the object leave its status alone (`Cluster.update` is the status
writer's), and a delete of one with finalizers only sets its `deletionTimestamp` until a write
removes the last of them (`deleted`). `tests/control_plane/test_kube_fake_drift.py` asks the
real API server the same questions. Leases: create, get, replace and merge-patch, a write at a
stale resourceVersion answered 409. A route or resource it does not model answers 501 naming it
and is kept in `Cluster.unmodelled`, which `serving` fails the test on; a method it does not
offer answers 405. So a call the gateway makes that a real API server would serve differently
shows up as a failure, never as an object not found.
The real `kubernetes` client talks to it through a kubeconfig written by `kubeconfig`.
"""

import base64
import copy
import datetime as dt
import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

Key = tuple[str, str, str]  # (resource, namespace, name)
Answer = tuple[int, dict[str, Any]]

NAMESPACED = re.compile(
    r"/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/namespaces/(?P<ns>[^/]+)"
    r"/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?P<status>/status)?)?"
)
ALL_NAMESPACES = re.compile(r"/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/(?P<plural>[^/]+)")


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


def selected(obj: dict[str, Any], selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        name, eq, value = term.partition("=")
        if (eq and labels.get(name) != value) or (not eq and name not in labels):
            return False
    return True


class Cluster:
    """The stored objects, and every request seen (method, path, content type)."""

    def __init__(self) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()
        self.versions = itertools.count(1)
        self.written: list[dict[str, Any]] = []
        """Every object as created or patched, for schema checks."""
        self.authority = Authority()
        self.history = History()
        """What watches send."""
        self.lists: list[dict[str, str]] = []
        """The query of every list across all namespaces (watches aside), in order."""
        self.unmodelled: list[str] = []
        """Every request for what the fake does not model (answered 501), in order."""

    def put(self, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        obj.setdefault("metadata", {})["resourceVersion"] = str(next(self.versions))
        kind = "MODIFIED" if key in self.objects else "ADDED"
        self.objects[key] = obj
        self.history.record(key, kind, obj)
        return obj

    def remove(self, key: Key) -> dict[str, Any]:
        """Delete, as the API server does: the last state under a new resourceVersion."""
        obj = self.objects.pop(key)
        obj["metadata"]["resourceVersion"] = str(next(self.versions))
        self.history.record(key, "DELETED", obj)
        return obj

    def update(self, key: Key, change: Callable[[dict[str, Any]], None]) -> None:
        """Change a stored object as a controller would (status), moving its resourceVersion."""
        with self.lock:
            obj = copy.deepcopy(self.objects[key])
            change(obj)
            self.put(key, obj)

    def resource(self, plural: str) -> list[dict[str, Any]]:
        return [o for (r, _, _), o in self.objects.items() if r == plural]


MAX_ANNOTATIONS = 256 * 1024  # the API server's limit on an object's annotations, in bytes


def too_big(obj: dict[str, Any]) -> Answer | None:
    notes = obj.get("metadata", {}).get("annotations") or {}
    if sum(len(k) + len(v) for k, v in notes.items()) > MAX_ANNOTATIONS:
        message = f"{obj['metadata']['name']}: metadata.annotations: Too long: must have at most 262144 bytes"
        return status(422, "Invalid", message)
    return None


def status(code: int, reason: str, message: str) -> Answer:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    return code, {**body, "reason": reason, "message": message}


def unmodelled(cluster: Cluster, method: str, what: str) -> Answer:
    """A 501 naming what the fake does not model, kept for the fixture to fail the test on: a
    real API server would serve it, and a 404 would read as an object not found."""
    cluster.unmodelled.append(f"{method} {what}")
    return status(501, "NotImplemented", f"the fake API server does not model {method} {what}")


def answer(
    cluster: Cluster, method: str, url: str, body: Callable[[], Any], content_type: str
) -> Answer:
    """The fake API server's one entry: a request in, (status, JSON body) out."""
    path, _, query = url.partition("?")
    judged = authority(cluster.authority, method, path, body)
    if judged is not None:
        return judged
    selector = (parse_qs(query).get("labelSelector") or [""])[0]
    found = NAMESPACED.fullmatch(path)
    if found is None:
        every = ALL_NAMESPACES.fullmatch(path)
        if every is None or method != "GET":
            return unmodelled(cluster, method, path)
        items = [o for o in cluster.resource(every["plural"]) if selected(o, selector)]
        return page(cluster, items, parse_qs(query))
    plural, ns, name = found["plural"], found["ns"], found["name"]
    if found["group"] == LEASE_GROUP:
        return leases(cluster, method, (plural, ns, name or ""), body, content_type)
    custom = found["group"] is not None
    if name is None:
        return collection(
            cluster, method, (plural, ns, ""), selector, body, parse_qs(query), custom=custom
        )
    sub = "status" if found["status"] else ""
    return item(cluster, method, (plural, ns, name), body, content_type, sub)


def page(cluster: Cluster, items: list[dict[str, Any]], query: dict[str, list[str]]) -> Answer:
    """A list, one page of `limit` at a time in (namespace, name) order, as the API server pages.

    The continue token names the last object served and the version the list began at; one
    from before a `compact` is answered 410 Gone, as an expired token is.
    """
    cluster.lists.append({k: v[0] for k, v in query.items()})
    limit = int((query.get("limit") or ["0"])[0])
    token = (query.get("continue") or [""])[0]
    metadata = listed_version(cluster)
    items = sorted(items, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))
    if token:
        began, last = json.loads(base64.b64decode(token))
        if int(began) < cluster.history.oldest:
            return status(410, "Expired", "the provided continue parameter is too old")
        metadata["resourceVersion"] = began
        items = [o for o in items if [o["metadata"]["namespace"], o["metadata"]["name"]] > last]
    if limit and len(items) > limit:
        items = items[:limit]
        last = [items[-1]["metadata"]["namespace"], items[-1]["metadata"]["name"]]
        metadata["continue"] = base64.b64encode(
            json.dumps([metadata["resourceVersion"], last]).encode()
        ).decode()
    return 200, {"kind": "List", "metadata": metadata, "items": items}


def collection(  # noqa: PLR0917  # the request's parts
    cluster: Cluster,
    method: str,
    key: Key,
    selector: str,
    body: Callable[[], Any],
    query: dict[str, list[str]],
    *,
    custom: bool = False,
) -> Answer:
    plural, ns, _ = key
    if method == "GET":
        items = [
            o
            for (r, n, _), o in cluster.objects.items()
            if r == plural and n == ns and selected(o, selector)
        ]
        return page(cluster, items, query)
    if method != "POST":
        return status(405, "MethodNotAllowed", method)
    obj = body()
    obj["metadata"]["namespace"] = ns
    key = (plural, ns, obj["metadata"]["name"])
    if key in cluster.objects:
        return status(409, "AlreadyExists", f"{key[2]} already exists")
    refused = too_big(obj)
    if refused:
        return refused
    cluster.written.append(copy.deepcopy(obj))
    if custom:
        obj.pop("status", None)  # the status subresource's, never the create's
        obj["metadata"]["generation"] = 1
    return 201, cluster.put(key, obj)


def item(  # noqa: PLR0917  # the request's parts
    cluster: Cluster,
    method: str,
    key: Key,
    body: Callable[[], Any],
    content_type: str,
    sub: str = "",
) -> Answer:
    current = cluster.objects.get(key)
    if current is None:
        return status(404, "NotFound", f'{key[0]} "{key[2]}" not found')
    if sub:
        return status_item(cluster, method, key, body, content_type)
    if method == "GET":
        return 200, current
    if method == "DELETE":
        return deleted(cluster, key, body)
    if method != "PATCH":
        return status(405, "MethodNotAllowed", method)
    return patched(cluster, key, body, content_type)


def deleted(cluster: Cluster, key: Key, body: Callable[[], Any]) -> Answer:
    """A delete, refused 409 when its preconditions name another resourceVersion.

    An object with finalizers stays, with its `deletionTimestamp` set (and its generation moved
    on, as for any object that has one) the first time, unchanged after; a write that removes
    its last finalizer then deletes it (`patched`).
    """
    wanted = ((body() or {}).get("preconditions") or {}).get("resourceVersion")
    current = cluster.objects[key]["metadata"]["resourceVersion"]
    if wanted and wanted != current:
        message = (
            f'Operation cannot be fulfilled on {key[0]} "{key[2]}": Precondition failed: '
            f"ResourceVersion in precondition: {wanted}, ResourceVersion in object meta: {current}"
        )
        return status(409, "Conflict", message)
    metadata = cluster.objects[key]["metadata"]
    if not metadata.get("finalizers"):
        return 200, cluster.remove(key)
    if metadata.get("deletionTimestamp"):
        return 200, cluster.objects[key]
    obj = copy.deepcopy(cluster.objects[key])
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj["metadata"] |= {"deletionTimestamp": now, "deletionGracePeriodSeconds": 0}
    if "generation" in metadata:
        obj["metadata"]["generation"] += 1
    return 200, cluster.put(key, obj)


def status_item(
    cluster: Cluster, method: str, key: Key, body: Callable[[], Any], content_type: str
) -> Answer:
    """The status subresource: a read, or a merge patch of which only the status is kept."""
    current = cluster.objects[key]
    if method == "GET":
        return 200, current
    if method != "PATCH" or content_type != "application/merge-patch+json":
        return status(405, "MethodNotAllowed", method)
    patch = body()
    wanted = (patch.get("metadata") or {}).get("resourceVersion")
    if wanted and wanted != current["metadata"]["resourceVersion"]:
        return status(409, "Conflict", "the object has been modified")
    obj = copy.deepcopy(current)
    obj.pop("status", None)
    written = merge(current, patch).get("status")
    if written is not None:
        obj["status"] = written
    if obj == current:
        return 200, current
    return 200, cluster.put(key, obj)


def patched(cluster: Cluster, key: Key, body: Callable[[], Any], content_type: str) -> Answer:
    current = cluster.objects[key]
    if content_type != "application/merge-patch+json":
        return status(415, "UnsupportedMediaType", "merge patches only")
    patch = body()
    wanted = (patch.get("metadata") or {}).get("resourceVersion")
    if wanted and wanted != current["metadata"]["resourceVersion"]:
        return status(409, "Conflict", "the object has been modified")
    obj = merge(copy.deepcopy(current), patch)
    refused = too_big(obj) or finalizers_added(current, obj)
    if refused:
        return refused
    cluster.written.append(copy.deepcopy(obj))
    if "generation" in current["metadata"]:
        obj = custom_update(current, obj)
    if current["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
        # Its last finalizer gone: deleted. The answer is the object as written, the watch's
        # DELETED event the object as it was stored, finalizer and all.
        obj["metadata"]["resourceVersion"] = cluster.remove(key)["metadata"]["resourceVersion"]
        return 200, obj
    if obj == current:
        return 200, current  # nothing changed: nothing written, the same resourceVersion
    return 200, cluster.put(key, obj)


def custom_update(current: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    """A write to a custom object: its status kept, its generation moved on for a new spec."""
    obj.pop("status", None)
    if "status" in current:
        obj["status"] = copy.deepcopy(current["status"])
    outside = [
        {k: v for k, v in o.items() if k not in {"metadata", "status"}} for o in (current, obj)
    ]
    if outside[0] != outside[1]:
        obj["metadata"]["generation"] = current["metadata"]["generation"] + 1
    return obj


def finalizers_added(current: dict[str, Any], obj: dict[str, Any]) -> Answer | None:
    if not current["metadata"].get("deletionTimestamp"):
        return None
    before = set(current["metadata"].get("finalizers") or [])
    if set(obj["metadata"].get("finalizers") or []) <= before:
        return None
    message = (
        f"{current['metadata']['name']}: metadata.finalizers: Forbidden: "
        "no new finalizers can be added if the object is being deleted"
    )
    return status(422, "Invalid", message)


# --- Authentication, authorization and admission: TokenReview, SubjectAccessReview, refusals.

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"  # noqa: S105  # a path
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
DEFAULT_AUDIENCES = ("https://kubernetes.default.svc",)


@dataclass
class Authority:
    """What the API server knows of who is who and who may do what, as a test sets it.

    `tokens` maps a token to its user (`username`, and optionally `uid`, `groups`, `extra`,
    `audiences`); `grants` holds (subject, namespace, verb) on workspacesandboxes, a subject
    being a username or `group:<name>`; `refusals` maps a resource (plural) to the answer
    every create of it gets, as a ResourceQuota or an admission webhook would give. Every
    review received is kept, in order.
    """

    tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    grants: set[tuple[str, str, str]] = field(default_factory=set)
    refusals: dict[str, Answer] = field(default_factory=dict)
    token_reviews: list[dict[str, Any]] = field(default_factory=list)
    access_reviews: list[dict[str, Any]] = field(default_factory=list)


def authority(judge: Authority, method: str, path: str, body: Callable[[], Any]) -> Answer | None:
    """The answer to a review or a refused create; None for anything else."""
    if method == "POST" and path == TOKEN_REVIEWS:
        return token_review(judge, body())
    if method == "POST" and path == ACCESS_REVIEWS:
        return access_review(judge, body())
    found = NAMESPACED.fullmatch(path)
    if method == "POST" and found and found["name"] is None and found["plural"] in judge.refusals:
        return judge.refusals[found["plural"]]
    return None


def token_review(judge: Authority, review: dict[str, Any]) -> Answer:
    judge.token_reviews.append(review)
    spec = review.get("spec") or {}
    user = judge.tokens.get(spec.get("token", ""))
    wanted = spec.get("audiences") or []
    status: dict[str, Any] = {"user": {}, "error": "invalid bearer token"}
    if user is not None:
        audiences = user.get("audiences", DEFAULT_AUDIENCES)
        granted = [a for a in audiences if a in wanted] if wanted else list(audiences)
        if granted:
            info = {k: user[k] for k in ("username", "uid", "groups", "extra") if k in user}
            status = {"authenticated": True, "user": info, "audiences": granted}
        else:
            status = {"user": {}, "error": "token audiences are invalid for the target audiences"}
    reply = {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {}}
    return 201, {**reply, "spec": spec, "status": status}


def access_review(judge: Authority, review: dict[str, Any]) -> Answer:
    judge.access_reviews.append(review)
    spec = review.get("spec") or {}
    wanted = spec.get("resourceAttributes") or {}
    subjects = [spec.get("user", "")] + [f"group:{g}" for g in spec.get("groups") or []]
    allowed = (
        wanted.get("group") == "sandbox.cozystack.io"
        and wanted.get("resource") == "workspacesandboxes"
        and any((s, wanted.get("namespace"), wanted.get("verb")) in judge.grants for s in subjects)
    )
    reply = {"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1"}
    return 201, {**reply, "metadata": {}, "spec": spec, "status": {"allowed": allowed}}


def quota_exceeded(plural: str) -> Answer:
    message = (
        f'{plural}.sandbox.cozystack.io "x" is forbidden: exceeded quota: sandboxes, '
        f"requested: count/{plural}.sandbox.cozystack.io=1, "
        f"used: count/{plural}.sandbox.cozystack.io=2, limited: count/{plural}.sandbox.cozystack.io=2"
    )
    return status(403, "Forbidden", message)


def admission_denied(message: str, code: int = 403) -> Answer:
    return status(code, "Forbidden" if code == 403 else "BadRequest", message)


# --- coordination.k8s.io/v1 Leases: create, get, replace (PUT) and merge-patch, by name ---

LEASE_GROUP = "coordination.k8s.io"


def leases(
    cluster: Cluster, method: str, key: Key, body: Callable[[], Any], content_type: str
) -> Answer:
    """A Lease as the API server keeps it: a write at a stale resourceVersion is a 409.

    A replace without a resourceVersion is refused 422: the API server allows no unconditional
    update of a Lease. Listing, watching and deleting are not offered: the gateway's RBAC grants none of them.
    """
    plural, ns, name = key
    if plural != "leases":
        return unmodelled(cluster, method, f"{plural} in {ns}")
    if not name:
        return lease_create(cluster, method, ns, body)
    if key not in cluster.objects:
        return status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
    served = {
        "PATCH": lambda: patched(cluster, key, body, content_type),
        "PUT": lambda: lease_replace(cluster, key, body()),
        "GET": lambda: (200, cluster.objects[key]),
    }
    serve = served.get(method)
    return serve() if serve else status(405, "MethodNotAllowed", method)


def lease_create(cluster: Cluster, method: str, ns: str, body: Callable[[], Any]) -> Answer:
    if method != "POST":
        return status(405, "MethodNotAllowed", method)
    obj = body()
    metadata = obj.setdefault("metadata", {})
    if metadata.get("resourceVersion"):
        # The storage layer's refusal, which the API server passes on as it is: a 500, no reason.
        code, refused = status(
            500, "", "resourceVersion should not be set on objects to be created"
        )
        del refused["reason"]
        return code, refused
    metadata["namespace"] = ns
    key = ("leases", ns, metadata.get("name", ""))
    if key in cluster.objects:
        return status(409, "AlreadyExists", f'leases.coordination.k8s.io "{key[2]}" already exists')
    cluster.written.append(copy.deepcopy(obj))
    return 201, cluster.put(key, obj)


def lease_replace(cluster: Cluster, key: Key, obj: Any) -> Answer:
    metadata = obj.get("metadata") or {}
    if metadata.get("name") != key[2] or metadata.get("namespace", key[1]) != key[1]:
        return status(400, "BadRequest", "the name of the object does not match the URL")
    wanted = metadata.get("resourceVersion")
    if not wanted:
        message = (
            f'leases.coordination.k8s.io "{key[2]}" is invalid: metadata.resourceVersion: '
            "Invalid value: 0: must be specified for an update"
        )
        return status(422, "Invalid", message)
    if wanted != cluster.objects[key]["metadata"]["resourceVersion"]:
        message = f'Operation cannot be fulfilled on leases.coordination.k8s.io "{key[2]}": the object has been modified'
        return status(409, "Conflict", message)
    metadata["namespace"] = key[1]
    cluster.written.append(copy.deepcopy(obj))
    return 200, cluster.put(key, obj)


# --- end of Leases ---


# --- The HTTP server.


def handler(cluster: Cluster) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def _serve(self) -> None:
            url = urlsplit(self.path)
            content_type = self.headers.get("Content-Type", "")
            cluster.requests.append((self.command, url.path, content_type))
            if self.command == "GET" and is_watch(url.query):
                watch_stream(cluster, self, url.path, url.query)
                return

            def body() -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"null")

            with cluster.lock:
                code, reply = answer(cluster, self.command, self.path, body, content_type)
            data = json.dumps(reply).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve  # noqa: N815  # http.server's names

    return Handler


# Watches: a collection's changes as chunked JSON lines, one event a line. -----------------------


class History:
    """Every change as a watch sends it, and the oldest resourceVersion a watch may resume from.

    `compact` forgets everything so far, as etcd's compaction does, so that a watch resumed
    from an older version is answered 410 Gone; `drop` ends every open watch, as a restarting
    API server does, and while `refusing` new watches are answered 503.
    """

    def __init__(self) -> None:
        self.events: list[tuple[Key, str, dict[str, Any]]] = []
        self.oldest = 0
        self.drops = 0
        self.closed = False
        self.refusing = False
        self.changed = threading.Condition()
        self.watches: list[dict[str, str]] = []
        """The query of every watch opened."""

    def record(self, key: Key, kind: str, obj: dict[str, Any]) -> None:
        with self.changed:
            self.events.append((key, kind, copy.deepcopy(obj)))
            self.changed.notify_all()

    def compact(self) -> None:
        with self.changed:
            self.oldest = max((version(o) for _, _, o in self.events), default=0)

    def drop(self) -> None:
        with self.changed:
            self.drops += 1
            self.changed.notify_all()

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify_all()


def version(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def listed_version(cluster: Cluster) -> dict[str, str]:
    with cluster.history.changed:
        latest = max((version(o) for _, _, o in cluster.history.events), default=0)
        return {"resourceVersion": str(max(latest, cluster.history.oldest))}


def is_watch(query: str) -> bool:
    return (parse_qs(query).get("watch") or [""])[0] in {"true", "1"}


def watch_stream(cluster: Cluster, request: BaseHTTPRequestHandler, path: str, query: str) -> None:
    """One watch, as the API server serves it: from `resourceVersion` (without one, every
    matching object as ADDED first), until `timeoutSeconds`, a `drop` or the server's end.
    Too old a version is one ERROR event with a 410 Status, then the end of the stream.
    """
    params = {k: v[0] for k, v in parse_qs(query).items()}
    history = cluster.history
    with history.changed:
        # Counted as opened, and a drop from now on ends it, in one step: a test that drops
        # the watch once it sees it opened never drops it too early to count.
        history.watches.append(params)
        drops = history.drops
    every = ALL_NAMESPACES.fullmatch(path)
    found = every or NAMESPACED.fullmatch(path)
    if found is None or (every is None and found["name"] is not None):
        cluster.unmodelled.append(f"watch {path}")
        request.send_error(501, f"the fake API server does not model a watch of {path}")
        return
    namespace = None if every else found["ns"]
    if history.refusing:
        refuse(request)
        return

    def wanted(key: Key, obj: dict[str, Any]) -> bool:
        return (
            key[0] == found["plural"]
            and namespace in {None, key[1]}
            and selected(obj, params.get("labelSelector", ""))
        )

    open_stream(request)
    deadline = time.monotonic() + float(params.get("timeoutSeconds") or 1800)
    with history.changed:
        start = params.get("resourceVersion") or ""
        if start and int(start) < history.oldest:
            gone = status(410, "Expired", f"too old resource version: {start}")[1]
            pending = [{"type": "ERROR", "object": gone}]
            deadline = 0.0
        elif start:
            pending = [
                {"type": kind, "object": obj}
                for key, kind, obj in history.events
                if version(obj) > int(start) and wanted(key, obj)
            ]
        else:
            pending = [
                {"type": "ADDED", "object": copy.deepcopy(o)}
                for k, o in cluster.objects.items()
                if wanted(k, o)
            ]
        seen = len(history.events)
    try:
        while True:
            for event in pending:
                send_chunk(request, json.dumps(event).encode() + b"\n")
            with history.changed:
                history.changed.wait_for(
                    lambda seen=seen: (
                        len(history.events) > seen
                        or history.drops != drops
                        or history.closed
                        or time.monotonic() >= deadline
                    ),
                    timeout=max(0.0, deadline - time.monotonic()),
                )
                if history.drops != drops or history.closed or time.monotonic() >= deadline:
                    break
                fresh = history.events[seen:]
                seen = len(history.events)
            pending = [{"type": k, "object": o} for key, k, o in fresh if wanted(key, o)]
        send_chunk(request, b"")
    except OSError:
        pass  # the client went away


def refuse(request: BaseHTTPRequestHandler) -> None:
    data = json.dumps(status(503, "ServiceUnavailable", "not now")[1]).encode()
    request.send_response(503)
    request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(data)))
    request.end_headers()
    request.wfile.write(data)


def open_stream(request: BaseHTTPRequestHandler) -> None:
    request.protocol_version = "HTTP/1.1"  # chunked needs it; this connection closes after
    request.send_response(200)
    request.send_header("Content-Type", "application/json")
    request.send_header("Transfer-Encoding", "chunked")
    request.send_header("Connection", "close")
    request.end_headers()
    request.close_connection = True


def send_chunk(request: BaseHTTPRequestHandler, data: bytes) -> None:
    request.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    request.wfile.flush()


@contextmanager
def serve() -> Iterator[tuple[Cluster, str]]:
    """A fake cluster and its URL, for as long as the block runs."""
    cluster = Cluster()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(cluster))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield cluster, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        cluster.history.close()
        server.shutdown()
        server.server_close()
        thread.join()
    if cluster.unmodelled:
        raise AssertionError(f"asked what the fake API server does not model: {cluster.unmodelled}")


def kubeconfig(url: str, folder: Path) -> Path:
    path = folder / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "fake", "user": {"token": "fake"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            }
        )
    )
    return path
