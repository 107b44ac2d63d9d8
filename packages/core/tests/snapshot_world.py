"""The world of the snapshot crash tests: one state file, snapshotted durably, then changed.

The worker (``snapshot_worker.py``) and the test's daemon both import this module: it
registers the restore handler, and :func:`install` the store the log's undo names.
``$SNAPSHOT_WORLD`` is the directory holding ``state.json``.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from agent_saga import ActionSemantics, SagaAborted, compensator, saga_scope
from agent_saga.snapshots import (
    FileSnapshotStore,
    PostgresSnapshotStore,
    RedisSnapshotStore,
    SnapshotStore,
    register_snapshot_store,
    unregister_snapshot_store,
)

ORIGINAL = {"balance": 100, "owner": "ada"}
# Where a worker may die (SIGKILL, a real kill -9), in the order the scenario passes them.
POINTS = ("after-put", "after-snapshot-1", "after-change-1", "after-snapshot-2", "after-change-2", "inside-step")


def state_file() -> Path:
    return Path(os.environ["SNAPSHOT_WORLD"]) / "state.json"


def read_state() -> Any:
    return json.loads(state_file().read_text())


def write_state(state: Any) -> None:
    path = state_file()
    temp = path.with_suffix(".tmp")
    temp.write_text(json.dumps(state))
    os.replace(temp, path)


@compensator("snapworld.restore")
def restore(captured: Any) -> None:
    write_state(captured)


def make_store(kind: str, where: str) -> SnapshotStore:
    if kind == "file":
        return FileSnapshotStore(where)
    name = os.environ.get("SNAPSHOT_STORE_NAME", kind)  # one per test on a shared server
    if kind == "redis":
        return RedisSnapshotStore(where, name=name)
    return PostgresSnapshotStore(where, name=name)


def install(store: SnapshotStore) -> SnapshotStore:
    """Register ``store`` under its name, replacing one an earlier test registered."""
    unregister_snapshot_store(store.name)
    return register_snapshot_store(store)


def die_at(point: str) -> None:
    if os.environ.get("SNAPSHOT_CRASH_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


class _DyingAfterPut:
    """The store, with a kill after the blob is durable and before the step's intent."""

    def __init__(self, inner: SnapshotStore) -> None:
        self.inner = inner
        self.name = inner.name

    def put(self, saga_id: str, data: bytes) -> str:
        digest = self.inner.put(saga_id, data)
        die_at("after-put")
        return digest

    def get(self, saga_id: str, digest: str) -> bytes:
        return self.inner.get(saga_id, digest)

    def sagas(self) -> list[str]:
        return self.inner.sagas()

    def delete_saga(self, saga_id: str) -> int:
        return self.inner.delete_saga(saga_id)


def scenario(wal: Any, store: SnapshotStore) -> None:
    """Snapshot, change, step, snapshot again, change again, a step that dies; then the agent fails."""
    store = _DyingAfterPut(store)  # type: ignore[assignment]
    install(store)
    try:
        with saga_scope(wal, name="ledger") as s:
            s.snapshot("account", capture=read_state, restore=restore, store=store)
            die_at("after-snapshot-1")
            write_state({**read_state(), "balance": 50})
            die_at("after-change-1")
            s.execute(tool="world.note", semantics=ActionSemantics.REVERSIBLE, forward=lambda: "noted")
            s.snapshot("account", capture=read_state, restore=restore, store=store)
            die_at("after-snapshot-2")
            write_state({"balance": 0, "owner": "mallory"})
            die_at("after-change-2")
            s.execute(tool="world.think", semantics=ActionSemantics.REVERSIBLE,
                      forward=lambda: die_at("inside-step"))
            raise RuntimeError("the agent gave up")
    except SagaAborted:
        pass


def in_process_scenario(wal: Any) -> None:
    """An in-process snapshot, a change, then the process is killed."""
    prices = {"basic": 10}
    with saga_scope(wal, name="prices") as s:
        s.snapshot("prices", capture=lambda: dict(prices), restore=prices.update)
        prices["basic"] = 12
        wal.barrier()  # the snapshot's commit record on disk (a REVERSIBLE step never waits for it)
        die_at("after-in-process-snapshot")
