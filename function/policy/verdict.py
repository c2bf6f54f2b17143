"""Would Cilium let this flow through? A verdict evaluator over policy manifests.

The semantics follow Cilium 1.19's documentation (docs.cilium.io: Policy Language, Layer 3,
Layer 4, Deny Policies, Using Kubernetes Constructs) and the CRD field documentation in
`schemas/upstream/cilium`, with the Kubernetes NetworkPolicy reference for NetworkPolicies:

* A connection is allowed only if the source's egress allows it and the destination's ingress
  allows it. Pods have both sides; nodes, host-network pods and `world` have no endpoint
  policy here (Cilium's host firewall is not modelled). Replies are not modelled.
* A Service VIP is translated to its backends before policy applies; a DNS name is resolved
  through `Environment.dns`. Several candidate addresses: allowed if any is allowed.
* Deny wins: a matching `egressDeny`/`ingressDeny` rule of any policy selecting the endpoint
  denies, whatever allows. Otherwise, if any selecting policy puts the endpoint in default deny
  for the direction (it has rules there, unless `enableDefaultDeny.<direction>` is false), some
  allow rule must match; if none does, everything is allowed.
* Inside a rule, peer fields are ORed and combined with `toPorts` by AND. A rule with no peer
  field has no L3 constraint: `{toPorts: ...}` allows those ports to anyone, and an empty rule
  `{}` allows everything (Cilium's rule parser turns absent peers into an empty selector list,
  "empty L3 = match everything"). An empty list (`toEndpoints: []`, `toEntities: []`,
  `toCIDR: []`, `toCIDRSet: []`) selects nothing.
* Endpoint selectors match pods only, as long as Cilium adds its implicit local-cluster term to
  every selector (`policy-default-local-cluster`, `Environment.policy_default_local_cluster`,
  on by default in Helm from 1.19). Without it (before 1.19, or turned off), a selector is
  matched against every identity's labels: one that only says what a peer lacks (`NotIn`,
  `DoesNotExist`) also selects reserved identities (`host`, `remote-node`, `world`,
  `kube-apiserver`), which carry none of a pod's labels. In a CiliumNetworkPolicy a peer
  selector that does not constrain `io.kubernetes.pod.namespace` is confined to the policy's
  namespace (so namespace-label selectors there only match that namespace's pods, as the docs
  warn, and never a reserved identity).
* CIDR rules, `ipBlock` (in cilium mode) and `toFQDNs` match `world` only: never a pod, a node
  or an apiserver address, even one inside the CIDR. An address Cilium has no identity for is
  `world`, even inside the pod or service CIDR.
* `toFQDNs` matches an address only if a name resolving to it matches and the source's lookup
  of that name passes the DNS proxy: some egress rule with `rules.dns` on port 53 matches the
  name (towards `Flow.dns_resolver`, when given, and that lookup flow must itself be allowed).
  `matchPattern`: `*` is zero or more DNS characters without dots (`*.pypi.org` does not match
  `pypi.org` nor `a.b.pypi.org`), `*` alone matches every name, and a leading `**.` matches one
  or more labels (new in 1.19).
* DNS queries (`Flow.dns_name`) are refused when every allow rule matching them carries
  `rules.dns` and none of its selectors matches the name. A matching rule without L7 rules
  lets any name through; this is more permissive than a datapath that still redirects the port
  to the proxy, so a proof of refusal here is not weakened by it.
* Ingress from the pod's own node is always allowed unless denied (Cilium's default
  allow-localhost; Kubernetes NetworkPolicy cannot block it either).
* Protocols: `toPorts` entries match TCP, UDP and SCTP (`ANY` is all three), never ICMP. ICMP
  matches a rule without L4 constraint, or one whose `icmps` list the flow's type
  (`Flow.icmp_type`) in the flow's family; a flow without a type stands for a type no rule
  names, so it matches only a rule that lists every type (0 to 255) of its family.

Rejected with `NotModelledError`, so that no proof silently rests on a guess: `toServices`,
`toGroups`, `toNodes`/`fromNodes`, `toRequires`/`fromRequires`, `authentication`, CIDR groups,
named ports, ICMP type names, unknown entities and selector operators. Not evaluated: L7 rules
other than DNS (an HTTP rule counts as allowing the connection), Service port names, ICMP codes,
IP protocols other than TCP, UDP, SCTP and ICMP, replies.
Policies with a `nodeSelector` (host policies) are skipped.
"""

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from ipaddress import ip_address, ip_network
from typing import Any, Final, Literal

