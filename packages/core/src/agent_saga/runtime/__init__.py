"""The accountable agent runtime (issue 26): what a model's actions and answers carry as evidence.

Each module is one layer: the cascade of model tiers (``cascade``, ``tiers``,
``verifiers``). Every verdict it reaches is a record in the saga's log.
"""

from agent_saga.runtime.cascade import Attempt, CascadeExhausted, CascadeResult, cascade
from agent_saga.runtime.tiers import OpenAICompatibleTier, Tier, TierAnswer, ToolCall
from agent_saga.runtime.verifiers import (
    Verdict,
    Verifier,
    all_of,
    grounded,
    matches_schema,
    tools_must_exist,
)

__all__ = [
    "Attempt",
    "CascadeExhausted",
    "CascadeResult",
    "OpenAICompatibleTier",
    "Tier",
    "TierAnswer",
    "ToolCall",
    "Verdict",
    "Verifier",
    "all_of",
    "cascade",
    "grounded",
    "matches_schema",
    "tools_must_exist",
]
