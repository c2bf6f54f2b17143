"""`tests/gateway/kube_fake.py` answers as the real API server does: the same requests asked of
both, the same answers required.

Each case is a short conversation with the API server over plain REST (creates, merge patches,
deletes, lists, watches) about objects of a CRD of its own with a status subresource, as the
XRD's WorkspaceSandboxes are, but that no controller reconciles here: nothing else writes them
between two requests. A case returns what it heard, in a shape that leaves out what only
differs by design (resourceVersions' values, messages' wording, uids); the fake and the real
server must say the same.
"""

import json
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.control_plane.server import ControlPlane
from tests.gateway import kube_fake

pytestmark = pytest.mark.control_plane

GROUP, VERSION, PLURAL, KIND = "drift.test.cozystack.io", "v1", "probes", "Probe"
MERGE_PATCH = "application/merge-patch+json"
FINALIZER = "test.cozystack.io/hold"
ESTABLISHED_SECONDS = 60
WATCH_SECONDS = 3
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "names": {"plural": PLURAL, "singular": "probe", "kind": KIND, "listKind": "ProbeList"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            }
        ],
    },
}


@dataclass
class Side:
    """One API server, spoken to over REST; `forget` makes it drop its history of changes (the
    fake's compaction; the real server's watch cache never held what came before it)."""

    name: str
    http: httpx.Client
    namespaces: list[str]
    forget: Callable[[], None] = lambda: None
    seen: list[str] = field(default_factory=list)

    def path(self, namespace: int = 0, name: str = "") -> str:
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespaces[namespace]}/{PLURAL}"
        return f"{base}/{name}" if name else base

    def call(
        self, method: str, path: str, body: Any = None, query: str = ""
    ) -> tuple[int, dict[str, Any]]:
        kind = MERGE_PATCH if method == "PATCH" else "application/json"
        content = None if body is None else json.dumps(body).encode()
        answer = self.http.request(
            method,
            f"{path}?{query}" if query else path,
            content=content,
            headers={"Content-Type": kind},
        )
        return answer.status_code, answer.json() if answer.content else {}

    def create(self, name: str, namespace: int = 0, **fields: Any) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, **fields}
        body["metadata"] = {"name": name, **body.get("metadata", {})}
        code, obj = self.call("POST", self.path(namespace), body)
        assert code == 201, obj
        return obj

    def watch(self, query: str, until: Callable[[list[dict[str, Any]]], bool]) -> list[Any]:
        """The events of one watch of the first namespace, until `until` holds of them or the
        server ends it (after WATCH_SECONDS)."""
        events: list[dict[str, Any]] = []
        params = f"watch=1&timeoutSeconds={WATCH_SECONDS}&{query}"
        with self.http.stream("GET", f"{self.path()}?{params}", timeout=WATCH_SECONDS + 10) as s:
            for line in s.iter_lines():
                if line.strip():
                    events.append(json.loads(line))
                if until(events):
                    break
        return events


def shape(obj: dict[str, Any]) -> dict[str, Any]:
    """What a case compares of an object: everything but what differs by design."""
    metadata = obj.get("metadata") or {}
    return {
        "kind": obj.get("kind"),
        "name": metadata.get("name"),
        "generation": metadata.get("generation"),
        "labels": metadata.get("labels"),
        "finalizers": metadata.get("finalizers"),
        "deleting": "deletionTimestamp" in metadata,
        "deletionGracePeriodSeconds": metadata.get("deletionGracePeriodSeconds"),
        "spec": obj.get("spec"),
        "status": obj.get("status"),
    }


def refusal(answer: tuple[int, dict[str, Any]]) -> tuple[int, str | None]:
    return answer[0], answer[1].get("reason")


