"""The fuzz suite's Hypothesis profiles: `ci` (the default: 60 examples each, the whole suite in about 20 s) and
`fuzz` (`make fuzz`: many more examples). Set HYPOTHESIS_PROFILE to choose; a failure prints the example
and `@reproduce_failure` to replay it."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# No deadline: CI shares busy cores, and a slow example is not a failure (timing lives in bench/).
_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
           "print_blob": True}
# ci: the same examples on every run (a red build names a change, not a lucky draw), no database in the repo;
# fuzz: fresh examples each run, failures remembered in .hypothesis/ and replayed first next time.
settings.register_profile("ci", max_examples=60, derandomize=True, database=None, **_COMMON)
settings.register_profile("fuzz", max_examples=2000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