from function.compose.cilium_policy import CCNP, CNP
from function.model.address import ip_text
from function.policy.environment import (
    NAMESPACE_LABEL,
    Address,
    Environment,
    Identity,
    Node,
    Workload,
)
from function.policy.selector import NotModelledError, selector_keys, selects, show

IpProtocol = Literal["TCP", "UDP", "ICMP", "SCTP"]
Enforcement = Literal["cilium", "kubernetes"]
Direction = Literal["egress", "ingress"]
Policy = Mapping[str, Any]

# Some public address of each IP version, standing for `world`.
_WORLD: Final = {4: "93.184.216.34", 6: "2606:2800:21f:cb07:6820:80da:af6b:8b2c"}
_ENTITIES: Final = frozenset(
    {"all", "world", "world-ipv4", "world-ipv6", "cluster", "host", "remote-node"}
    | {"kube-apiserver", "health", "init", "ingress", "unmanaged", "none"}
)
_PEER_KEYS: Final[Mapping[Direction, tuple[str, ...]]] = {
    "egress": ("toEndpoints", "toEntities", "toCIDR", "toCIDRSet", "toFQDNs"),
    "ingress": ("fromEndpoints", "fromEntities", "fromCIDR", "fromCIDRSet"),
}
_NOT_MODELLED: Final = frozenset(
    {"toServices", "toGroups", "toNodes", "toRequires", "fromNodes", "fromGroups"}
    | {"fromRequires", "authentication"}
)
_DNS_CHARS: Final = "[-a-z0-9_]"


@dataclass(frozen=True)
class Flow:
    """A connection attempt.

    `source` and `destination` are a workload (`name` or `namespace/name`), an IP address (a
    Service VIP is translated to its backends), a name in `Environment.dns`, or `world` (some
    public address). `port=None` is a port no port-specific rule names. `dns_name` makes the
    flow a DNS query for that name (send it to a resolver on port 53). `dns_resolver` is where
    the source sends its lookups, for `toFQDNs`; None accepts any rule that inspects port 53.
    `icmp_type` is the type of an ICMP flow; None is a type no ICMP rule names.
    """

    source: str
    destination: str
    port: int | None = None
    protocol: IpProtocol = "TCP"
    dns_name: str | None = None
    dns_resolver: str | None = None
    icmp_type: int | None = None


@dataclass(frozen=True)
class Verdict:
    """The outcome, the rule that decided it (if a rule did) and the side that decided."""

    allowed: bool
    reason: str
    policy: str | None = None
    rule: str | None = None
    side: str | None = None


# --------------------------------------------------------------------------- compiled policies


@dataclass(frozen=True)
class _Rule:
    path: str
    body: Mapping[str, Any]
    deny: bool


@dataclass(frozen=True)
class _Spec:
    """One rule set: a CNP/CCNP spec (a CNP may have several) or a NetworkPolicy."""

    policy: str
    flavour: Literal["cilium", "kubernetes"]
    namespace: str | None
    selector: Mapping[str, Any]
    default_deny: Mapping[Direction, bool]
    rules: Mapping[Direction, tuple[_Rule, ...]]


