"""A one-replica StatefulSet: the sandbox pod where a ComputePlane has no agent-sandbox.

The pod is the same hardened pod a Sandbox runs, with the same workspace claim mounted; the
claim is composed beside it rather than templated, so it outlives the StatefulSet and can grow.
Suspending scales to zero: the pod goes, the claim stays.
"""

from collections.abc import Mapping
from typing import Any

from function.compose.names import SERVICE_KEY, identity_labels, labels, pod_labels, sandbox_name
from function.compose.observed import dig
from function.compose.pod import pod_spec
from function.compose.sizing import Size
from function.model import Manifest
from function.model.platform import Image, Preset, SandboxPlatform
from function.model.spec import WorkspaceSandbox

KEY = "statefulset"
REPLICAS = {"Running": 1, "Suspended": 0}


def statefulset(
    ws: WorkspaceSandbox, preset: Preset, platform: SandboxPlatform, image: Image, size: Size
) -> dict[str, Manifest]:
    return {
        KEY: {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": sandbox_name(ws, KEY), "labels": labels(ws)},
            "spec": {
                "replicas": REPLICAS[ws.spec.power],
                "serviceName": sandbox_name(ws, SERVICE_KEY),
                "selector": {"matchLabels": identity_labels(ws)},
                "template": {
                    "metadata": {"labels": pod_labels(ws)},
                    "spec": pod_spec(ws, preset, platform, image, size),
                },
            },
        }
    }


def stopped(observed: Mapping[str, Any]) -> bool:
    """Scaled to zero and observed with no pod left."""
    return dig(observed, "spec", "replicas") == 0 and not dig(observed, "status", "replicas")


def ready(observed: Mapping[str, Any] | None) -> bool:
    return bool(dig(observed, "status", "readyReplicas") == 1)
