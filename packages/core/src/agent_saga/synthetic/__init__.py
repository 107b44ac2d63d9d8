"""Shareable synthetic traffic: a log's shape without anyone's data (docs/LEARNING.md).

``WALProfile.fit(records)`` learns what a log looks like and keeps no value a person or an
agent wrote; ``synthesize(profile, sagas=50, seed=7)`` draws sagas from it as records that
verify like a real log, each marked so that ``certify`` and ``export`` refuse it as evidence.
"""

from agent_saga.synthetic._profile import (
    PROFILE_FORMAT,
    ProfileError,
    SyntheticRecords,
    WALProfile,
    synthesize,
)

__all__ = ["PROFILE_FORMAT", "ProfileError", "SyntheticRecords", "WALProfile", "synthesize"]