def _cilium_spec(policy: str, namespace: str | None, prefix: str, spec: Policy) -> _Spec | None:
    if spec.get("endpointSelector") is None:
        return None  # a host policy (nodeSelector): Cilium's host firewall is not modelled
    toggles = spec.get("enableDefaultDeny") or {}
    default_deny: dict[Direction, bool] = {}
    rules: dict[Direction, tuple[_Rule, ...]] = {}
    for direction in ("egress", "ingress"):
        allow, deny = spec.get(direction) or [], spec.get(f"{direction}Deny") or []
        explicit = toggles.get(direction)
        default_deny[direction] = bool(allow or deny) if explicit is None else bool(explicit)
        rules[direction] = (
            *(_Rule(f"{prefix}{direction}Deny[{i}]", r, deny=True) for i, r in enumerate(deny)),
            *(_Rule(f"{prefix}{direction}[{i}]", r, deny=False) for i, r in enumerate(allow)),
        )
    return _Spec(policy, "cilium", namespace, spec["endpointSelector"], default_deny, rules)


def _kubernetes_spec(policy: str, namespace: str, spec: Policy) -> _Spec:
    types = spec.get("policyTypes")
    if types is None:  # the API server's default
        types = ["Ingress", *(["Egress"] if spec.get("egress") else [])]
    default_deny: dict[Direction, bool] = {}
    rules: dict[Direction, tuple[_Rule, ...]] = {}
    for direction in ("egress", "ingress"):
        on = direction.capitalize() in types
        default_deny[direction] = on
        body = (spec.get(direction) or []) if on else []
        rules[direction] = tuple(
            _Rule(f"{direction}[{i}]", r, deny=False) for i, r in enumerate(body)
        )
    selector = spec.get("podSelector") or {}
    return _Spec(policy, "kubernetes", namespace, selector, default_deny, rules)


def _compile(
    policies: Sequence[Policy], enforcement: Enforcement, default_namespace: str | None
) -> tuple[_Spec, ...]:
    specs: list[_Spec] = []
    for manifest in policies:
        kind, metadata = manifest.get("kind"), manifest.get("metadata") or {}
        if kind not in (CNP, CCNP, "NetworkPolicy"):
            continue  # not a policy: callers may pass every rendered object
        if enforcement == "kubernetes" and kind != "NetworkPolicy":
            continue
        name = metadata.get("name", "<unnamed>")
        namespace = None
        if kind != CCNP:
            namespace = metadata.get("namespace") or default_namespace
            if namespace is None:
                raise ValueError(f"{kind} {name} has no metadata.namespace; pass namespace=")
        label = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
        if kind == "NetworkPolicy":
            specs.append(_kubernetes_spec(label, str(namespace), manifest.get("spec") or {}))
            continue
        bodies = [("", manifest["spec"])] if manifest.get("spec") else []
        bodies += [(f"specs[{i}].", s) for i, s in enumerate(manifest.get("specs") or [])]
        specs += [s for p, b in bodies if (s := _cilium_spec(label, namespace, p, b)) is not None]
    return tuple(specs)


# --------------------------------------------------------------------------- selectors


def _subject_of(spec: _Spec, pod: Workload, env: Environment) -> bool:
    if spec.namespace is not None and pod.namespace != spec.namespace:
        return False
    labels = pod.labels if spec.flavour == "kubernetes" else env.endpoint_labels(pod)
    return selects(spec.selector, labels)


# --------------------------------------------------------------------------- rule matching


@dataclass(frozen=True)
class _Context:
    env: Environment
    specs: tuple[_Spec, ...]
    enforcement: Enforcement
    flow: Flow
    fqdn: bool = True  # off while evaluating the lookup that a toFQDNs match depends on


@dataclass(frozen=True)
class _At:
    """A rule being matched: its policy, the peer, and the node of the endpoint it guards."""

    spec: _Spec
    rule: _Rule
    peer: Identity
    here: str
    ctx: _Context

    def where(self) -> str:
        return f"{self.spec.policy} {self.rule.path}"


def _cidr_match(cidr: str, excepts: Iterable[str], ip: Address) -> bool:
    if ip not in ip_network(cidr, strict=False):
        return False
    return not any(ip in ip_network(e, strict=False) for e in excepts)


