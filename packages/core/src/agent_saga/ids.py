"""Deterministic identifiers.

An operation id is a pure function of (saga id, step index, tool, direction), so
the in-process rollback, a retry, and a recovery daemon on another host all derive
the same idempotency key for the same piece of work.
"""

from __future__ import annotations

import hashlib
import uuid

__all__ = ["Direction", "new_saga_id", "operation_id", "step_keys"]

Direction = str  # "forward" | "compensate" | "fallback"

_SEP = "\x1f"


def operation_id(saga_id: str, step: int, tool: str, direction: Direction) -> str:
    """The idempotency key of one direction of one step: 32 hex chars of SHA-256."""
    return hashlib.sha256(f"{saga_id}{_SEP}{step}{_SEP}{tool}{_SEP}{direction}".encode()).hexdigest()[:32]


def step_keys(saga_id: str, step: int, tool: str) -> tuple[str, str]:
    """``operation_id`` of the forward and of the compensate direction of one step.

    The same values as two ``operation_id`` calls: the prefix they share is hashed
    once and the hash state copied (every durable step needs both keys).
    """
    forward = hashlib.sha256(f"{saga_id}{_SEP}{step}{_SEP}{tool}{_SEP}".encode())
    compensate = forward.copy()
    forward.update(b"forward")
    compensate.update(b"compensate")
    return forward.hexdigest()[:32], compensate.hexdigest()[:32]


def new_saga_id() -> str:
    """A fresh, unguessable saga id."""
    return uuid.uuid4().hex