def version(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


# --- The cases: each asks one side and returns what it heard.


def generation_moves_with_the_spec_only(side: Side) -> list[Any]:
    made = side.create("a", spec={"size": 1}, status={"phase": "Made up"})
    heard: list[Any] = [shape(made)]
    for patch in (
        {"metadata": {"labels": {"app": "x"}}},
        {"spec": {"size": 2}},
        {"status": {"phase": "Running"}},  # not the object's: the status subresource's
        {"spec": {"size": 2}},  # no change at all
    ):
        code, obj = side.call("PATCH", side.path(name="a"), patch)
        heard.append((code, shape(obj), version(obj) != version(made)))
        made = obj
    code, obj = side.call("PATCH", side.path(name="a") + "/status", {"status": {"phase": "Up"}})
    heard.append((code, shape(obj)))
    return heard


def a_stale_resource_version_is_a_conflict(side: Side) -> list[Any]:
    made = side.create("a", spec={"size": 1})
    side.call("PATCH", side.path(name="a"), {"spec": {"size": 2}})
    stale = {"metadata": {"resourceVersion": version(made)}, "spec": {"size": 3}}
    current = side.call("GET", side.path(name="a"))[1]
    fresh = {"metadata": {"resourceVersion": version(current)}, "spec": {"size": 3}}
    return [
        refusal(side.call("PATCH", side.path(name="a"), stale)),
        refusal(side.call("DELETE", side.path(name="a"), precondition(version(made)))),
        side.call("PATCH", side.path(name="a"), fresh)[0],
        refusal(side.call("DELETE", side.path(name="a"), precondition(version(current)))),
        side.call("DELETE", side.path(name="a"), precondition(latest(side)))[0],
        refusal(side.call("GET", side.path(name="a"))),
    ]


def latest(side: Side) -> str:
    return version(side.call("GET", side.path(name="a"))[1])


def precondition(resource_version: str) -> dict[str, Any]:
    return {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "preconditions": {"resourceVersion": resource_version},
    }


def names_are_taken_and_missing_objects_are_404(side: Side) -> list[Any]:
    side.create("a")
    again = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "a"}}
    return [
        refusal(side.call("POST", side.path(), again)),
        refusal(side.call("GET", side.path(name="nobody"))),
        refusal(side.call("PATCH", side.path(name="nobody"), {"spec": {}})),
        refusal(side.call("DELETE", side.path(name="nobody"))),
    ]


def lists_come_in_pages_in_name_order(side: Side) -> list[Any]:
    for name in ("e", "b", "d", "a", "c"):
        side.create(name)
    pages, token = [], ""
    while True:
        query = "limit=2" + (f"&continue={token}" if token else "")
        code, listed = side.call("GET", side.path(), query=query)
        token = listed["metadata"].get("continue", "")
        pages.append((code, [o["metadata"]["name"] for o in listed["items"]], bool(token)))
        if not token:
            return pages


def label_selectors_select(side: Side) -> list[Any]:
    labels = {"a": {"app": "x"}, "b": {"app": "x", "tier": "web"}, "c": {"app": "y"}, "d": {}}
    for name, these in labels.items():
        side.create(name, metadata={"labels": these})
    side.create("e", namespace=1, metadata={"labels": {"app": "x"}})
    heard = []
    for selector in ("app=x", "app", "app=x,tier", "tier=web", "app=z", ""):
        code, listed = side.call("GET", side.path(), query=f"labelSelector={selector}")
        heard.append((selector, code, [o["metadata"]["name"] for o in listed["items"]]))
    everywhere = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
    code, listed = side.call("GET", everywhere, query="labelSelector=app%3Dx")
    mine = [o for o in listed["items"] if o["metadata"]["namespace"] in side.namespaces]
    heard.append(
        (
            code,
            [
                (o["metadata"]["namespace"] == side.namespaces[1], o["metadata"]["name"])
                for o in mine
            ],
        )
    )
    return heard


def a_delete_with_finalizers_leaves_the_object_until_they_are_gone(side: Side) -> list[Any]:
    made = side.create("a", metadata={"finalizers": [FINALIZER]}, spec={"size": 1})
    heard: list[Any] = []
    code, obj = side.call("DELETE", side.path(name="a"))
    heard.append((code, shape(obj)))
    code, obj = side.call("GET", side.path(name="a"))
    heard.append((code, shape(obj)))
    code, again = side.call("DELETE", side.path(name="a"))
    heard.append((code, shape(again), version(again) == version(obj)))
    more = {"metadata": {"finalizers": [FINALIZER, "test.cozystack.io/more"]}}
    heard.append(refusal(side.call("PATCH", side.path(name="a"), more)))
    code, obj = side.call("PATCH", side.path(name="a"), {"spec": {"size": 2}})
    heard.append((code, shape(obj)))
    code, obj = side.call("PATCH", side.path(name="a"), {"metadata": {"finalizers": None}})
    heard.append((code, shape(obj)))
    heard.append(refusal(side.call("GET", side.path(name="a"))))
    events = side.watch(
        f"resourceVersion={version(made)}", lambda seen: seen[-1]["type"] == "DELETED"
    )
    heard.append([(e["type"], shape(e["object"])) for e in events])
    return heard