def _reserved_labels(at: _At) -> dict[str, str]:
    # `all` and `cluster` are groups of identities, not labels any identity carries.
    groups = {"all", "cluster"}
    return {f"reserved:{e}": "" for e in at.peer.entities(at.here) if e not in groups}


def _endpoint_peer(sel: Mapping[str, Any], at: _At) -> bool:
    keys = selector_keys(sel)
    if any(k.startswith("reserved:") for k in keys):
        # Entities are selectors on reserved labels; honour them where written directly.
        return selects(sel, {f"reserved:{e}": "" for e in at.peer.entities(at.here)})
    scoped = at.spec.namespace is not None and NAMESPACE_LABEL not in keys
    pod = at.peer.pod
    if pod is None:
        # The local-cluster term, or the namespace Cilium adds to a namespaced policy's
        # selector, is a label no reserved identity has. Without either, the selector is
        # matched against the reserved identity's own labels.
        if scoped or at.ctx.env.policy_default_local_cluster:
            return False
        return selects(sel, _reserved_labels(at))
    if scoped and pod.namespace != at.spec.namespace:
        return False
    return selects(sel, at.ctx.env.endpoint_labels(pod))


def _dns_match(selector: Mapping[str, str], name: str) -> bool:
    name = name.lower().rstrip(".")
    if "matchName" in selector:
        return str(selector["matchName"]).lower().rstrip(".") == name
    pattern = str(selector.get("matchPattern", "")).strip().lower().rstrip(".")
    if pattern == "*":
        return True
    lead = ""
    if pattern.startswith("**."):
        lead, pattern = f"(?:{_DNS_CHARS}+\\.)+", pattern[3:]
    body = "".join(f"{_DNS_CHARS}*" if c == "*" else re.escape(c) for c in pattern)
    return re.fullmatch(lead + body, name) is not None


def _fqdn_peer(sel: Mapping[str, str], at: _At) -> str | None:
    if not at.peer.world or not at.ctx.fqdn:
        return None
    for name in at.ctx.env.names_for(at.peer.ip):
        seen = _lookup_seen(name, at.ctx) if _dns_match(sel, name) else None
        if seen is not None:
            shown = " ".join(f"{k} {v}" for k, v in sel.items())
            return f"{shown}; {name} resolves to it and its lookup {seen}"
    return None


def _cidr_set(item: Mapping[str, Any], at: _At) -> tuple[str, list[str]]:
    if "cidr" not in item:
        raise NotModelledError(f"{at.where()}: CIDR groups")
    return item["cidr"], list(item.get("except") or [])


def _item_match(key: str, item: Any, at: _At) -> bool:
    """Whether one entry of peer field `key` selects the peer."""
    if key.endswith("Endpoints"):
        return _endpoint_peer(item, at)
    if key.endswith("Entities"):
        if item not in _ENTITIES:
            raise NotModelledError(f"{at.where()}: entity {item!r}")
        return item in at.peer.entities(at.here)
    if not at.peer.world:
        return False  # CIDR rules never select pods, nodes or the apiserver
    cidr, excepts = (item, []) if key.endswith("CIDR") else _cidr_set(item, at)
    return _cidr_match(cidr, excepts, at.peer.ip)


def _show_item(key: str, item: Any) -> str:
    if key.endswith("Endpoints"):
        return show(item)
    if key.endswith("CIDRSet"):
        excepts = item.get("except") or []
        return f"{item['cidr']}" + (f" except {', '.join(excepts)}" if excepts else "")
    return str(item)


def _l3(at: _At, direction: Direction) -> str | None:
    """Which peer field of the rule selects the peer, or None; 'any peer' if it has none."""
    body = at.rule.body
    present = [k for k in _PEER_KEYS[direction] if body.get(k) is not None]
    if not present:
        return "any peer"
    for key in present:
        if key == "toFQDNs":
            if not body[key]:
                return "any peer (an empty toFQDNs list is no constraint to Cilium)"
            found = (_fqdn_peer(s, at) for s in body[key])
            how = next((f for f in found if f is not None), None)
            if how is not None:
                return f"toFQDNs {how}"
            continue
        item = next((i for i in body[key] if _item_match(key, i, at)), None)
        if item is not None:
            return f"{key} {_show_item(key, item)}"
    return None


