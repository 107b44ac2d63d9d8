"""A handler that will not do what its record asks is escalated at once, never retried.

Recorded kwargs are written by the agent. When a handler finds them naming something its
reader does not trust (``CompensationRefused``), or they do not fit the handler at all (an
argument it does not take: the record, not the handler, would be choosing), asking again
gets the same answer: the daemon escalates the step as ``undo-refused`` and dead-letters the
saga on the first sweep, and later sweeps leave it alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from recovery_checks import chain_ok, read_log

from agent_saga import ActionSemantics, Compensation, CompensationRefused, FileWAL, compensator
from agent_saga.credentials import credential_ref, set_credential_resolver
from agent_saga.engine.saga import Saga
from agent_saga.recovery import RecoveryDaemon
from agent_saga.recovery.escalations import EscalationQueue
from agent_saga.recovery.lease import lease_keeper, recovery_dir

CALLS: list[dict[str, Any]] = []


@compensator("test.refusal.undo")
def undo(target: str, idempotency_key: str | None = None) -> None:
    if target.startswith("/"):
        raise CompensationRefused(f"{target!r} is a path, not a target this reader knows")
    CALLS.append({"target": target})


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    CALLS.clear()
    set_credential_resolver(lambda name: "s3cret-value")
    yield
    set_credential_resolver(None)
    CALLS.clear()


def orphan(path: Path, kwargs: dict[str, Any]) -> None:
    """One committed COMPENSABLE step whose undo the agent recorded, in a saga left open."""
    wal = FileWAL(path)
    saga = Saga(wal, name="agent")
    saga.start()
    saga.execute_sync(tool="t.charge", semantics=ActionSemantics.COMPENSABLE, forward=lambda: {"id": "x1"},
                      compensate=Compensation(handler="test.refusal.undo", kwargs=kwargs))
    wal.barrier()
    lease_keeper().release(wal.path, saga.saga_id)
    wal.close()


def sweep(path: Path) -> Any:
    with RecoveryDaemon(path, clock=lambda: time.time() + 3600, lease_grace=0, retry_delay=0) as d:
        return d.sweep()


def test_an_undo_that_fits_and_names_its_credential_runs(wal_path: Path) -> None:
    orphan(wal_path, {"target": credential_ref("ok")})
    assert sweep(wal_path).compensated == 1 and CALLS == [{"target": "s3cret-value"}]


@pytest.mark.parametrize("kwargs", [
    pytest.param({"target": "/etc/shadow"}, id="the-handler-refuses"),
    pytest.param({"target": "a", "url": "http://127.0.0.1:1/"}, id="an-argument-it-does-not-take"),
    pytest.param({"target": "a", "command": ["/bin/sh", "-c", "true"]}, id="a-command-beside-the-data"),
])
def test_a_refused_undo_is_escalated_and_dead_lettered_on_the_first_sweep(wal_path: Path, kwargs: Any) -> None:
    orphan(wal_path, kwargs)
    first = sweep(wal_path)
    assert CALLS == []  # nothing the record asked for was done
    types = [r["type"] for r in read_log(wal_path)]
    assert types.count("COMPENSATION_STARTED") == 1 and "SAGA_DEAD_LETTERED" in types and "SAGA_ROLLED_BACK" not in types
    (escalated,) = [r["body"] for r in read_log(wal_path) if r["type"] == "ESCALATED"]
    assert escalated["kind"] == "undo-refused"
    assert first.dead_lettered and first.needs_attention
    (pending,) = EscalationQueue(recovery_dir(wal_path) / "escalations.jsonl").pending()
    assert pending.kind == "undo-refused"

    second = sweep(wal_path)  # no retry: the answer would be the same
    assert [r["type"] for r in read_log(wal_path)].count("COMPENSATION_STARTED") == 1
    assert second.skipped and CALLS == []
    assert chain_ok(wal_path)


def test_a_credential_reference_that_is_not_a_name_is_refused_before_the_resolver(wal_path: Path) -> None:
    # A reference inside the kwargs is resolved by the daemon itself: "../x" or a URL is never
    # handed to a resolver that may build a path or a key out of it.
    asked: list[str] = []
    set_credential_resolver(lambda name: asked.append(name) or "v")
    orphan(wal_path, {"target": {"$credential_ref": "../../x"}})  # what credential_ref() itself refuses to make
    sweep(wal_path)
    assert asked == [] and CALLS == []
    (escalated,) = [r["body"] for r in read_log(wal_path) if r["type"] == "ESCALATED"]
    assert escalated["kind"] == "undo-refused" and "not a credential's name" in escalated["detail"]
