"""The agent-sandbox `Sandbox`: a Kata or gVisor pod hardened past Pod Security "restricted".

The pod is the hardened pod (`pod.py`). Its workspace is a PVC composed beside it (kept while
the Sandbox is suspended, and able to grow); an older Sandbox keeps the claim templates it was
made with.
"""

from typing import Any

from function.compose.names import CLAIM_TEMPLATE, labels, pod_labels, sandbox_name
from function.compose.observed import dig
from function.compose.pod import pod_spec
from function.compose.sizing import Size
from function.model import Manifest, Observed
from function.model.platform import Image, Preset, SandboxPlatform
from function.model.spec import WorkspaceSandbox

KEY = "sandbox"
OPERATING_MODE = {"Running": "Running", "Suspended": "Suspended"}


def sandbox(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform, image: Image, size: Size
) -> dict[str, Manifest]:
    return {
        KEY: {
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "metadata": {"name": sandbox_name(ws, KEY), "labels": labels(ws)},
            "spec": {
                "operatingMode": OPERATING_MODE[ws.spec.power],
                # Our own ClusterIP Service has the sandbox's name; the controller's headless
                # one would clash with it.
                "service": False,
                "podTemplate": {
                    "metadata": {"labels": pod_labels(ws)},
                    "spec": pod_spec(ws, preset, platform, image, size),
                },
            },
        }
    }


def observed_claims(observed: Observed) -> list[Any]:
    """An existing Sandbox's claim templates, the workspace first; [] if there are none."""
    claims = dig(observed.get(KEY), "spec", "volumeClaimTemplates")
    return claims if isinstance(claims, list) else []


def keep_claim_templates(resources: dict[str, Manifest], observed: Observed) -> dict[str, Manifest]:
    """Keep an older Sandbox's claim templates: they are immutable, and hold the workspace.

    Such a Sandbox's workspace is the templated claim, which the controller mounts by the
    template's name; the pod then has no workspace volume of its own.
    """
    claims = observed_claims(observed)
    if not claims or KEY not in resources:
        return resources
    manifest = resources[KEY]
    template = manifest["spec"]["podTemplate"]
    volumes = [v for v in template["spec"]["volumes"] if v["name"] != CLAIM_TEMPLATE]
    spec = {
        **manifest["spec"],
        "podTemplate": {**template, "spec": {**template["spec"], "volumes": volumes}},
        "volumeClaimTemplates": claims,
    }
    return {**resources, KEY: {**manifest, "spec": spec}}