def _port_number(value: object, at: _At) -> int:
    text = str(value if value is not None else 0)
    if not text.isdigit():
        raise NotModelledError(f"{at.where()}: named port {text!r}")
    return int(text)


def _port_match(entry: Mapping[str, Any], at: _At, *, default: str) -> bool:
    flow = at.ctx.flow
    protocol = entry.get("protocol") or default
    if flow.protocol == "ICMP" or protocol not in ("ANY", flow.protocol):
        return False
    port = _port_number(entry.get("port"), at)
    if port == 0:
        return True  # no port, or port 0: every port of the protocol
    end = int(entry.get("endPort") or port)
    return flow.port is not None and port <= flow.port <= end


_ICMP_TYPES: Final = frozenset(range(256))


def _icmp_type(value: object, at: _At) -> int:
    text = str(value)
    if not text.isdigit():
        raise NotModelledError(f"{at.where()}: ICMP type name {text!r}")
    return int(text)


def _icmp_match(icmps: Sequence[Mapping[str, Any]], at: _At) -> bool:
    family = f"IPv{at.peer.ip.version}"
    types = {
        _icmp_type(f.get("type"), at)
        for rule in icmps
        for f in rule.get("fields") or []
        if f.get("family", "IPv4") == family
    }
    wanted = at.ctx.flow.icmp_type
    return types >= _ICMP_TYPES if wanted is None else wanted in types


def _l4(at: _At) -> list[Mapping[str, Any]] | None:
    """The toPorts entries the flow matches ([] = no port constraint), or None."""
    ports, icmps = at.rule.body.get("toPorts"), at.rule.body.get("icmps")
    if not ports and not icmps:
        return []
    if at.ctx.flow.protocol == "ICMP":
        return [{}] if _icmp_match(icmps or [], at) else None
    matched = [
        entry
        for entry in ports or []
        if not entry.get("ports") or any(_port_match(p, at, default="ANY") for p in entry["ports"])
    ]
    return matched or None


def _dns_refusal(entries: list[Mapping[str, Any]], name: str | None) -> str | None:
    """Why the DNS proxy refuses a query for `name` on these port entries, or None."""
    if name is None:
        return None
    groups = [(entry.get("rules") or {}).get("dns") for entry in entries] or [None]
    if any(g is None for g in groups):
        return None  # an entry without DNS rules filters no names
    if any(_dns_match(s, name) for g in groups for s in g or []):
        return None
    return f"the DNS proxy refuses {name}"


@dataclass(frozen=True)
class _Match:
    how: str | None  # how the rule selects the flow; None if it doesn't
    refused: str | None = None  # an allow rule that matched but whose DNS rules refuse the name


def _cilium_match(at: _At, direction: Direction) -> _Match:
    unknown = _NOT_MODELLED & set(at.rule.body)
    if unknown:
        raise NotModelledError(f"{at.where()}: {', '.join(sorted(unknown))}")
    entries = _l4(at)
    how = _l3(at, direction) if entries is not None else None
    if how is None or entries is None:
        return _Match(None)
    refused = None if at.rule.deny else _dns_refusal(entries, at.ctx.flow.dns_name)
    return _Match(None, refused) if refused else _Match(how)


