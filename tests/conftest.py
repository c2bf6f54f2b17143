"""Suite-wide settings."""

from hypothesis import settings

# Autouse: root's login shells must not wait on a lock a killed one left (see there).
from tests.agent.sdk.conftest import no_stale_pyenv_lock  # noqa: F401

# Speed is measured by the benchmark, not by tests: on a loaded machine a 200 ms per-example
# deadline fails property tests that are correct.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")
