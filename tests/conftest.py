"""Settings for the whole test suite."""

from hypothesis import settings

# no per-example deadline: hypothesis would fail an example whose first call pays a one-off cost
# (an import, numba loading the engine) on a busy machine; speed is measured in benchmarks/
settings.register_profile("specsched", deadline=None)
settings.load_profile("specsched")
