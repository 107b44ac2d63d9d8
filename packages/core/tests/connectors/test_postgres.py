"""The Postgres connector against the real PostgreSQL (`scripts/services` starts it on 127.0.0.1).

Each test gets its own schema; `AGENT_SAGA_TEST_PG_URL` names the server.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import pg_url

from agent_saga import FileWAL, NotApplied, SagaAborted, saga_scope
from agent_saga.connectors import set_credential_resolver
from agent_saga.connectors.postgres import delete, insert, update
from agent_saga.context import use_saga
from agent_saga.engine.saga import Saga
from agent_saga.errors import ConfigurationError
from agent_saga.log.file import read_records
from agent_saga.reconciliation import reconcile
from agent_saga.recovery import RecoveryDaemon
from agent_saga.recovery.lease import lease_keeper

ORIGINAL = {"org": 1, "id": 7, "price": "12.50", "meta": {"a": 1.5}, "at": "2024-01-02T03:04:05+00:00",
            "name": "bob", "note": None}


@pytest.fixture
def db() -> Iterator[dict[str, Any]]:
    url = pg_url()
    schema = f"agent_saga_conn_{uuid.uuid4().hex[:10]}"
    app = f"{schema}_app"
    dsn = f"{url}{'&' if '?' in url else '?'}application_name={app}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        admin.execute(f"""CREATE TABLE {schema}.accounts (
            org int, id int, price numeric(12,2), meta jsonb, at timestamptz, name text, note text,
            PRIMARY KEY (org, id))""")
        admin.execute(f"INSERT INTO {schema}.accounts VALUES (1, 7, 12.50, '{{\"a\": 1.5}}', "
                      "'2024-01-02 03:04:05+00', 'bob', NULL)")
        set_credential_resolver(lambda name: {"pg_test": dsn}[name])
        try:
            yield {"schema": schema, "table": f"{schema}.accounts", "admin": admin, "app": app}
        finally:
            set_credential_resolver(None)
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def row(db: dict[str, Any], org: int = 1, id_: int = 7) -> dict[str, Any] | None:
    found = db["admin"].execute(
        f"SELECT to_jsonb(t) FROM {db['table']} t WHERE org = %s AND id = %s", (org, id_)).fetchone()
    return None if found is None else found[0]


KEY = {"org": 1, "id": 7}


def test_an_update_by_compound_key_is_undone_exactly_and_holds_no_transaction(db: dict[str, Any]) -> None:
    original = row(db)
    held: list[int] = []
    with pytest.raises(SagaAborted) as aborted, saga_scope(FileWAL("a.wal")):
        update(db["table"], KEY, {"price": "99.99", "meta": {"b": [1, 2]}, "note": "vip"}, credential_ref="pg_test")
        assert row(db)["price"] == 99.99 and row(db)["note"] == "vip"  # type: ignore[index]
        # The model thinks: no transaction of ours is open. (A connection the connector just closed
        # can linger in pg_stat_activity a moment, idle, while its server process exits.)
        held.append(db["admin"].execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                                        " AND xact_start IS NOT NULL", (db["app"],)).fetchone()[0])
        raise RuntimeError("a later step failed")
    assert aborted.value.report.clean and held == [0]
    assert row(db) == original  # numeric scale, jsonb, timestamptz and NULL all back exactly
    intent = next(r for r in read_records("a.wal") if r["type"] == "STEP_INTENT")
    assert intent["body"]["compensation"]["kwargs"]["before"] == {  # the snapshot: only the touched columns
        "meta": '{"a": 1.5}', "note": "null", "price": "12.50"}


def test_a_concurrent_writer_turns_the_undo_into_a_conflict_not_an_overwrite(db: dict[str, Any]) -> None:
    with pytest.raises(SagaAborted) as aborted, saga_scope(FileWAL("a.wal")):
        update(db["table"], KEY, {"price": "99.99"}, credential_ref="pg_test")
        db["admin"].execute(f"UPDATE {db['table']} SET name = 'alice' WHERE org = 1 AND id = 7")  # someone else
        raise RuntimeError("a later step failed")
    report = aborted.value.report
    assert not report.clean
    (failed,) = report.failed
    assert "ConflictError" in failed.detail and "someone else wrote the row after this saga did" in failed.detail
    assert row(db)["name"] == "alice" and row(db)["price"] == 99.99  # type: ignore[index]
    queue = Path("a.wal.recovery/escalations.jsonl").read_text()
    assert "compensation-failing" in queue  # handed to a human


def test_a_key_that_is_not_the_primary_key_is_refused_before_anything(db: dict[str, Any]) -> None:
    with saga_scope(FileWAL("a.wal")):
        with pytest.raises(ConfigurationError, match="not the primary key"):
            update(db["table"], {"id": 7}, {"price": 1}, credential_ref="pg_test")
        with pytest.raises(NotApplied, match="no row with key"):
            update(db["table"], {"org": 9, "id": 9}, {"price": 1}, credential_ref="pg_test")
    assert "STEP_INTENT" not in [r["type"] for r in read_records("a.wal")]


def test_a_write_guarded_by_a_stale_snapshot_does_nothing(db: dict[str, Any]) -> None:
    from agent_saga.connectors.postgres import _apply_update, _Row

    with pytest.raises(NotApplied, match="changed"):
        _apply_update(_Row(db["table"], KEY), {"price": 1}, "1", "pg_test")
    assert row(db)["price"] == 12.50  # type: ignore[index]


def test_insert_and_delete_are_undone(db: dict[str, Any]) -> None:
    original = row(db)
    with pytest.raises(SagaAborted) as aborted, saga_scope(FileWAL("a.wal")):
        insert(db["table"], {"org": 1, "id": 8, "name": "new", "price": 3}, key=["org", "id"], credential_ref="pg_test")
        delete(db["table"], KEY, credential_ref="pg_test")
        assert row(db) is None and row(db, 1, 8) is not None
        with pytest.raises(NotApplied, match="already exists"):
            insert(db["table"], {"org": 1, "id": 8}, key=["org", "id"], credential_ref="pg_test")
        raise RuntimeError("a later step failed")
    report = aborted.value.report
    assert report.clean and [o.tool for o in report.compensated] == ["postgres.delete", "postgres.insert"]
    assert row(db) == original and row(db, 1, 8) is None


def test_a_deleted_row_whose_key_was_taken_meanwhile_is_a_conflict(db: dict[str, Any]) -> None:
    with pytest.raises(SagaAborted) as aborted, saga_scope(FileWAL("a.wal")):
        delete(db["table"], KEY, credential_ref="pg_test")
        db["admin"].execute(f"INSERT INTO {db['table']} (org, id, name) VALUES (1, 7, 'squatter')")
        raise RuntimeError("a later step failed")
    assert "another row took this key" in aborted.value.report.failed[0].detail
    assert row(db)["name"] == "squatter"  # type: ignore[index]


def test_a_crash_mid_update_is_reverted_by_the_daemon_and_reconciles_clean(db: dict[str, Any], tmp_path: Path) -> None:
    log = tmp_path / "a.wal"
    original = row(db)
    wal = FileWAL(log)
    s = Saga(wal, name="dies")  # started, never ended: as a killed process leaves it
    s.start()
    use_saga(s)  # the connector finds the current saga, as inside a boundary
    try:
        update(db["table"], KEY, {"price": "50.00", "note": "x"}, credential_ref="pg_test")
    finally:
        use_saga(None)  # leave no saga behind for the tests that follow
    wal.barrier()
    lease_keeper().release(wal.path, s.saga_id)
    wal.close()
    lines = log.read_bytes().splitlines(keepends=True)  # the process died before its commit record
    log.write_bytes(b"".join(lines[: max(i for i, line in enumerate(lines) if b"STEP_INTENT" in line) + 1]))

    with RecoveryDaemon(log, clock=lambda: time.time() + 3600) as daemon:
        report = daemon.sweep()
    assert report.recovered == [s.saga_id] and not report.new_escalations, report.actions
    assert row(db) == original
    answered = next(r for r in read_records(log) if r["type"] == "RECONCILE_ANSWERED")
    assert answered["body"]["exists"] is True
    result = reconcile(log)
    assert result.clean and result.findings[0].observed == "reversed", result.format_text()
