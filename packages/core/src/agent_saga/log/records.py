"""The record model of the write-ahead log.

A record is one JSON object per line. Its *header* (``HEADER_FIELDS``) is what the
hash chain commits to and what survives redaction; its ``body`` is the payload,
committed to indirectly through a salted digest so that erasing the body (and its
salt) keeps the chain verifiable. The log knows record types, not sagas.
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = ["GENESIS", "HEADER_FIELDS", "Record", "RecordType"]

Record = dict[str, Any]

# The fields a record's chain hash covers, in canonical (sorted) order.
HEADER_FIELDS = ("digest", "prev", "saga", "seq", "step", "ts", "type")
GENESIS = "0" * 64  # ``prev`` of the first record of a log


class RecordType(str, enum.Enum):
    """Every kind of record the engine and its tools write."""

    SAGA_STARTED = "SAGA_STARTED"
    LEASE_RENEWED = "LEASE_RENEWED"
    STEP_REFUSED = "STEP_REFUSED"
    STEP_INTENT = "STEP_INTENT"
    STEP_COMMITTED = "STEP_COMMITTED"
    STEP_UNKNOWN = "STEP_UNKNOWN"
    STEP_NOT_APPLIED = "STEP_NOT_APPLIED"
    ROLLBACK_STARTED = "ROLLBACK_STARTED"
    COMPENSATION_STARTED = "COMPENSATION_STARTED"
    STEP_COMPENSATED = "STEP_COMPENSATED"
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    STEP_ORPHANED = "STEP_ORPHANED"
    STEP_UNRESOLVED = "STEP_UNRESOLVED"
    STEP_KEPT = "STEP_KEPT"
    SAGA_COMPLETED = "SAGA_COMPLETED"
    SAGA_ROLLED_BACK = "SAGA_ROLLED_BACK"

    def __str__(self) -> str:
        return self.value
