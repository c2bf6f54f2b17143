"""The fixtures of `tests/gateway/sdk/gateways.py`, for the tests in this folder; `sdk_env`
points every one of them at the gateway. Run alone (under an older SDK's venv), the folder
needs the suite's guard against a stale pyenv lock too."""

from tests.gateway.sdk.gateways import gateway, gateway_url, key, sandbox, sdk_env
from tests.pyenv import no_stale_pyenv_lock

__all__ = ["gateway", "gateway_url", "key", "no_stale_pyenv_lock", "sandbox", "sdk_env"]
