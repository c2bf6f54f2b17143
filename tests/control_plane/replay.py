"""The admission evaluator's cases (tests/deploy/admission.py), asked of the real API server.

Every verdict the project's own tests reach with the evaluator is recorded (one JSON line each,
`RECORD`), then sent to a real API server as the request it stands for: the same user (by
impersonation), operation, object, stored old object and namespace labels, with `dryRun=All` so
nothing is kept. One shipped policy at a time is bound, so the server's first refusal is that
policy's; its answer is compared with the evaluator's:

- the evaluator admits (no failing validation, "unmatched" or "exempt"): the server admits;
- the evaluator refuses with messages: the server refuses with the first of them.

A case is set up (its namespace with its labels, the stored old object) in rounds where no two
cases need different states of one object, each object once a round, by a user of its own
(`SETUP_USER`) whom the policy, as created here, does not match: the shipped policy with one
match condition more, which no case's user meets. So the policy stays bound through all its
rounds, and the server is waited for twice a policy (bound, then unbound), not twice a round. A case the server cannot
replay (a kind no CRD here serves, a CONNECT, a request the schema refuses before admission) is
reported as such, never counted as agreement.
"""

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.control_plane.server import ControlPlane
from tests.deploy.admission import RECORD
from tests.deploy.install import documents
from tests.support import ROOT

RECORDED_SUITES = ("tests/deploy", "tests/policy")
EFFECTIVE_SECONDS = 20.0
"""An object deleted or created to the server holding it so."""
BOUND_SECONDS = 5.0
"""A binding created to the API server's admission acting on it: milliseconds on loopback; a
probe still admitted after this is a disagreement, which the comparison reports."""
REPLAY_USERS_ROLE = "test-replay-everything"
SETUP_USER = "test-replay-setup"
"""Who sets cases up: no case acts as this user, and no policy matches it here."""


def record(folder: Path) -> list[dict[str, Any]]:
    """Run the evaluator's tests with recording on; their distinct cases."""
    path = folder / "verdicts.jsonl"
    env = {**os.environ, RECORD: str(path)}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *RECORDED_SUITES]
    run = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert run.returncode == 0, run.stdout[-3000:]
    unique = {line for line in path.read_text().splitlines() if line}
    return [json.loads(line) for line in sorted(unique)]


def path_of(request: Mapping[str, Any], name: str = "", *, sub: str = "") -> str:
    res = request["resource"]
    base = f"/apis/{res['group']}/{res['version']}" if res["group"] else f"/api/{res['version']}"
    if request.get("namespace") and res["resource"] != "namespaces":
        base += f"/namespaces/{request['namespace']}"
    base += f"/{res['resource']}"
    if name:
        base += f"/{name}"
        if sub:
            base += f"/{sub}"
    return base