def _np_peer(item: Mapping[str, Any], at: _At) -> str | None:
    peer, spec = at.peer, at.spec
    if "ipBlock" in item:
        block = item["ipBlock"]
        # Cilium turns ipBlock into CIDR rules (world only); a plain CNI matches any non-pod IP.
        eligible = peer.world if at.ctx.enforcement == "cilium" else peer.pod is None
        hit = eligible and _cidr_match(block["cidr"], block.get("except") or [], peer.ip)
        return f"ipBlock {block['cidr']}" if hit else None
    namespaces, pods = item.get("namespaceSelector"), item.get("podSelector")
    if namespaces is None and pods is None:
        raise NotModelledError(f"{spec.policy}: an empty NetworkPolicyPeer")
    matches = peer.pod is not None and (
        (namespaces is None and peer.pod.namespace == spec.namespace)
        or (
            namespaces is not None
            and selects(namespaces, at.ctx.env.namespace_labels_of(peer.pod.namespace))
        )
    )
    if not matches or peer.pod is None or (pods is not None and not selects(pods, peer.pod.labels)):
        return None
    selectors = (("namespaceSelector", namespaces), ("podSelector", pods))
    return " ".join(f"{k} {show(s)}" for k, s in selectors if s is not None)


def _np_match(at: _At, direction: Direction) -> _Match:
    ports = at.rule.body.get("ports") or []
    if ports and not any(_port_match(p, at, default="TCP") for p in ports):
        return _Match(None)
    field = "to" if direction == "egress" else "from"
    peers = at.rule.body.get(field) or []
    if not peers:
        return _Match(f"every {'destination' if direction == 'egress' else 'source'}")
    found = ((i, _np_peer(item, at)) for i, item in enumerate(peers))
    return _Match(next((f"{field}[{i}] {how}" for i, how in found if how is not None), None))


# --------------------------------------------------------------------------- one side


@dataclass(frozen=True)
class _Side:
    allowed: bool
    detail: str
    policy: str | None = None
    rule: str | None = None


@dataclass(frozen=True)
class _Scan:
    """What a subject's rules say about a peer: the first deny, the first allow, DNS refusals."""

    deny: _Side | None
    allow: _Side | None
    refusals: tuple[str, ...]


def _scan(
    subject: Workload, peer: Identity, direction: Direction, specs: Sequence[_Spec], ctx: _Context
) -> _Scan:
    allow: _Side | None = None
    refusals: list[str] = []
    for spec in specs:
        match = _np_match if spec.flavour == "kubernetes" else _cilium_match
        for rule in spec.rules[direction]:
            at = _At(spec, rule, peer, subject.node, ctx)
            found = match(at, direction)
            if found.refused:
                refusals.append(f"{found.refused} ({at.where()})")
            if found.how is None:
                continue
            if rule.deny:
                side = _Side(
                    allowed=False,
                    detail=f"{at.where()} matches {peer} ({found.how})",
                    policy=spec.policy,
                    rule=rule.path,
                )
                return _Scan(side, None, ())
            if allow is None:
                allow = _Side(
                    allowed=True,
                    detail=f"{at.where()} ({found.how})",
                    policy=spec.policy,
                    rule=rule.path,
                )
    return _Scan(None, allow, tuple(refusals))


def _side(subject: Workload, peer: Identity, direction: Direction, ctx: _Context) -> _Side:
    """The verdict of `subject`'s policies on traffic to (egress) or from (ingress) `peer`."""
    selecting = [s for s in ctx.specs if _subject_of(s, subject, ctx.env)]
    scan = _scan(subject, peer, direction, selecting, ctx)
    if scan.deny is not None:
        return scan.deny
    if direction == "ingress" and peer.node is not None and peer.node.name == subject.node:
        return _Side(
            allowed=True, detail=f"ingress to {subject.ref} from its own node is always allowed"
        )
    enabling = [s for s in selecting if s.default_deny[direction]]
    if not enabling:
        verb = "puts" if any(s.rules[direction] for s in selecting) else "selects"
        what = "in default deny " if verb == "puts" else ""
        return _Side(allowed=True, detail=f"no policy {verb} {subject.ref} {what}at {direction}")
    if scan.allow is not None:
        return scan.allow
    detail = (
        f"default deny at {direction} of {subject.ref} (selected by {enabling[0].policy}) "
        f"and no rule allows {peer}"
    )
    return _Side(allowed=False, detail=detail + "".join(f"; {r}" for r in scan.refusals[:1]))


