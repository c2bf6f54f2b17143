"""Reaching the cluster: the kubeconfig's context, else the pod's own ServiceAccount."""

from pathlib import Path

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

# Where deploy/gateway installs it, and where the SandboxPlatform lets the gateway in from.
DEFAULT_NAMESPACE = "cozy-sandbox-gateway"
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
MIN_SEED_BYTES = 32


def api_client(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """The kubeconfig's client, else the in-cluster one."""
    try:
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except (ConfigException, OSError):
        if kubeconfig or context:
            raise
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except ConfigException:
        msg = "no kubeconfig (KUBECONFIG or ~/.kube/config) and not inside a cluster"
        raise ConfigException(msg) from None
    return client.ApiClient(configuration)


def gateway_namespace(given: str | None) -> str:
    if given:
        return given
    if IN_CLUSTER_NAMESPACE.exists():
        return IN_CLUSTER_NAMESPACE.read_text().strip()
    return DEFAULT_NAMESPACE


def seed(path: Path) -> bytes:
    """The access-token seed, from a file (a mounted Secret); long enough to be unguessable."""
    try:
        value = path.read_bytes().strip()
    except OSError as e:
        raise ConfigException(f"the token seed {path}: {e.strerror}") from None
    if len(value) < MIN_SEED_BYTES:
        raise ConfigException(f"the token seed {path} has fewer than {MIN_SEED_BYTES} bytes")
    return value
