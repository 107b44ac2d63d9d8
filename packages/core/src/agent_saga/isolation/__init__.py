"""Saga isolation countermeasures: semantic locks and tentative resources (docs/FLEET.md)."""

from agent_saga.isolation._locks import (
    LockHeld,
    PostgresSemanticLocks,
    RedisSemanticLocks,
    SemanticLockManager,
)
from agent_saga.isolation._tentative import COMMITTED, PENDING, ROLLED_BACK, TentativeResource

__all__ = [
    "COMMITTED",
    "PENDING",
    "ROLLED_BACK",
    "LockHeld",
    "PostgresSemanticLocks",
    "RedisSemanticLocks",
    "SemanticLockManager",
    "TentativeResource",
]