@dataclass
class Case:
    raw: dict[str, Any]

    @property
    def policy(self) -> str:
        return str(self.raw["policy"])

    @property
    def request(self) -> dict[str, Any]:
        """The request, at the version of the object it carries (the evaluator's requests name
        a version the policies' `apiVersions: ["*"]` never look at)."""
        req: dict[str, Any] = json.loads(json.dumps(self.raw["request"]))
        obj = self.raw.get("object") or self.raw.get("oldObject")
        if obj and "apiVersion" in obj:
            group, _, version = obj["apiVersion"].rpartition("/")
            if group == req["resource"]["group"]:
                req["resource"]["version"] = version
        return req

    @property
    def expected(self) -> str:
        """ "" where the evaluator admits, else the message the server must refuse with."""
        answer = self.raw["verdict"]
        return answer[0] if isinstance(answer, list) and answer else ""

    def namespace(self) -> dict[str, Any] | None:
        """The namespace the request is in, as the case labels it."""
        req = self.request
        ns = req.get("namespace")
        if not ns or req["resource"]["resource"] == "namespaces":
            return None
        labels = dict(self.raw.get("namespaceLabels") or {})
        labels["kubernetes.io/metadata.name"] = ns
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}

    def needs(self) -> dict[str, dict[str, Any] | None]:
        """Object paths and the state each must be in (None: absent) before the request."""
        req = self.request
        out: dict[str, dict[str, Any] | None] = {}
        if ns := self.namespace():
            out[f"/api/v1/namespaces/{ns['metadata']['name']}"] = ns
        # A pod is admitted only with its ServiceAccount there (the ServiceAccount plugin).
        pod = self.raw.get("object") or {}
        account = pod.get("spec", {}).get("serviceAccountName")
        if req["resource"]["resource"] == "pods" and account:
            meta = {"name": account, "namespace": req["namespace"]}
            out[f"/api/v1/namespaces/{req['namespace']}/serviceaccounts/{account}"] = {
                "apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta,
            }  # fmt: skip
        # And with its RuntimeClass (the RuntimeClass plugin); the platform makes them.
        if runtime := pod.get("spec", {}).get("runtimeClassName"):
            out[f"/apis/node.k8s.io/v1/runtimeclasses/{runtime}"] = {
                "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                "metadata": {"name": runtime}, "handler": runtime,
            }  # fmt: skip
        target = path_of(req, req["name"])
        old = self.raw.get("oldObject") if req["operation"] != "CREATE" else None
        if old is not None and is_namespace(target):
            # The server labels every namespace with its name, whatever it is sent.
            old = json.loads(json.dumps(old))
            labels = old["metadata"].setdefault("labels", {})
            labels["kubernetes.io/metadata.name"] = old["metadata"]["name"]
        out[target] = old
        return out


def unreplayable(case: Case, served: set[tuple[str, str, str]]) -> str:
    """Why the server cannot be asked this case, or ""."""
    req = case.request
    res = req["resource"]
    if (res["group"], res["version"], res["resource"]) not in served:
        return f"no {res['resource']}.{res['group'] or 'core'}/{res['version']} served here"
    if req["operation"] == "CONNECT":
        return "a CONNECT needs a running pod"
    sub = req.get("subResource", "")
    if sub not in {"", "status"}:
        return f"the {sub} subresource needs a running pod or a namespace being deleted"
    if req["operation"] in {"CREATE", "UPDATE"} and case.raw.get("object") is None:
        return "no object"
    if req["operation"] != "CREATE" and case.raw.get("oldObject") is None:
        return "no stored object"
    return ""


def rounds(cases: list[Case]) -> Iterator[list[Case]]:
    """Cases grouped so that no two in a group need one object in different states."""
    left = list(cases)
    while left:
        state: dict[str, Any] = {}
        group, rest = [], []
        for case in left:
            needs = case.needs()
            if all(state.get(p, needs[p]) == needs[p] for p in needs):
                state.update(needs)
                group.append(case)
            else:
                rest.append(case)
        yield group
        left = rest


