"""One executor for every undo (issue 41 part 3): the agent's rollback and the recovery daemon run
their undos through ``engine.undo_run``, so what one checked and the other did not is gone.

Each test pins a difference the two callers had, on the side that had it wrong: the daemon's
undo ran before its intent was on disk, broke inside a running event loop, and broke the
sweep on error text that is not UTF-8, and showed the interceptors none of the steps it settled; the rollback logged an undo as started that a halt never let run, ran a
wrapper with kwargs its function does not take (three times), and retried an undo whose system
said "done" without a proof. Real parts: FileWALs, the host's kill switch under the test's
AGENT_SAGA_HOST_ROOT, registered handlers, the daemon sweeping the log the saga left open.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from recovery_checks import read_log

from agent_saga import ActionSemantics, Compensation, FileWAL, compensator
from agent_saga.context import default_gate
from agent_saga.engine.observe import Interceptor, RollbackEvent, add_interceptor, remove_interceptor
from agent_saga.engine.report import StepOutcome
from agent_saga.engine.saga import Saga
from agent_saga.errors import CompensationUnproven
from agent_saga.gate import default_switch
from agent_saga.log.file import read_records
from agent_saga.recovery import RecoveryDaemon, stores
from agent_saga.recovery.fold import fold
from agent_saga.recovery.lease import lease_keeper

CALLS: list[Any] = []
SEEN_ON_DISK: list[list[str]] = []
WAL_PATH: list[Path] = []


@compensator("test.executor.refund")
def refund(charge: str, idempotency_key: str = "") -> None:
    # What the log held on disk when the undo ran: its own intent must be there.
    SEEN_ON_DISK.append([r["type"] for r in read_records(WAL_PATH[0])])
    CALLS.append((charge, idempotency_key))


@compensator("test.executor.refund_async")
async def refund_async(charge: str, idempotency_key: str = "") -> None:
    CALLS.append((charge, idempotency_key))


@compensator("test.executor.garbled")
def garbled(charge: str) -> None:
    # Bytes a provider's error decoded with surrogateescape: not UTF-8, so not JSON the log can hold as is.
    raise ValueError(b"refund of \xff failed".decode("utf-8", "surrogateescape") + f" for {charge}")


@pytest.fixture(autouse=True)
def _clean(wal_path: Path) -> Iterator[None]:
    CALLS.clear()
    SEEN_ON_DISK.clear()
    WAL_PATH[:] = [wal_path]
    yield
    CALLS.clear()


def orphan(path: Path, handler: str) -> str:
    """One committed COMPENSABLE step with a recorded undo, in a saga its process left open."""
    wal = FileWAL(path)
    saga = Saga(wal, name="agent")
    saga.start()
    saga.execute_sync(tool="t.charge", semantics=ActionSemantics.COMPENSABLE, forward=lambda: {"id": "ch-1"},
                      compensate=Compensation(handler=handler, kwargs={"charge": "ch-1"}))
    wal.barrier()
    lease_keeper().release(wal.path, saga.saga_id)
    wal.close()
    return saga.saga_id


def sweep(path: Path) -> Any:
    with RecoveryDaemon(path, clock=lambda: time.time() + 3600, lease_grace=0, retry_delay=0) as daemon:
        return daemon.sweep()


# -- the daemon's side ---------------------------------------------------------------------


def test_the_daemon_calls_an_undo_only_once_its_intent_is_on_disk(wal_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    orphan(wal_path, "test.executor.refund")
    # The daemon's log holds what nobody waits for in memory for an hour: only a barrier
    # puts COMPENSATION_STARTED on disk before the refund reads the file.
    monkeypatch.setattr(stores, "FileWAL", functools.partial(FileWAL, linger=3600.0))
    report = sweep(wal_path)
    (started,) = [r["body"] for r in read_log(wal_path) if r["type"] == "COMPENSATION_STARTED"]
    assert report.compensated == 1 and [("ch-1", started["key"])] == CALLS  # with its recorded key
    (on_disk,) = SEEN_ON_DISK
    assert on_disk[-3:] == ["RECOVERY_CLAIMED", "ROLLBACK_STARTED", "COMPENSATION_STARTED"]


async def test_the_daemon_runs_an_async_undo_when_swept_inside_an_event_loop(wal_path: Path) -> None:
    saga_id = orphan(wal_path, "test.executor.refund_async")
    report = sweep(wal_path)  # a sync sweep called from a coroutine: this thread runs a loop
    assert report.recovered == [saga_id] and report.compensated == 1
    assert [c[0] for c in CALLS] == ["ch-1"]
    assert "COMPENSATION_FAILED" not in [r["type"] for r in read_log(wal_path)]


def test_the_daemon_records_a_failed_undo_whose_error_text_is_not_utf8(wal_path: Path) -> None:
    saga_id = orphan(wal_path, "test.executor.garbled")
    report = sweep(wal_path)  # the sweep does not break on the text: the failure is recorded, the saga held
    assert report.held == [saga_id] and report.compensated == 0
    (failed,) = [r["body"] for r in read_log(wal_path) if r["type"] == "COMPENSATION_FAILED"]
    assert failed["error"].startswith("ValueError: refund of ") and failed["error"].endswith(" failed for ch-1")


class Seen(Interceptor):
    """Every rollback step the interceptors are shown, with how it ended."""

    def __init__(self) -> None:
        self.steps: list[tuple[RollbackEvent, StepOutcome]] = []

    def rollback_step(self, event: RollbackEvent) -> Generator[None, StepOutcome, None]:
        end = yield
        self.steps.append((event, end))


def test_the_daemon_shows_the_interceptors_each_step_it_settles(wal_path: Path) -> None:
    undone = orphan(wal_path, "test.executor.refund")
    failing = orphan(wal_path, "test.executor.garbled")
    seen = Seen()
    add_interceptor(seen)
    try:
        report = sweep(wal_path)
    finally:
        remove_interceptor(seen)
    assert report.recovered == [undone] and report.held == [failing]
    shown = {event.saga_id: (event, end) for event, end in seen.steps}
    assert set(shown) == {undone, failing} and len(seen.steps) == 2  # as the rollback shows its own, once each
    event, end = shown[undone]
    assert (event.step, event.tool, event.handler) == (1, "t.charge", "test.executor.refund")
    assert (end.outcome.value, end.attempts, end.idempotency_key) == ("compensated", 1, event.idempotency_key)
    event, end = shown[failing]
    assert (end.outcome.value, end.attempts) == ("failed", 1) and end.detail.startswith("ValueError: refund of ")


# -- the rollback's side ------------------------------------------------------------------


def rolled_back(path: Path, comp: Compensation) -> tuple[Any, list[dict[str, Any]], str]:
    """A saga (under the process's default gate) with one committed step and ``comp`` as its undo, rolled back."""
    wal = FileWAL(path)
    saga = Saga(wal, name="agent", gate=default_gate())
    saga.start()
    saga.execute_sync(tool="t.charge", semantics=ActionSemantics.COMPENSABLE, forward=lambda: {"id": "ch-1"},
                      compensate=comp)
    report = saga.rollback_sync(RuntimeError("the agent failed"))
    wal.close()
    return report, read_log(path), saga.saga_id


@pytest.mark.usefixtures("fresh_gate_globals")
def test_a_halted_undo_is_not_logged_as_started(wal_path: Path) -> None:
    default_switch().halt("tool:test.executor.refund", reason="incident 60", by="soc@corp")
    report, records, saga_id = rolled_back(wal_path, Compensation(handler="test.executor.refund",
                                                                  kwargs={"charge": "ch-1"}))
    assert CALLS == [] and not report.clean
    types = [r["type"] for r in records]
    assert "COMPENSATION_STARTED" not in types  # no undo started: the halt stopped it first
    (unresolved,) = [r["body"] for r in records if r["type"] == "STEP_UNRESOLVED"]
    assert unresolved["rule"] == "kill-switch" and "incident 60" in unresolved["detail"]
    # What the reconcile pass reads: no undo of this step ran.
    (step,) = fold(records)[saga_id].steps.values()
    assert step.compensation_started == 0


def test_the_rollback_refuses_kwargs_the_undo_does_not_take_before_any_wrapper_runs(wal_path: Path) -> None:
    wrapper_ran: list[dict[str, Any]] = []

    def audited(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(**kwargs: Any) -> Any:
            wrapper_ran.append(kwargs)  # an audit line written, a connection opened: before the call
            return fn(**kwargs)
        return wrapper

    @audited
    def cancel(charge: str) -> None:
        CALLS.append(charge)

    report, records, _ = rolled_back(wal_path, Compensation(fn=cancel, kwargs={"charge": "ch-1", "amount": 5}))
    (outcome,) = report.steps
    assert wrapper_ran == [] and CALLS == []
    assert outcome.attempts == 1  # refused, not retried: the same kwargs never fit
    assert "do not fit" in outcome.detail and "amount" in outcome.detail
    (failed,) = [r["body"] for r in records if r["type"] == "COMPENSATION_FAILED"]
    assert failed["error"].startswith("CompensationRefused")


def test_the_rollback_does_not_retry_an_undo_reported_done_without_proof(wal_path: Path) -> None:
    def cancel(charge: str) -> None:
        CALLS.append(charge)
        raise CompensationUnproven("the remote saga said compensated, with no signed receipt")

    report, _records, _ = rolled_back(wal_path, Compensation(fn=cancel, kwargs={"charge": "ch-1"}))
    (outcome,) = report.steps
    assert CALLS == ["ch-1"] and outcome.attempts == 1 and outcome.outcome.value == "failed"
