"""The accountable agent runtime: why an agent acted, and what its answers can prove.

``broker`` holds the documents and requests a model was given, as spans with
receipts; ``matching`` finds a value in a text (numbers by value); ``provenance``
tags arguments with where they came from and checks the tags at the gate.
"""

from __future__ import annotations

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

__all__ = [
    "DEFAULT_SPAN_CHARS",
    "ContextBroker",
    "Receipt",
    "ReceiptBroken",
    "Span",
    "Summary",
    "SummaryRefused",
    "numbers_in",
    "quotes_in",
    "value_in_text",
]
