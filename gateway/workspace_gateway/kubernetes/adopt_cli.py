"""`workspace-sandbox-gateway adopt`: mark the sandboxes a gateway made before marks existed.

The gateway shows, reaps and routes to only the WorkspaceSandboxes that carry its mark (see
`objects.mark`), so that a tenant's look-alike is never taken for another's sandbox.
Those made by an earlier release carry none, and after the upgrade they are neither shown nor
reaped, their disks kept. This lists them and, with `--yes`, marks them: run it once, right
after upgrading and before tenants could have made look-alikes of a release that ignores them,
and read the list first. Whoever runs it needs the token seed and `patch` on
`workspacesandboxes`; it writes nothing but the mark.
"""

import argparse
import sys
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from workspace_gateway.kubernetes.calls import MERGE_PATCH
from workspace_gateway.kubernetes.cluster import api_client, seed
from workspace_gateway.kubernetes.objects import (
    GROUP,
    ID_LABEL,
    MARK,
    PLURAL,
    VERSION,
    mark,
    ours,
)
from workspace_gateway.sandbox_ids import is_id

PAGE = 500


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="workspace-sandbox-gateway adopt",
        description="List, and with --yes mark, the sandboxes an earlier gateway made.",
    )
    p.add_argument("--token-seed-file", type=Path, required=True, help="the gateway's seed")
    p.add_argument("--namespace", help="only this tenant namespace (default: every one)")
    p.add_argument("--yes", action="store_true", help="mark them (default: only list them)")
    p.add_argument("--kubeconfig", help="the kubeconfig file (default: KUBECONFIG or ~/.kube)")
    p.add_argument("--context", help="the kubeconfig context (default: the current one)")
    return p


def unmarked(custom: Any, secret: bytes, namespace: str | None) -> list[dict[str, Any]]:
    """The objects with the gateway's ID label, a sandbox ID for a name, and no valid mark."""
    found: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        options: dict[str, Any] = {"label_selector": ID_LABEL, "limit": PAGE}
        if token:
            options["_continue"] = token
        if namespace:
            listed = custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, **options
            )
        else:
            listed = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **options)
        for obj in listed.get("items") or []:
            metadata = obj.get("metadata") or {}
            name = str(metadata.get("name") or "")
            labelled = (metadata.get("labels") or {}).get(ID_LABEL) == name
            if labelled and is_id(name) and not ours(obj, secret):
                found.append(obj)
        token = (listed.get("metadata") or {}).get("continue")
        if not token:
            return found


def main(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    try:
        secret = seed(args.token_seed_file)
        api = api_client(args.kubeconfig, args.context)
    except (ConfigException, OSError) as e:
        sys.exit(f"workspace-sandbox-gateway adopt: {e}")
    custom = client.CustomObjectsApi(api)
    try:
        for obj in unmarked(custom, secret, args.namespace):
            metadata = obj["metadata"]
            namespace, name = metadata["namespace"], metadata["name"]
            made = metadata.get("creationTimestamp", "")
            if args.yes:
                patch = {
                    "metadata": {
                        "resourceVersion": metadata["resourceVersion"],
                        "annotations": {MARK: mark(secret, namespace, name)},
                    }
                }
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name, patch, _content_type=MERGE_PATCH
                )
            print(f"{'marked' if args.yes else 'unmarked'}  {namespace}/{name}  {made}")  # noqa: T201  # the command's output
    except ApiException as e:
        sys.exit(f"workspace-sandbox-gateway adopt: the cluster answered {e.status}: {e.reason}")
    finally:
        api.close()