@dataclass
class Replay:
    plane: ControlPlane
    results: list[tuple[Case, str]] = field(default_factory=list)
    """Each case asked, with what the server answered ("" admitted, else its message)."""
    skipped: list[tuple[Case, str]] = field(default_factory=list)

    def report(self) -> str:
        """Every case: its verdicts, or why it was not asked."""
        lines = [
            f"{describe(c)}: evaluator {c.expected!r}, server {got!r}" for c, got in self.results
        ]
        lines += [f"{describe(c)}: not asked: {why}" for c, why in self.skipped]
        return "\n".join(lines) + "\n"

    def call(
        self, method: str, path: str, body: Any = None, **kw: Any
    ) -> tuple[int, dict[str, Any]]:
        return self.plane.request(method, path, body, **kw)

    def setup(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        """A write that sets a case up, as `SETUP_USER`, whom the bound policy passes over."""
        return self.call(method, path, body, user=SETUP_USER)

    def bindings(self, policy: str) -> list[dict[str, Any]]:
        return [
            d
            for d in documents()
            if d["kind"] == "ValidatingAdmissionPolicyBinding" and d["spec"]["policyName"] == policy
        ]

    def bind(self, policy: str, *, on: bool) -> None:
        base = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
        for binding in self.bindings(policy):
            if on:
                status, answer = self.call("POST", base, binding)
                assert status == 201, answer
            else:
                self.call("DELETE", f"{base}/{binding['metadata']['name']}")

    def settle(self, path: str, want: dict[str, Any] | None) -> str:
        """Bring one object to the state a round needs, as the administrator: "" once it is,
        else why the server will not hold it (an object its schema refuses)."""
        deadline = time.monotonic() + EFFECTIVE_SECONDS
        while True:
            status, current = self.call("GET", path)
            if status == 404:
                if want is None:
                    return ""
                created, why = self.create(path, want)
                if created or why:
                    return why
            elif want is not None and same(current, clean(want)):
                return ""
            elif want is not None and is_namespace(path):
                # A namespace is relabelled, not deleted: its deletion waits on its contents.
                current["metadata"]["labels"] = want["metadata"].get("labels", {})
                self.setup("PUT", path, current)
            else:
                if current["metadata"].get("finalizers"):
                    current["metadata"]["finalizers"] = []
                    self.setup("PUT", path, current)
                self.setup("DELETE", path)
            if time.monotonic() > deadline:
                return f"cannot set up {path}: {current.get('message', '')}"
            time.sleep(0.1)

    def create(self, path: str, want: dict[str, Any]) -> tuple[bool, str]:
        """Create an object (and its status): whether it was, and why the server refused it
        for good ("" if it may be tried again: a 409 while an older one is being deleted, a
        429 or a 503). A 500 is for good: this server gives one for an object its storage
        refuses (a RoleBinding whose roleRef names no kind)."""
        status, answer = self.setup("POST", path.rpartition("/")[0], clean(want))
        if status == 201:
            if "status" in want and not is_namespace(path):
                answer["status"] = want["status"]
                self.setup("PUT", f"{path}/status", answer)
            return True, ""
        named = want.get("metadata", {}).get("name")
        if named != path.rpartition("/")[2]:
            # A case whose stored object is not the one its request names (a namespace request
            # judged by the namespace it is in): no object is ever at that path.
            return False, f"the stored object is {named!r}, which is not at {path}"
        if status not in {409, 429, 503}:
            return False, f"the stored object is refused: {status} {answer.get('message', '')}"
        return False, ""

    def ask(self, case: Case) -> tuple[int, str]:
        """The server's answer to the case's request: its status and refusal message."""
        req = case.request
        user = req["userInfo"]["username"]
        groups = [g for g in req["userInfo"].get("groups", []) if g != "system:authenticated"]
        who = {"user": user, "group": groups[0] if groups else ""}
        name, sub = req["name"], req.get("subResource", "")
        op = req["operation"]
        if op == "CREATE":
            status, answer = self.call(
                "POST", path_of(req), clean(case.raw["object"]), query="dryRun=All", **who
            )
        elif op == "UPDATE":
            _, stored = self.call("GET", path_of(req, name))
            body = clean(case.raw["object"])
            body["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
            status, answer = self.call(
                "PUT", path_of(req, name, sub=sub), body, query="dryRun=All", **who
            )
        else:
            status, answer = self.call("DELETE", path_of(req, name), query="dryRun=All", **who)
        return status, str(answer.get("message", "")) if status >= 400 else ""

    def run(self, cases: list[Case], served: set[tuple[str, str, str]]) -> None:
        users = sorted({c.request["userInfo"]["username"] for c in cases} | {SETUP_USER})
        self.grant(users)
        by_policy: dict[str, list[Case]] = {}
        for case in cases:
            if why := unreplayable(case, served):
                self.skipped.append((case, why))
            else:
                by_policy.setdefault(case.policy, []).append(case)
        for policy, mine in sorted(by_policy.items()):
            self.create_policy(policy)
            self.bind(policy, on=True)
            waited, ready = False, []
            for group in rounds(mine):
                ready = self.set_up(group)
                if not waited:
                    self.effective(ready)
                    waited = True
                self.ask_all(ready)
            # Unbound before the next policy is bound, or the last test is over.
            self.bind(policy, on=False)
            self.effective(ready, bound=False)

    def set_up(self, group: list[Case]) -> list[Case]:
        """Set the round's objects up, each once: the cases whose set-up held."""
        wanted = {path: want for case in group for path, want in case.needs().items()}
        why = {path: self.settle(path, want) for path, want in wanted.items()}
        ready = []
        for case in group:
            failed = next((why[p] for p in case.needs() if why[p]), "")
            if failed:
                self.skipped.append((case, failed))
            else:
                ready.append(case)
        return ready

    def ask_all(self, ready: list[Case]) -> None:
        for case in ready:
            status, message = self.ask(case)
            if status >= 400 and "ValidatingAdmissionPolicy '" not in message:
                self.skipped.append((case, f"refused before admission: {status} {message}"))
            else:
                self.results.append((case, refusal(message)))

    def effective(self, group: list[Case], *, bound: bool = True) -> None:
        """Wait until the API server acts on a binding made (`bound`) or deleted: a case of
        `group` (set up) that the evaluator refuses is refused, or admitted again; a second
        where none is."""
        probe = next((c for c in group if c.expected), None)
        if probe is None:
            time.sleep(1.0)
            return
        deadline = time.monotonic() + BOUND_SECONDS
        while ("ValidatingAdmissionPolicy '" in self.ask(probe)[1]) != bound:
            if time.monotonic() > deadline:
                return  # the comparison shows the disagreement
            time.sleep(0.05)

    def create_policy(self, name: str) -> None:
        (policy,) = (
            d
            for d in documents()
            if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == name
        )
        policy = json.loads(json.dumps(policy))
        setup = {
            "name": "test-replay-not-the-setup",
            "expression": f"request.userInfo.username != '{SETUP_USER}'",
        }
        policy["spec"]["matchConditions"] = [*policy["spec"].get("matchConditions", []), setup]
        base = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
        status, answer = self.call("POST", base, policy)
        assert status in {201, 409}, answer

    def grant(self, users: list[str]) -> None:
        """Every user the cases act as may do anything RBAC can grant: the comparison is of
        admission, and RBAC is tested on its own (test_rbac.py)."""
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        role = {
            "metadata": {"name": REPLAY_USERS_ROLE},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
        }
        self.call("POST", f"{rbac}/clusterroles", role)
        subjects = [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in users
        ]
        binding = {
            "metadata": {"name": REPLAY_USERS_ROLE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": REPLAY_USERS_ROLE,
            },
            "subjects": subjects,
        }
        status, answer = self.call("POST", f"{rbac}/clusterrolebindings", binding)
        assert status == 201, answer


def describe(case: Case) -> str:
    req = case.request
    where = f"{req.get('namespace', '')}/{req['name']}"
    sub = f"/{req['subResource']}" if req.get("subResource") else ""
    who = req["userInfo"]["username"]
    return f"{case.policy} {req['operation']} {req['resource']['resource']}{sub} {where} as {who}"


def is_namespace(path: str) -> bool:
    return path.startswith("/api/v1/namespaces/") and path.count("/") == 4


def refusal(message: str) -> str:
    """The validation's own message out of the server's "ValidatingAdmissionPolicy 'p' with
    binding 'b' denied request: <message>"."""
    return message.partition("denied request: ")[2] if "denied request: " in message else message


SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


OWNER_UID = "00000000-0000-4000-8000-000000000001"
"""For owner references the evaluator's objects leave without one: the server requires a UID,
and the policies read the owner's kind and name. No garbage collector runs in the replay."""


def clean(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object as a client sends it: no fields the server sets, owner references whole."""
    body = json.loads(json.dumps(obj))
    meta = body.setdefault("metadata", {})
    for key in SERVER_FIELDS:
        meta.pop(key, None)
    for owner in meta.get("ownerReferences", []):
        owner["uid"] = owner.get("uid") or OWNER_UID
    return dict(body)


def same(stored: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Whether a stored object is the one a case wants: its labels, annotations and spec."""
    keys = ("labels", "annotations", "ownerReferences", "finalizers")
    meta_s, meta_w = stored.get("metadata", {}), want.get("metadata", {})
    return all(meta_s.get(k) == meta_w.get(k) for k in keys if k in meta_w) and stored.get(
        "spec"
    ) == want.get("spec", stored.get("spec"))
