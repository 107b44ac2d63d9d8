"""saga.snapshot: in-process (REVERSIBLE) and durable (COMPENSABLE, through a SnapshotStore)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli

from agent_saga import (
    ActionSemantics,
    Compensation,
    CompensationError,
    CompensationRefused,
    ConfigurationError,
    FileWAL,
    MemoryWAL,
    RecoveryDaemon,
    SagaAborted,
    compensator,
    saga_scope,
)
from agent_saga.credentials import CredentialError
from agent_saga.engine.snapshot import RESTORE_HANDLER, restore_snapshot
from agent_saga.engine.undo import undo_of
from agent_saga.log import read_records
from agent_saga.snapshots import FileSnapshotStore, register_snapshot_store, unregister_snapshot_store

STATE: dict[str, Any] = {}


@compensator("test_snapshots.restore")
def restore_state(captured: Any) -> None:
    STATE.clear()
    STATE.update(captured)


@compensator("test_snapshots.other")
def other_handler(captured: Any) -> None:
    STATE["other_handler_got"] = captured


@pytest.fixture
def store(tmp_path: Path) -> Any:
    unregister_snapshot_store("file")
    yield FileSnapshotStore(tmp_path / "snapshots")
    unregister_snapshot_store("file")


def test_in_process_restores_run_lifo_with_the_other_undos() -> None:
    done: list[str] = []
    value = {"v": 1}

    async def run() -> None:
        async with saga_scope(MemoryWAL()) as s:
            await s.snapshot("v", capture=lambda: dict(value), restore=lambda c: (done.append(f"restore {c}"),
                                                                                    value.update(c)))
            value["v"] = 2
            await s.execute(tool="charge", semantics=ActionSemantics.COMPENSABLE, forward=lambda: "c1",
                            compensate=Compensation(fn=lambda: done.append("refund")))
            await s.snapshot("v", capture=lambda: dict(value), restore=lambda c: (done.append(f"restore {c}"),
                                                                                    value.update(c)))
            value["v"] = 3
            raise RuntimeError("the agent failed")

    with pytest.raises(SagaAborted) as aborted:
        asyncio.run(run())
    assert done == ["restore {'v': 2}", "refund", "restore {'v': 1}"]
    assert value == {"v": 1}
    assert aborted.value.report is not None and aborted.value.report.clean


def test_the_sync_face_takes_a_snapshot_and_the_log_holds_no_state() -> None:
    wal = MemoryWAL()
    secret_ish = {"v": "private value"}
    with pytest.raises(SagaAborted), saga_scope(wal) as s:
        assert s.snapshot("v", capture=lambda: dict(secret_ish), restore=secret_ish.update) == {"v": "private value"}
        secret_ish["v"] = "changed"
        raise RuntimeError("x")
    assert secret_ish == {"v": "private value"}
    assert "private value" not in json.dumps([r.get("body") for r in wal.records()], default=str)


def test_a_durable_snapshot_is_stored_before_its_intent_and_the_log_holds_only_the_reference(
    tmp_path: Path, store: FileSnapshotStore
) -> None:
    wal = FileWAL(tmp_path / "saga.wal")
    seen_at_put: list[list[str]] = []

    class Watching(FileSnapshotStore):
        def put(self, saga_id: str, data: bytes) -> str:
            seen_at_put.append([r["type"] for r in read_records(tmp_path / "saga.wal")])
            return super().put(saga_id, data)

    watched = Watching(tmp_path / "snapshots")
    STATE.clear()
    STATE.update({"balance": 100, "note": "x" * 5000})
    with pytest.raises(SagaAborted), saga_scope(wal) as s:
        digest = s.snapshot("account", capture=lambda: dict(STATE), restore=restore_state, store=watched)
        STATE["balance"] = 0
        raise RuntimeError("x")
    wal.close()
    assert STATE["balance"] == 100  # restored in-process, through the store
    assert seen_at_put == [["SAGA_STARTED"]]  # the start durable, the intent not yet written
    records = list(read_records(tmp_path / "saga.wal"))
    intent = next(r for r in records if r["type"] == "STEP_INTENT")
    assert intent["body"]["compensation"]["handler"] == RESTORE_HANDLER
    assert intent["body"]["compensation"]["kwargs"] == {
        "store": "file", "saga": intent["saga"], "digest": digest, "restore": "test_snapshots.restore"}
    assert "x" * 100 not in (tmp_path / "saga.wal").read_text()
    assert (tmp_path / "snapshots" / intent["saga"] / digest).exists()


@pytest.mark.parametrize(("captured", "error"), [
    ({"api_key": "sk_live_abcdefghijklmnopqrstuvwx"}, CredentialError),
    ({"nan": math.nan}, CompensationError),
    ({"ids": {1, 2}}, CompensationError),
])
def test_captured_state_passes_the_checks_compensation_kwargs_pass(
    tmp_path: Path, store: FileSnapshotStore, captured: Any, error: type[Exception]
) -> None:
    wal = MemoryWAL()
    with pytest.raises(SagaAborted) as aborted, saga_scope(wal) as s:
        s.snapshot("bad", capture=lambda: captured, restore=restore_state, store=store)
    assert isinstance(aborted.value.__cause__ or aborted.value.__context__, error)
    assert store.sagas() == []  # refused before anything was stored
    assert not any(r["type"] == "STEP_INTENT" for r in wal.records())


def test_a_durable_snapshot_needs_a_registered_restore(store: FileSnapshotStore) -> None:
    with pytest.raises(SagaAborted) as aborted, saga_scope(MemoryWAL()) as s:
        s.snapshot("v", capture=lambda: 1, restore=lambda c: None, store=store)
    cause = aborted.value.__cause__ or aborted.value.__context__
    assert isinstance(cause, ConfigurationError) and "registered with @compensator" in str(cause)
    assert store.sagas() == []


@pytest.mark.parametrize(("kwargs", "error", "says"), [
    ({"saga": "../../etc", "digest": "0" * 64}, ValueError, "is not a saga id"),
    ({"saga": "s1", "digest": "../x"}, ValueError, "is not a lowercase hex SHA-256"),
    ({"store": "nowhere"}, KeyError, "no snapshot store named 'nowhere'"),
    ({"restore": "os.system"}, KeyError, "no compensation handler named 'os.system'"),
])
def test_the_restore_handler_treats_what_the_log_says_as_data(
    store: FileSnapshotStore, kwargs: dict[str, str], error: type[Exception], says: str
) -> None:
    register_snapshot_store(store)
    digest = store.put("s1", b'{"a":1}')
    args = {"store": "file", "saga": "s1", "digest": digest, "restore": "test_snapshots.restore", **kwargs}
    with pytest.raises(error, match=says.replace("(", r"\(")), undo_of("s1"):
        restore_snapshot(**args)


def test_a_tampered_blob_is_not_restored(store: FileSnapshotStore) -> None:
    register_snapshot_store(store)
    digest = store.put("s1", b'{"a":1}')
    (store.root / "s1" / digest).write_bytes(b'{"a":2}')
    with pytest.raises(CompensationError, match="does not match its hash"), undo_of("s1"):
        restore_snapshot(store="file", saga="s1", digest=digest, restore="test_snapshots.restore")


def test_a_second_store_cannot_take_a_registered_name(tmp_path: Path, store: FileSnapshotStore) -> None:
    register_snapshot_store(store)
    register_snapshot_store(FileSnapshotStore(tmp_path / "snapshots"))  # the same store again: fine
    with pytest.raises(ConfigurationError, match="already registered as 'file'"):
        register_snapshot_store(FileSnapshotStore(tmp_path / "other"))


def _settled_saga_with_snapshot(tmp_path: Path, store: FileSnapshotStore) -> Path:
    log = tmp_path / "saga.wal"
    with FileWAL(log) as wal:
        with saga_scope(wal) as s:
            s.snapshot("v", capture=lambda: {"a": 1}, restore=restore_state, store=store)
        with pytest.raises(SagaAborted), saga_scope(wal, saga_id="kept-open") as s:
            s.snapshot("v", capture=lambda: {"a": 2}, restore=restore_state, store=store)
            s.execute(tool="undo-fails", semantics=ActionSemantics.COMPENSABLE, forward=lambda: 1,
                      compensate=Compensation(fn=lambda: 1 / 0))
            raise RuntimeError("x")
    return log


def test_snapshots_gc_deletes_only_settled_sagas_snapshots(tmp_path: Path, store: FileSnapshotStore) -> None:
    log = _settled_saga_with_snapshot(tmp_path, store)
    assert len(store.sagas()) == 2
    dry = run_cli("snapshots", "gc", "--wal-path", str(log), "--store", str(store.root), "--dry-run")
    assert dry.returncode == 0 and "would delete the snapshots of 1 settled saga(s)" in dry.stdout
    assert len(store.sagas()) == 2
    ran = run_cli("snapshots", "gc", "--wal-path", str(log), "--store", str(store.root))
    assert ran.returncode == 0, ran.stderr
    assert store.sagas() == ["kept-open"]  # its rollback was not clean: kept for whoever repairs it
    assert "deleted 1 snapshot(s) of 1 settled saga(s); kept those of 1 saga(s)" in ran.stdout


def test_snapshots_gc_refuses_a_log_that_does_not_verify(tmp_path: Path, store: FileSnapshotStore) -> None:
    log = _settled_saga_with_snapshot(tmp_path, store)
    lines = log.read_text().splitlines()
    lines[0] = lines[0].replace('"name":"saga"', '"name":"forged"')
    log.write_text("\n".join(lines) + "\n")
    ran = run_cli("snapshots", "gc", "--wal-path", str(log), "--store", str(store.root))
    assert ran.returncode == 1
    assert "deleted nothing: the log does not verify (broken" in ran.stdout
    assert len(store.sagas()) == 2


def test_snapshots_gc_bad_store_is_one_line(tmp_path: Path) -> None:
    log = tmp_path / "saga.wal"
    FileWAL(log).close()
    ran = run_cli("snapshots", "gc", "--wal-path", str(log), "--store", "ftp://x")
    assert ran.returncode == 2 and ran.stderr.strip().count("\n") == 0 and "--store 'ftp://x'" in ran.stderr


def test_the_daemons_sweep_collects_snapshots_of_settled_sagas(tmp_path: Path, store: FileSnapshotStore) -> None:
    log = _settled_saga_with_snapshot(tmp_path, store)
    with RecoveryDaemon(log, snapshots=[store]) as daemon:
        report = daemon.sweep()
    [gc] = report.snapshots
    assert (gc.store, len(gc.deleted), gc.kept, gc.refused) == ("file", 1, ["kept-open"], "")
    assert store.sagas() == ["kept-open"]


def test_agent_saga_recover_sweeps_the_snapshot_stores_it_is_given(tmp_path: Path, store: FileSnapshotStore) -> None:
    log = _settled_saga_with_snapshot(tmp_path, store)
    unregister_snapshot_store("file")  # as in a fresh daemon process: the option registers it
    ran = run_cli("recover", "--wal-path", str(log), "--snapshot-store", f"file={store.root}")
    assert "snapshot store 'file': deleted 1 snapshot(s) of 1 settled saga(s)" in ran.stdout, ran.stdout + ran.stderr
    assert store.sagas() == ["kept-open"]


def test_an_async_capture_runs_on_the_loop_and_the_put_off_it(tmp_path: Path, store: FileSnapshotStore) -> None:
    import threading

    threads: dict[str, int] = {}

    class Where(FileSnapshotStore):
        def put(self, saga_id: str, data: bytes) -> str:
            threads["put"] = threading.get_ident()
            return super().put(saga_id, data)

    async def capture() -> dict[str, int]:
        threads["capture"] = threading.get_ident()
        return {"a": 1}

    async def run() -> None:
        threads["loop"] = threading.get_ident()
        async with saga_scope(MemoryWAL()) as s:
            await s.snapshot("v", capture=capture, restore=restore_state, store=Where(tmp_path / "snapshots"))

    asyncio.run(run())
    assert threads["capture"] == threads["loop"] != threads["put"]


def test_a_counterfactual_replay_writes_no_snapshot(tmp_path: Path, store: FileSnapshotStore) -> None:
    from agent_saga import counterfactual_replay

    def agent() -> None:
        with saga_scope() as s:
            s.snapshot("v", capture=lambda: {"a": 1}, restore=restore_state, store=store)

    log = tmp_path / "saga.wal"
    with FileWAL(log) as wal, saga_scope(wal) as s:
        s.snapshot("v", capture=lambda: {"a": 1}, restore=restore_state, store=store)
    recorded = store.sagas()
    report = counterfactual_replay(log, agent)
    assert [row.status for row in report.rows] == ["served"], report
    assert store.sagas() == recorded  # the recording answered; nothing was stored for the replay


def test_a_stored_blob_that_no_longer_matches_its_hash_is_written_again(store: FileSnapshotStore) -> None:
    digest = store.put("s1", b'{"a":1}')
    (store.root / "s1" / digest).write_bytes(b'{"a":2}')
    assert store.put("s1", b'{"a":1}') == digest
    assert store.get("s1", digest) == b'{"a":1}'


# -- issue 40 item 7: a snapshot is restored only for the saga (and the handler) it was taken for --------


def _account_of_saga_a(wal: FileWAL, store: FileSnapshotStore) -> str:
    """Saga A snapshots the account, then moves its balance to 0 and commits: that change stands."""
    STATE.clear()
    STATE.update({"balance": 100})
    with saga_scope(wal, saga_id="saga-a") as a:
        digest = a.snapshot("account", capture=lambda: dict(STATE), restore=restore_state, store=store)
        STATE["balance"] = 0
    return str(digest)


def _forged(digest: str, saga: str = "saga-a", restore: str = "test_snapshots.restore") -> dict[str, Any]:
    return {"handler": RESTORE_HANDLER,
            "kwargs": {"store": "file", "saga": saga, "digest": digest, "restore": restore}}


def test_a_forged_undo_in_another_saga_does_not_restore_its_snapshot(tmp_path: Path, store: FileSnapshotStore) -> None:
    log = tmp_path / "saga.wal"
    with FileWAL(log) as wal:
        digest = _account_of_saga_a(wal, store)
        # Saga B, the agent: a step whose undo names saga A's snapshot.
        with pytest.raises(SagaAborted) as aborted, saga_scope(wal, saga_id="saga-b") as b:
            b.execute(tool="note", semantics=ActionSemantics.COMPENSABLE, forward=lambda: "n1",
                      compensate=lambda r: _forged(digest))
            raise RuntimeError("the agent failed")
    assert STATE == {"balance": 0}  # A's committed change stands
    assert aborted.value.report is not None and not aborted.value.report.clean
    records = [r for r in read_records(log) if r["saga"] == "saga-b"]
    [failed] = [r["body"] for r in records if r["type"] == "COMPENSATION_FAILED"]  # refused once, not retried
    assert "snapshot of saga 'saga-a' is not restored while saga 'saga-b' is compensated" in failed["error"]
    assert failed["attempts"] == 1
    assert [r["body"]["kind"] for r in records if r["type"] == "ESCALATED"] == ["compensation-failing"]


def test_the_daemon_refuses_a_forged_restore_in_a_dead_saga(tmp_path: Path, store: FileSnapshotStore) -> None:
    log = tmp_path / "saga.wal"
    with FileWAL(log) as wal:
        digest = _account_of_saga_a(wal, store)
        # The agent writes its own log: saga B, dead, with one committed step whose undo is A's snapshot.
        wal.append("SAGA_STARTED", "saga-b", {"name": "agent", "lease_ttl": 1.0})
        wal.append("STEP_INTENT", "saga-b", {"tool": "note", "semantics": "COMPENSABLE", "op": "o1",
                                             "args": {}, "compensation": None}, 1)
        wal.append("STEP_COMMITTED", "saga-b", {"op": "o1", "compensation": {
            **_forged(digest), "key": "key-1", "recoverable": True}}, 1)
    with RecoveryDaemon(log, clock=lambda: time.time() + 3600) as daemon:
        report = daemon.sweep()
    assert STATE == {"balance": 0}
    assert [(e.saga, e.kind) for e in report.new_escalations] == [("saga-b", "undo-refused")]
    assert "is not restored while saga 'saga-b' is compensated" in report.new_escalations[0].detail


def test_a_snapshot_is_restored_only_by_the_handler_it_was_taken_for(tmp_path: Path, store: FileSnapshotStore) -> None:
    log = tmp_path / "saga.wal"
    with FileWAL(log) as wal, pytest.raises(SagaAborted), saga_scope(wal, saga_id="saga-b") as b:
        STATE.clear()
        STATE.update({"balance": 100})
        digest = b.snapshot("account", capture=lambda: dict(STATE), restore=restore_state, store=store)
        STATE["balance"] = 0
        # Its own snapshot, handed by a forged undo to another registered handler.
        b.execute(tool="note", semantics=ActionSemantics.COMPENSABLE, forward=lambda: "n1",
                  compensate=lambda r: _forged(digest, "saga-b", "test_snapshots.other"))
        raise RuntimeError("the agent failed")
    assert "other_handler_got" not in STATE
    assert STATE == {"balance": 0}  # the rollback halted at the refused undo: a person decides the rest
    [failed] = [r["body"] for r in read_records(log) if r["type"] == "COMPENSATION_FAILED"]
    assert "was taken for restore handler 'test_snapshots.restore', not 'test_snapshots.other'" in failed["error"]
    with undo_of("saga-b"):  # the undo its own step recorded still restores it
        restore_snapshot(store="file", saga="saga-b", digest=digest, restore="test_snapshots.restore")
    assert STATE == {"balance": 100}


def test_a_snapshot_is_not_restored_outside_an_undo(store: FileSnapshotStore) -> None:
    register_snapshot_store(store)
    digest = store.put("s1", b'{"a":1}')  # a blob as written before the handler was stored with it
    with pytest.raises(CompensationRefused, match="is not restored outside any undo"):
        restore_snapshot(store="file", saga="s1", digest=digest, restore="test_snapshots.restore")
    with undo_of("s1"):  # its own saga's undo: restored, by the handler its record names
        restore_snapshot(store="file", saga="s1", digest=digest, restore="test_snapshots.restore")
    assert STATE == {"a": 1}
