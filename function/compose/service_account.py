"""The sandbox pod's own ServiceAccount: an identity with nothing behind it.

Every pod runs as some ServiceAccount; without one of its own, a sandbox would run as the
namespace's `default`, which a tenant may have bound to roles. This one mounts no token, names
no image pull secrets, and nothing binds it to any role.
"""

from function.compose.names import SERVICE_ACCOUNT_KEY, labels, service_account_name
from function.model import Manifest
from function.model.spec import WorkspaceSandbox

KEY = SERVICE_ACCOUNT_KEY


def service_account(ws: WorkspaceSandbox) -> dict[str, Manifest]:
    return {
        KEY: {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": service_account_name(ws), "labels": labels(ws)},
            "automountServiceAccountToken": False,
        }
    }
