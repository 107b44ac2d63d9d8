"""Saga isolation countermeasures: semantic locks and tentative resources (docs/FLEET.md)."""

from agent_saga.isolation.locks import LockHeld, PostgresSemanticLocks, RedisSemanticLocks, SemanticLockManager

__all__ = ["LockHeld", "PostgresSemanticLocks", "RedisSemanticLocks", "SemanticLockManager"]
