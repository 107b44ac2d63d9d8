"""Plugins: the pluggy hooks, the adapter discovery, ``patch_all`` and the tool policy.

Importing this package does not import pluggy; :mod:`agent_saga.plugins.hookspecs`
and :mod:`agent_saga.plugins.manager` do, and only ``patch_all`` and adapters load them.
"""

from agent_saga.plugins.patching import (
    Observation,
    PatchConfig,
    PatchReport,
    ToolNotClassified,
    clear_observations,
    observations,
    patch_all,
    unpatch_all,
)
from agent_saga.plugins.policy import PolicyError, ToolPolicy, policy_schema
from agent_saga.plugins.support import ToolFailed

__all__ = [
    "Observation",
    "PatchConfig",
    "PatchReport",
    "PolicyError",
    "ToolFailed",
    "ToolNotClassified",
    "ToolPolicy",
    "clear_observations",
    "observations",
    "patch_all",
    "policy_schema",
    "unpatch_all",
]