def a_watch_from_before_the_oldest_version_kept_is_gone(side: Side) -> list[Any]:
    side.create("a")
    side.create("b")
    side.forget()
    events = side.watch("resourceVersion=1", bool)
    return [
        (e["type"], e["object"].get("kind"), e["object"].get("code"), e["object"].get("reason"))
        for e in events
    ]


def a_watch_from_a_version_hears_what_came_after(side: Side) -> list[Any]:
    made = side.create("a", spec={"size": 1})
    side.call("PATCH", side.path(name="a"), {"spec": {"size": 2}})
    side.create("b")
    side.call("DELETE", side.path(name="a"))
    events = side.watch(f"resourceVersion={version(made)}", lambda seen: len(seen) >= 3)
    listed = side.watch("", lambda seen: len(seen) >= 1)  # no version: what is there, as ADDED
    return [[(e["type"], shape(e["object"])) for e in batch] for batch in (events, listed)]


def leases_are_written_only_at_the_version_read(side: Side) -> list[Any]:
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{side.namespaces[0]}/leases"
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "reaper"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }
    code, made = side.call("POST", leases, body)
    heard: list[Any] = [code, refusal(side.call("POST", leases, body))]
    moved = {**body, "metadata": {"name": "reaper", "resourceVersion": version(made)}}
    moved["spec"] = {**body["spec"], "holderIdentity": "b"}
    code, taken = side.call("PUT", f"{leases}/reaper", moved)
    heard += [code, taken["spec"]["holderIdentity"]]
    heard.append(refusal(side.call("PUT", f"{leases}/reaper", moved)))  # at the old version
    anyway = {**body, "spec": {**body["spec"], "holderIdentity": "c"}}  # no version at all
    heard.append(refusal(side.call("PUT", f"{leases}/reaper", anyway)))
    with_version = {**body, "metadata": {"name": "reaper", "resourceVersion": "1"}}
    heard.append(refusal(side.call("POST", leases, with_version)))
    return heard


def secrets_are_listed_by_their_labels(side: Side) -> list[Any]:
    secrets = f"/api/v1/namespaces/{side.namespaces[0]}/secrets"
    for name, labels in (("key-a", {"key": "1"}), ("key-b", {"key": "1"}), ("tls", {})):
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": labels}}
        assert side.call("POST", secrets, {**body, "data": {"x": "eQ=="}})[0] == 201
    code, listed = side.call("GET", secrets, query="labelSelector=key")
    return [code, [o["metadata"]["name"] for o in listed["items"]]]


CASES = [
    generation_moves_with_the_spec_only,
    a_stale_resource_version_is_a_conflict,
    names_are_taken_and_missing_objects_are_404,
    lists_come_in_pages_in_name_order,
    label_selectors_select,
    a_delete_with_finalizers_leaves_the_object_until_they_are_gone,
    a_watch_from_before_the_oldest_version_kept_is_gone,
    a_watch_from_a_version_hears_what_came_after,
    leases_are_written_only_at_the_version_read,
    secrets_are_listed_by_their_labels,
]


@pytest.fixture(scope="module")
def real(plane: ControlPlane) -> Iterator[httpx.Client]:
    context = ssl.create_default_context(cafile=str(plane.ca))
    headers = {"Authorization": f"Bearer {plane.token}", "Accept": "application/json"}
    with httpx.Client(base_url=plane.url, verify=context, headers=headers, timeout=30) as http:
        code, answer = plane.request(
            "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD
        )
        assert code in {201, 409}, answer
        deadline = time.monotonic() + ESTABLISHED_SECONDS
        while http.get(f"/apis/{GROUP}/{VERSION}/{PLURAL}").status_code != 200:
            assert time.monotonic() < deadline, "the CRD was not served"
            time.sleep(0.2)
        yield http


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__.replace("_", "-"))
def test_the_fake_answers_as_the_real_api_server(
    case: Callable[[Side], list[Any]], plane: ControlPlane, real: httpx.Client
) -> None:
    slug = case.__name__.replace("_", "-")[:50].rstrip("-")
    namespaces = [f"drift-{slug}"[:63], f"drift2-{slug}"[:63]]
    for namespace in namespaces:
        code, answer = plane.request(
            "POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}
        )
        assert code == 201, answer
    heard_real = case(Side("real", real, namespaces))
    with kube_fake.serve() as (cluster, url), httpx.Client(base_url=url, timeout=30) as http:
        heard_fake = case(Side("fake", http, namespaces, forget=cluster.history.compact))
    for step, (fake, real_) in enumerate(zip(heard_fake, heard_real, strict=True)):
        assert fake == real_, f"step {step}:\nthe fake: {fake}\nthe real: {real_}"
