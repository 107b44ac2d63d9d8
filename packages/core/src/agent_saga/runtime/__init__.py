"""The accountable agent runtime: why an agent acted, and what its answers can prove.

``broker`` holds the documents and requests a model was given, as spans with
receipts; ``matching`` finds a value in a text (numbers by value); ``provenance``
tags arguments with where they came from and checks the tags at the gate;
``grounding`` labels each claim of an answer with what its citations prove now;
``cascade`` asks model ``tiers`` cheapest first and returns only what its
``verifiers`` accept; ``repair`` gives a malformed call one more try (``schema``
checks the arguments) and ``thrash`` stops a saga whose calls repeat or oscillate.
``speculation`` runs the agent's predicted REVERSIBLE reads while its model thinks,
each held behind a ``leases`` HMAC until the agent asks (``predictors``: what to guess).
See docs/AGENT_RUNTIME.md.
"""

from __future__ import annotations

from agent_saga.runtime._broker import (
    DEFAULT_SPAN_CHARS,
    ContextBroker,
    Receipt,
    ReceiptBroken,
    Span,
    Summary,
    SummaryRefused,
)
from agent_saga.runtime._cascade import Attempt, CascadeExhausted, CascadeResult, cascade
from agent_saga.runtime._grounding import Claim, ClaimStatus, GroundingReport, ground, split_claims
from agent_saga.runtime._matching import numbers_in, quotes_in, value_in_text
from agent_saga.runtime._predictors import PatternPredictor, Prediction, Predictor
from agent_saga.runtime._provenance import (
    ArgumentProvenance,
    Derived,
    Provenance,
    ProvenancePolicy,
    ProvenanceVerdict,
    Sourced,
    UserValue,
    derived,
    sourced,
    user_value,
)
from agent_saga.runtime._repair_turn import RepairPolicy
from agent_saga.runtime._schema import argument_check
from agent_saga.runtime._speculation import SpeculationStats, Speculator, planned_calls
from agent_saga.runtime._speculation_leases import SpeculationLease
from agent_saga.runtime._thrash import ThrashPolicy, canonical_args
from agent_saga.runtime._tiers import OpenAICompatibleTier, Tier, TierAnswer, ToolCall
from agent_saga.runtime._verifiers import (
    Verdict,
    Verifier,
    all_of,
    grounded,
    matches_schema,
    tools_must_exist,
)

__all__ = [
    "DEFAULT_SPAN_CHARS",
    "ArgumentProvenance",
    # the cascade (issue 26 part 3)
    "Attempt",
    "CascadeExhausted",
    "CascadeResult",
    "Claim",
    "ClaimStatus",
    "ContextBroker",
    "Derived",
    "GroundingReport",
    "OpenAICompatibleTier",
    "PatternPredictor",
    "Prediction",
    "Predictor",
    "Provenance",
    "ProvenancePolicy",
    "ProvenanceVerdict",
    "Receipt",
    "ReceiptBroken",
    "RepairPolicy",
    "Sourced",
    "Span",
    "SpeculationLease",
    "SpeculationStats",
    "Speculator",
    "Summary",
    "SummaryRefused",
    "ThrashPolicy",
    "Tier",
    "TierAnswer",
    "ToolCall",
    "UserValue",
    "Verdict",
    "Verifier",
    "all_of",
    "argument_check",
    "canonical_args",
    "cascade",
    "derived",
    "ground",
    "grounded",
    "matches_schema",
    "numbers_in",
    "planned_calls",
    "quotes_in",
    "sourced",
    "split_claims",
    "tools_must_exist",
    "user_value",
    "value_in_text",
]
