"""The accountable agent runtime: why an agent acted, and what its answers can prove.

``broker`` holds the documents and requests a model was given, as spans with
receipts; ``matching`` finds a value in a text (numbers by value); ``provenance``
tags arguments with where they came from and checks the tags at the gate.
See docs/AGENT_RUNTIME.md.
"""

from __future__ import annotations

# -- provenance (issue 26 part 1): the broker, matching and the policy --
from agent_saga.runtime.broker import (
    DEFAULT_SPAN_CHARS,
    ContextBroker,
    Receipt,
    ReceiptBroken,
    Span,
    Summary,
    SummaryRefused,
)
from agent_saga.runtime.matching import numbers_in, quotes_in, value_in_text
from agent_saga.runtime.provenance import (
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

__all__ = [
    # -- provenance (issue 26 part 1) --
    "DEFAULT_SPAN_CHARS",
    "ArgumentProvenance",
    "ContextBroker",
    "Derived",
    "Provenance",
    "ProvenancePolicy",
    "ProvenanceVerdict",
    "Receipt",
    "ReceiptBroken",
    "Sourced",
    "Span",
    "Summary",
    "SummaryRefused",
    "UserValue",
    "derived",
    "numbers_in",
    "quotes_in",
    "sourced",
    "user_value",
    "value_in_text",
]
