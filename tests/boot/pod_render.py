"""The pods the function renders, found where its objects carry them.

A Namespace preset's pod is the agent-sandbox `Sandbox`'s `spec.podTemplate`; a plane's is the
one-replica StatefulSet's `spec.template`, carried inside a provider-kubernetes Object. Each
comes with the hostname its pod gets: the Sandbox's name (the controller names its pod after
it), or the StatefulSet's first ordinal.
"""

from typing import Any

from function.compose.names import resolve
from function.model import Manifest, parse
from function.model.platform import SandboxPlatform
from function.model.spec import WorkspaceSandbox
from function.render import Rendered, render
from tests.plane import provider
from tests.support import NOW, PLATFORM, owned

POD_PRESETS = sorted(n for n, p in PLATFORM.presets.items() if p.runtime != "kubevirt")


def pods(out: Rendered) -> list[tuple[str, Manifest]]:
    """(hostname, pod spec) of every pod rendered, in the namespace or carried by an Object."""
    found = []
    for manifest in out.resources.values():
        carried = (
            manifest["spec"]["forProvider"]["manifest"]
            if manifest["kind"] == "Object"
            else manifest
        )
        name = carried["metadata"]["name"]
        if carried["kind"] == "Sandbox":
            found.append((name, provider.pod_spec(carried)))
        elif carried["kind"] == "StatefulSet":
            found.append((f"{name}-0", provider.pod_spec(carried)))
    return found


def pod_of(xr: dict[str, Any], platform: SandboxPlatform) -> tuple[str, Manifest]:
    """The pod of a WorkspaceSandbox (as the gateway wrote it) in a Namespace preset."""
    meta = {k: xr["metadata"][k] for k in ("name", "namespace")}
    ws = resolve(parse(WorkspaceSandbox, {"metadata": meta, "spec": xr["spec"]}, ""), {})
    preset = platform.presets[ws.spec.preset or platform.default_preset]
    if preset.placement != "Namespace":
        raise ValueError(f"preset {ws.spec.preset!r}: the pod tier runs Namespace presets")
    (pod,) = pods(render(ws, platform, owned(None, meta["name"]), NOW))
    return pod
