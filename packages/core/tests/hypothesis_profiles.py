"""The property tests' example counts, per lane: one place instead of a number in each test.

Two Hypothesis profiles: ``ci`` (the full envs) and ``fast`` (``tox -e core-fast``, which sets
AGENT_SAGA_FAST_LANE=1). A test that needs more (or fewer) examples than the default says how many
it wants in the full run with ``examples(n)``; the fast lane caps every such count at its own, so
a count written in a test no longer overrides the lane. HYPOTHESIS_PROFILE=ci|fast picks one by hand.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = ["FAST_EXAMPLES", "PROFILE", "examples"]

FAST_EXAMPLES = 20

# No timing: Hypothesis's default deadline (200 ms per example) and its too_slow health check are
# timing assertions, and on a loaded 2-core machine a slow example fails as DeadlineExceeded or
# Flaky with nothing wrong in the code.
UNTIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("ci", max_examples=100, **UNTIMED)
settings.register_profile("fast", max_examples=FAST_EXAMPLES, **UNTIMED)

PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("fast" if os.environ.get("AGENT_SAGA_FAST_LANE") == "1" else "ci")
if PROFILE not in ("ci", "fast"):
    raise ValueError(f"HYPOTHESIS_PROFILE={PROFILE!r} is not a profile of these tests: use ci or fast")
settings.load_profile(PROFILE)


def examples(n: int) -> int:
    """``n`` examples in the full run; at most the fast profile's count in the fast lane."""
    return min(n, FAST_EXAMPLES) if PROFILE == "fast" else n
