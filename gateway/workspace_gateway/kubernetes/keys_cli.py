"""`workspace-sandbox-gateway keys create|list|revoke`: API keys as Secrets, from a terminal.

Talks to the cluster of the current kubeconfig context (or the pod's own ServiceAccount when
run inside one); whoever runs it needs to create, list and delete Secrets in the gateway's
namespace, which is exactly the right to mint keys.
"""

import argparse
import sys

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from workspace_gateway.errors import GatewayError
from workspace_gateway.kubernetes.cluster import DEFAULT_NAMESPACE, api_client, gateway_namespace
from workspace_gateway.kubernetes.secret_keys import SecretKeys


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="workspace-sandbox-gateway keys",
        description="Create, list and revoke the gateway's API keys (Secrets in its namespace).",
    )
    p.add_argument(
        "--gateway-namespace",
        help="the gateway's namespace, where the keys are kept (default: the pod's own "
        f"namespace in a cluster, else {DEFAULT_NAMESPACE})",
    )
    p.add_argument("--kubeconfig", help="the kubeconfig file (default: KUBECONFIG or ~/.kube)")
    p.add_argument("--context", help="the kubeconfig context (default: the current one)")
    sub = p.add_subparsers(dest="command", required=True)
    create = sub.add_parser("create", help="make a key for one namespace and print it, once")
    create.add_argument("--namespace", required=True, help="the tenant namespace it acts in")
    sub.add_parser("list", help="list keys: ID, namespace, when made (never the keys)")
    revoke = sub.add_parser("revoke", help="revoke a key by its ID")
    revoke.add_argument("key_id", metavar="ID")
    return p


def main(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    try:
        api = api_client(args.kubeconfig, args.context)
    except (ConfigException, OSError) as e:
        sys.exit(f"workspace-sandbox-gateway keys: no cluster to talk to: {e}")
    store = SecretKeys(client.CoreV1Api(api), gateway_namespace(args.gateway_namespace))
    try:
        if args.command == "create":
            key, record = store.create(args.namespace)
            print(f"key ID:    {record.key_id}")  # noqa: T201  # the command's output
            print(f"namespace: {record.namespace}")  # noqa: T201  # the command's output
            print(f"API key:   {key}")  # noqa: T201  # the command's output
            print("The key is shown only now; the cluster keeps its hash.", file=sys.stderr)  # noqa: T201  # the command's output
        elif args.command == "list":
            for r in store.list():
                print(f"{r.key_id}  {r.namespace}  {r.created}")  # noqa: T201  # the command's output
        else:
            store.revoke(args.key_id)
            print(f"revoked {args.key_id}")  # noqa: T201  # the command's output
    except GatewayError as e:
        sys.exit(f"workspace-sandbox-gateway keys: {e.message}")
    except ApiException as e:
        sys.exit(f"workspace-sandbox-gateway keys: the cluster answered {e.status}: {e.reason}")
    finally:
        api.close()