def _lookup_seen(name: str, ctx: _Context) -> str | None:
    """Where the source's lookup of `name` passes the DNS proxy, or None if it never does."""
    source = _source(ctx.flow.source, ctx.env)
    if source.pod is None:
        return None
    resolver = ctx.flow.dns_resolver
    lookup = replace(ctx.flow, destination=resolver or "world", port=53, protocol="UDP")
    sub = replace(ctx, flow=replace(lookup, dns_name=name), fqdn=False)
    targets = (
        _targets(resolver, 53, ctx.env, 4)[0]
        if resolver is not None
        else [_Target(source.peer(4, ctx.env), 53)]
    )
    for spec in ctx.specs:
        if spec.flavour != "cilium" or not _subject_of(spec, source.pod, ctx.env):
            continue
        for rule in (r for r in spec.rules["egress"] if not r.deny):
            for target in targets:
                at = _At(spec, rule, target.peer, source.pod.node, sub)
                groups = [(e.get("rules") or {}).get("dns") or [] for e in _l4(at) or []]
                if not any(_dns_match(s, name) for g in groups for s in g):
                    continue
                if resolver is None:
                    return f"is seen by {at.where()}"
                if _l3(at, "egress") is not None and _evaluate(sub.flow, sub).allowed:
                    return f"to {resolver} is seen by {at.where()}"
    return None


# --------------------------------------------------------------------------- whole flows


@dataclass(frozen=True)
class _Source:
    """Who sends: a pod (with egress policy), a node (host traffic), or an outside address."""

    pod: Workload | None = None
    node: Node | None = None
    ip: Address | None = None

    def peer(self, version: int, env: Environment) -> Identity:
        """The source as the destination's ingress sees it, in the destination's IP family."""
        owned = self.pod.ips if self.pod else self.node.ips if self.node else ()
        if owned:
            ips = [ip_address(i) for i in owned]
            ip = next((i for i in ips if i.version == version), ips[0])
            return Identity(ip, self.pod, self.node, env.is_apiserver(ip))
        ip = self.ip or ip_address(_WORLD[version])
        return Identity(ip, apiserver=env.is_apiserver(ip))


def _literal(text: str) -> Address | None:
    try:
        return ip_address(text)
    except ValueError:
        return None


def _source(ref: str, env: Environment) -> _Source:
    if ref == "world":
        return _Source()
    ip = _literal(ref)
    if ip is None:
        sender = env.workload(ref)
        # A host-network pod's traffic is its node's: no endpoint, no endpoint policy.
        return _Source(node=env.node(sender.node)) if sender.host_network else _Source(sender)
    if env.service_at(ip) is not None:
        raise ValueError(f"{ref} is a Service VIP; it can't send")
    pod, node = env.pod_at(ip), env.node_at(ip)
    return _Source(pod, node, ip if pod is None and node is None else None)


@dataclass(frozen=True)
class _Target:
    peer: Identity
    port: int | None
    note: str = ""


def _addresses(ref: str, env: Environment, version: int) -> tuple[list[Address], str]:
    if ref == "world":
        return [ip_address(_WORLD[version])], ""
    ip = _literal(ref)
    if ip is not None:
        return [ip], ""
    if "." not in ref or env.has_workload(ref):
        return [ip_address(i) for i in env.workload(ref).ips], ""
    resolved = env.resolve(ref)
    if not resolved:
        raise LookupError(f"{ref!r} is not a workload, an address or a name in env.dns")
    return [ip_address(i) for i in resolved], f"{ref} resolves to "


