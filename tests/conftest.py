"""Suite-wide settings."""

from hypothesis import settings

# Speed is measured by the benchmark, not by tests: on a loaded machine a 200 ms per-example
# deadline fails property tests that are correct.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")
