"""Deterministic identifiers.

An operation id is a pure function of (saga id, step index, tool, direction), so
the in-process rollback, a retry, and a recovery daemon on another host all derive
the same idempotency key for the same piece of work.
"""

from __future__ import annotations

import hashlib
import uuid

__all__ = ["Direction", "new_saga_id", "operation_id"]

Direction = str  # "forward" | "compensate" | "fallback"

_SEP = "\x1f"


def operation_id(saga_id: str, step: int, tool: str, direction: Direction) -> str:
    """The idempotency key of one direction of one step: 32 hex chars of SHA-256."""
    return hashlib.sha256(f"{saga_id}{_SEP}{step}{_SEP}{tool}{_SEP}{direction}".encode()).hexdigest()[:32]


def new_saga_id() -> str:
    """A fresh, unguessable saga id."""
    return uuid.uuid4().hex