def _targets(
    ref: str, port: int | None, env: Environment, version: int
) -> tuple[list[_Target], Verdict | None]:
    """Where a packet for `ref` ends up: Service VIPs become their backends (policy sees those)."""
    addresses, resolved = _addresses(ref, env, version)
    targets: list[_Target] = []
    dropped: Verdict | None = None
    for address in addresses:
        note = f"{resolved}{ip_text(address)}" if resolved else ""
        if (v4 := env.translated(address)) is not None:
            note = f"{note}{', ' if note else ''}through the site's NAT64 to {v4}"
        service = env.service_at(address)
        if service is None:
            targets.append(_Target(env.identity(address), port, note))
            continue
        backends = env.backends(service, address.version)
        if not backends and dropped is None:
            name = f"{service.namespace}/{service.name}"
            vip = ip_text(address)
            why = f"Service {name} ({vip}) has no backends; it is dropped before any policy"
            dropped = Verdict(allowed=False, reason=f"denied: {why}", side="service")
        target = service.ports.get(port, port) if port is not None else None
        for backend in backends:
            shown = f"{backend}:{target}" if target is not None else backend
            via = f"{note or ip_text(address)} -> {shown}"
            targets.append(_Target(env.identity(ip_address(backend)), target, via))
    return targets, dropped


def _evaluate(flow: Flow, ctx: _Context) -> Verdict:
    source = _source(flow.source, ctx.env)
    targets, dropped = _targets(flow.destination, flow.port, ctx.env, 4)
    verdicts = [_one(source, target, ctx) for target in targets]
    # Any address that lets the connection through is enough for it to happen.
    found = next((v for v in verdicts if v.allowed), verdicts[0] if verdicts else dropped)
    if found is None:
        raise LookupError(f"{flow.destination!r} has no addresses")
    return found


def _one(source: _Source, target: _Target, ctx: _Context) -> Verdict:
    destination = target.peer
    here = replace(ctx, flow=replace(ctx.flow, port=target.port))
    sides: list[tuple[str, _Side]] = []
    if source.pod is not None:
        sides.append(("egress", _side(source.pod, destination, "egress", here)))
    if destination.pod is not None:
        sender = source.peer(destination.ip.version, ctx.env)
        sides.append(("ingress", _side(destination.pod, sender, "ingress", here)))
    suffix = f" [{target.note}]" if target.note else ""
    for side, result in sides:
        if not result.allowed:
            text = f"denied: {result.detail}{suffix}"
            return Verdict(
                allowed=False, reason=text, policy=result.policy, rule=result.rule, side=side
            )
    if not sides:
        detail = f"no endpoint policy applies between {ctx.flow.source} and {destination}"
        return Verdict(allowed=True, reason=f"allowed: {detail}{suffix}")
    decided = next((r for _, r in sides if r.policy is not None), sides[0][1])
    text = "; ".join(r.detail for _, r in sides)
    side = "+".join(s for s, _ in sides)
    reason = f"allowed: {text}{suffix}"
    return Verdict(allowed=True, reason=reason, policy=decided.policy, rule=decided.rule, side=side)


def evaluate(
    flow: Flow,
    policies: Sequence[Mapping[str, Any]],
    env: Environment,
    *,
    enforcement: Enforcement = "cilium",
    namespace: str | None = None,
) -> Verdict:
    """Whether `flow` gets through `policies` in `env`, and which rule decided.

    `enforcement="kubernetes"` models a plain NetworkPolicy CNI: only NetworkPolicies count and
    `ipBlock` matches any address that is not a pod's. `namespace` is the namespace of
    namespaced policies whose metadata has none (composed resources of a namespaced XR).
    Non-policy manifests are ignored.
    """
    specs = _compile(policies, enforcement, namespace)
    return _evaluate(flow, _Context(env, specs, enforcement, flow))


def format_verdict(flow: Flow, verdict: Verdict) -> str:
    """One line for humans: `alice-api -> 10.0.0.5:443/TCP: denied: ...`."""
    port = f":{flow.port}" if flow.port is not None else ""
    query = f" (DNS query for {flow.dns_name})" if flow.dns_name else ""
    return f"{flow.source} -> {flow.destination}{port}/{flow.protocol}{query}: {verdict.reason}"
