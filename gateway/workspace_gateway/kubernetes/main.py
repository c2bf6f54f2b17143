"""`--kubernetes`: the backend and keys over the cluster, from the command line's settings."""

import argparse
import sys

import httpx
from kubernetes import client
from kubernetes.config.config_exception import ConfigException

from workspace_gateway.keys import Keys
from workspace_gateway.kubernetes import cluster, templates
from workspace_gateway.kubernetes.backend import KubernetesBackend
from workspace_gateway.kubernetes.lease import Elector
from workspace_gateway.kubernetes.objects import Settings
from workspace_gateway.kubernetes.secret_keys import SecretKeys
from workspace_gateway.kubernetes.tokens import TokenReviews
from workspace_gateway.metrics import Metrics


def open_cluster(
    args: argparse.Namespace, metrics: Metrics | None = None
) -> tuple[KubernetesBackend, Keys, Elector]:
    """Everything `--kubernetes` needs, or one line saying what is missing."""
    if args.templates is None or args.token_seed_file is None:
        sys.exit("workspace-sandbox-gateway: --kubernetes needs --templates and --token-seed-file")
    if args.token_audience and args.auth != "kubernetes-tokens":
        sys.exit("workspace-sandbox-gateway: --token-audience goes with --auth kubernetes-tokens")
    if not 0 < args.agent_port < 65536:  # noqa: PLR2004  # the port range
        sys.exit("workspace-sandbox-gateway: --agent-port must be a port number")
    try:
        mapping = templates.load(args.templates)
        seed = cluster.seed(args.token_seed_file)
        api = cluster.api_client(args.kubeconfig, args.context)
    except (templates.TemplateError, ConfigException, OSError) as e:
        sys.exit(f"workspace-sandbox-gateway: {e}")
    settings = Settings(templates=mapping, seed=seed, agent_port=args.agent_port)
    backend = KubernetesBackend(
        client.CustomObjectsApi(api),
        settings,
        httpx.AsyncClient(trust_env=False),
        core=client.CoreV1Api(api),  # tenants' pool limits
        metrics=metrics,
    )
    namespace = cluster.gateway_namespace(args.gateway_namespace)
    elector = Elector(client.CoordinationV1Api(api), namespace)
    if args.auth == "kubernetes-tokens":
        audiences = tuple(args.token_audience)
        reviews = TokenReviews(
            client.AuthenticationV1Api(api), client.AuthorizationV1Api(api), audiences=audiences
        )
        return backend, reviews, elector
    return backend, SecretKeys(client.CoreV1Api(api), namespace), elector
