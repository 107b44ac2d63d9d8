"""Durable snapshots: where they are kept, and the sweep that removes those no saga needs.

``saga.snapshot(name, capture=..., restore=..., store=...)`` takes one (engine/snapshot.py);
a :class:`SnapshotStore` keeps it: :class:`FileSnapshotStore` (the default kind: fsync'd
files, atomic renames, content-hash names), :class:`RedisSnapshotStore` and
:class:`PostgresSnapshotStore` for a fleet. :func:`collect` is ``agent-saga snapshots gc``.
"""

from agent_saga.engine.snapshot import (
    RESTORE_HANDLER,
    SnapshotStore,
    register_snapshot_store,
    snapshot_store,
    unregister_snapshot_store,
)
from agent_saga.snapshots._file import FileSnapshotStore
from agent_saga.snapshots._gc import GCReport, collect
from agent_saga.snapshots._postgres import PostgresSnapshotStore
from agent_saga.snapshots._redis import RedisSnapshotStore

__all__ = [
    "RESTORE_HANDLER",
    "FileSnapshotStore",
    "GCReport",
    "PostgresSnapshotStore",
    "RedisSnapshotStore",
    "SnapshotStore",
    "collect",
    "register_snapshot_store",
    "snapshot_store",
    "unregister_snapshot_store",
]
