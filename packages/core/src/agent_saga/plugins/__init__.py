"""Plugins: the pluggy hooks, the adapter discovery, ``patch_all`` and the tool policy.

Importing this package does not import pluggy; :mod:`agent_saga.plugins.hookspecs`
and :mod:`agent_saga.plugins.manager` do, and only ``patch_all`` and adapters load them.
"""

from agent_saga.errors import ToolFailed
from agent_saga.plugins.config import PatchConfig
from agent_saga.plugins.patching import (
    PatchReport,
    ToolNotClassified,
    UnclassifiedCall,
    clear_unclassified_calls,
    patch_all,
    unclassified_calls,
    unpatch_all,
)
from agent_saga.plugins.policy import PolicyError, ToolPolicy, policy_schema

__all__ = [
    "PatchConfig",
    "PatchReport",
    "PolicyError",
    "ToolFailed",
    "ToolNotClassified",
    "ToolPolicy",
    "UnclassifiedCall",
    "clear_unclassified_calls",
    "patch_all",
    "policy_schema",
    "unclassified_calls",
    "unpatch_all",
]
