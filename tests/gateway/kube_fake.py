"""An in-process fake of the few Kubernetes API endpoints the gateway uses, on a loopback port.

Secrets and namespaced custom objects: get, list (by namespace or across all, with equality and
existence label selectors), create (409 when the name is taken), merge-patch and delete, each
object with a resourceVersion that every write moves on. Leases: create, get, replace and
merge-patch, a write at a stale resourceVersion answered 409. Anything else answers 404 or 405, so
a call the gateway makes that a real API server would serve differently shows up as a failure.
The real `kubernetes` client talks to it through a kubeconfig written by `kubeconfig`.
"""

import copy
import itertools
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

Key = tuple[str, str, str]  # (resource, namespace, name)
Answer = tuple[int, dict[str, Any]]

NAMESPACED = re.compile(
    r"/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/namespaces/(?P<ns>[^/]+)"
    r"/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?"
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

    def put(self, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        obj.setdefault("metadata", {})["resourceVersion"] = str(next(self.versions))
        self.objects[key] = obj
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


def answer(
    cluster: Cluster, method: str, url: str, body: Callable[[], Any], content_type: str
) -> Answer:
    """The fake API server's one entry: a request in, (status, JSON body) out."""
    path, _, query = url.partition("?")
    selector = (parse_qs(query).get("labelSelector") or [""])[0]
    found = NAMESPACED.fullmatch(path)
    if found is None:
        every = ALL_NAMESPACES.fullmatch(path)
        if every is None or method != "GET":
            return status(404, "NotFound", f"no route {path}")
        items = [o for o in cluster.resource(every["plural"]) if selected(o, selector)]
        return 200, {"kind": "List", "metadata": {}, "items": items}
    plural, ns, name = found["plural"], found["ns"], found["name"]
    if found["group"] == LEASE_GROUP:
        return leases(cluster, method, (plural, ns, name or ""), body, content_type)
    if name is None:
        return collection(cluster, method, (plural, ns, ""), selector, body)
    return item(cluster, method, (plural, ns, name), body, content_type)


def collection(
    cluster: Cluster, method: str, key: Key, selector: str, body: Callable[[], Any]
) -> Answer:
    plural, ns, _ = key
    if method == "GET":
        items = [
            o
            for (r, n, _), o in cluster.objects.items()
            if r == plural and n == ns and selected(o, selector)
        ]
        return 200, {"kind": "List", "metadata": {}, "items": items}
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
    return 201, cluster.put(key, obj)


def item(
    cluster: Cluster, method: str, key: Key, body: Callable[[], Any], content_type: str
) -> Answer:
    current = cluster.objects.get(key)
    if current is None:
        return status(404, "NotFound", f'{key[0]} "{key[2]}" not found')
    if method == "GET":
        return 200, current
    if method == "DELETE":
        return 200, cluster.objects.pop(key)
    if method != "PATCH":
        return status(405, "MethodNotAllowed", method)
    return patched(cluster, key, body, content_type)


def patched(cluster: Cluster, key: Key, body: Callable[[], Any], content_type: str) -> Answer:
    current = cluster.objects[key]
    if content_type != "application/merge-patch+json":
        return status(415, "UnsupportedMediaType", "merge patches only")
    patch = body()
    wanted = (patch.get("metadata") or {}).get("resourceVersion")
    if wanted and wanted != current["metadata"]["resourceVersion"]:
        return status(409, "Conflict", "the object has been modified")
    obj = merge(copy.deepcopy(current), patch)
    refused = too_big(obj)
    if refused:
        return refused
    cluster.written.append(copy.deepcopy(obj))
    return 200, cluster.put(key, obj)


# --- coordination.k8s.io/v1 Leases: create, get, replace (PUT) and merge-patch, by name ---

LEASE_GROUP = "coordination.k8s.io"


def leases(
    cluster: Cluster, method: str, key: Key, body: Callable[[], Any], content_type: str
) -> Answer:
    """A Lease as the API server keeps it: a write at a stale resourceVersion is a 409.

    A replace without a resourceVersion is unconditional, as the API server allows for Leases.
    Listing, watching and deleting are not offered: the gateway's RBAC grants none of them.
    """
    plural, ns, name = key
    if plural != "leases":
        return status(404, "NotFound", f"no resource {plural}")
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
        return status(
            400, "BadRequest", "resourceVersion should not be set on objects to be created"
        )
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
    if wanted and wanted != cluster.objects[key]["metadata"]["resourceVersion"]:
        message = f'Operation cannot be fulfilled on leases.coordination.k8s.io "{key[2]}": the object has been modified'
        return status(409, "Conflict", message)
    metadata["namespace"] = key[1]
    cluster.written.append(copy.deepcopy(obj))
    return 200, cluster.put(key, obj)


# --- end of Leases ---


def handler(cluster: Cluster) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def _serve(self) -> None:
            url = urlsplit(self.path)
            content_type = self.headers.get("Content-Type", "")
            cluster.requests.append((self.command, url.path, content_type))

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
        server.shutdown()
        server.server_close()
        thread.join()


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
