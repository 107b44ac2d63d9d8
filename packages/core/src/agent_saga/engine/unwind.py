"""Unwinding a saga: its steps newest-first, each undone, kept, orphaned or left unresolved.

Each undo runs through ``engine.undo_run``, the executor the recovery daemon runs its undos
through too: its COMPENSATION_STARTED is made durable (with everything queued before it, so
the previous undo's outcome, in one flush) before the undo is called, and the end record
is waited for: a crash mid-rollback leaves at most the one undo in flight without its
outcome on disk, the only one the recovery daemon calls again (same idempotency key).

Siblings in flight (several tool calls at once): the rollback fences the saga first (no step
starts its effect after ROLLBACK_STARTED), then waits up to the saga's ``rollback_grace`` for
the steps already running (``engine.inflight``), so that one which commits meanwhile is undone
in its place, newest first. One still running after the grace is recorded STEP_UNRESOLVED with
``in_flight`` and escalated, so the report is not clean; when it lands, ``settle_late`` settles
it at once, in the thread or task that ran it: a commit is undone (its undo is known now), an
effect that cannot be undone is escalated. Nothing that lands late is dropped, and the recovery
daemon treats a rolled-back saga whose late commit is not yet settled as open (a crash between
the two).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_saga.engine.error_text import describe_error
from agent_saga.engine.invoke import Protocol
from agent_saga.engine.observe import RollbackEvent, Wrappers, interceptors
from agent_saga.engine.report import RollbackReport, StepOutcome
from agent_saga.engine.state import SagaStatus, Step
from agent_saga.engine.undo import undo_name
from agent_saga.engine.undo_run import UndoJob, run_undo
from agent_saga.errors import SagaClosed
from agent_saga.log.records import RecordType as R
from agent_saga.semantics import ActionSemantics, Outcome, StepState

if TYPE_CHECKING:
    from agent_saga.engine.saga import Saga

__all__ = ["unwind"]

_IRREVERSIBLE = ActionSemantics.IRREVERSIBLE
_REVERSIBLE = ActionSemantics.REVERSIBLE


_LANDED = (StepState.COMMITTED, StepState.UNKNOWN)


def unwind(saga: Saga, cause: BaseException) -> Protocol[RollbackReport]:
    """Roll ``saga`` back, newest step first: the protocol its rollback and rollback_sync drive.

    A cancellation or Ctrl-C (a ``cause`` that is no ``Exception``) waits for no sibling: the
    caller wants out now; the steps still running are left, and settled as they land (or by
    the recovery daemon, should the process end first).
    """
    with saga._lock:
        if saga.status is not SagaStatus.OPEN:
            raise SagaClosed(f"saga {saga.saga_id} is already {saga.status.value.lower()}")
        saga.status = SagaStatus.ROLLING_BACK  # the fence: no step starts its effect from now on
        unprotected = tuple(saga._unprotected)
    cause_text = describe_error(cause)
    outcomes: list[StepOutcome] = []
    halted_at: int | None = None
    stack: list[Step] = []
    try:
        saga._append(R.ROLLBACK_STARTED, {"cause": cause_text})
        out = yield from saga._await_steps(saga.rollback_grace if isinstance(cause, Exception) else 0.0)
        left = _leave(saga, out)
        with saga._lock:
            # Steps that never ran (refused, fenced, NOT_APPLIED) have nothing to undo.
            stack = [s for s in reversed(saga._steps) if s.left or s.state in _LANDED]
        for step in stack:
            if step.index in left:
                outcomes.append(left[step.index])
                continue
            with saga._lock:
                step.settling = True  # a call of its that lands from now on is not ours to settle
            if halted_at is not None:
                outcomes.append(_settle(saga,
                    step, Outcome.UNRESOLVED, R.STEP_UNRESOLVED,
                    f"not attempted: rollback halted at step {halted_at}",
                ))
                continue
            if step.compensation is not None:
                outcome = yield from _compensate(saga, step)
                outcomes.append(outcome)
                # An undo that failed, or that a halt naming it stopped, halts the unwind.
                if outcome.outcome is not Outcome.COMPENSATED and saga.halt_on_compensation_failure:
                    halted_at = step.index
                    saga._halted_at = halted_at  # a step left in flight below it is not undone when it lands
                continue
            outcomes.append(_settle_without_undo(saga, step))
        report = RollbackReport(
            saga.saga_id, cause_text, tuple(outcomes), halted_at is not None, unprotected=unprotected
        )
        saga.report = report
        yield from saga._end(R.SAGA_ROLLED_BACK, {
            "clean": report.clean, "halted": report.halted,
            "outcomes": {o.value: len(report.with_outcome(o)) for o in Outcome},
            **({"unprotected": list(unprotected)} if unprotected else {}),
        }, SagaStatus.ROLLED_BACK)
    except BaseException as err:
        report = _abandon(saga, cause_text, outcomes, stack, halted_at, unprotected, err)
        if not isinstance(err, Exception):
            raise  # cancellation: the caller's task is being stopped; the daemon finishes
    return report


def _abandon(
    saga: Saga,
    cause_text: str,
    outcomes: list[StepOutcome],
    stack: list[Step],
    halted_at: int | None,
    unprotected: tuple[str, ...],
    err: BaseException,
) -> RollbackReport:
    """The unwind could not finish here: report what happened and hand the saga over.

    No record is written (the log may be what broke); the lease stops being renewed
    at once, so a recovery daemon takes the saga over once it expires.
    """
    why = describe_error(err)
    done = {o.step for o in outcomes}
    for step in stack:
        if step.index not in done:
            outcomes.append(StepOutcome(
                step.index, step.tool, step.semantics, step.state, Outcome.UNRESOLVED,
                step.compensation.label if step.compensation else None, 0,
                step.compensation.idempotency_key if step.compensation else None,
                f"rollback interrupted before this step was settled: {why}", step.via_fallback,
            ))
    report = RollbackReport(
        saga.saga_id, cause_text, tuple(outcomes), halted_at is not None, why, unprotected
    )
    saga.report = report
    saga._hand_over(report)
    return report


def _leave(saga: Saga, out: list[Step]) -> dict[int, StepOutcome]:
    """Mark the steps still in flight after the grace as left, and record each (STEP_UNRESOLVED, ``in_flight``).

    Recorded before any other undo runs, so that whatever a left step writes when it lands
    comes after its record here. Its lease is kept until every left step has landed.
    """
    with saga._lock:
        out = [s for s in out if s.flying]  # one may have landed since the wait ended
        for step in out:
            step.left = True
        saga._left = len(out)
    detail = (
        f"still in flight when the rollback's grace of {saga.rollback_grace:g}s ran out: undone at once if it "
        "commits, escalated if it cannot be"
    )
    return {
        step.index: _settle(saga, step, Outcome.UNRESOLVED, R.STEP_UNRESOLVED, detail, in_flight=True)
        for step in sorted(out, key=lambda s: s.index, reverse=True)
    }


def settle_late(saga: Saga, step: Step) -> Protocol[None]:
    """A step the rollback left in flight has landed (its outcome is in the log): settle it now.

    Runs in the thread or task that ran the step, as the rollback would have settled it: a
    commit (or an UNKNOWN outcome with an undo known before the call) is undone at once, out of
    the rollback's order (it raced it); without an undo it is orphaned or unresolved, which the
    lifecycle hooks escalate; a call that never ran needs nothing. Not undone when it is older
    than the step whose failed undo halted the rollback (older steps wait for that one), nor when
    the rollback was abandoned (the recovery daemon owns the saga then).
    """
    if saga.status is SagaStatus.ABANDONED:
        return
    with saga._lock:
        step.settling = True
    outcome: StepOutcome | None = None
    if step.state in _LANDED:
        if saga._halted_at is not None and step.index < saga._halted_at:
            outcome = _settle(saga, step, Outcome.UNRESOLVED, R.STEP_UNRESOLVED,
                              f"landed after the rollback halted at step {saga._halted_at}: not attempted")
        elif step.compensation is not None:
            outcome = yield from _compensate(saga, step)
        else:
            outcome = _settle_without_undo(saga, step)
    saga.tell_late(step.index, outcome)


def _settle_without_undo(saga: Saga, step: Step) -> StepOutcome:
    if step.semantics is _REVERSIBLE and not step.undo_declared:
        return _settle(saga, step, Outcome.KEPT, R.STEP_KEPT, "REVERSIBLE with nothing to undo")
    if step.state is StepState.COMMITTED:
        why = step.problem or (
            "IRREVERSIBLE: no undo exists" if step.semantics is _IRREVERSIBLE else "no undo was given"
        )
        return _settle(saga, step, Outcome.ORPHANED, R.STEP_ORPHANED, why)
    return _settle(saga,
        step, Outcome.UNRESOLVED, R.STEP_UNRESOLVED,
        "outcome unknown and no undo was known before the call: reconcile or escalate",
    )


def _settle(
    saga: Saga, step: Step, outcome: Outcome, rtype: R, detail: str, *, in_flight: bool = False
) -> StepOutcome:
    observed = _observe_rollback(saga, step)
    body: dict[str, Any] = {"op": step.operation_id, "detail": detail}
    if in_flight:
        body["in_flight"] = True  # not a settlement: its outcome is still to come (recovery.fold)
    saga._append(rtype, body, step.index)
    result = StepOutcome(
        step.index, step.tool, step.semantics, StepState.PENDING if in_flight else step.state, outcome,
        step.compensation.label if step.compensation else None, 0,
        step.compensation.idempotency_key if step.compensation else None,
        detail, step.via_fallback,
    )
    if observed is not None:
        observed.end(result)
    return result


def _observe_rollback(saga: Saga, step: Step) -> Wrappers | None:
    if not interceptors():
        return None
    comp = step.compensation
    return Wrappers.start("rollback_step", RollbackEvent(
        saga.saga_id, step.index, step.tool, step.semantics,
        comp.label if comp else None, comp.idempotency_key if comp else None,
        comp.handler if comp else None,
    ))


def _compensate(saga: Saga, step: Step) -> Protocol[StepOutcome]:
    comp = step.compensation
    assert comp is not None
    observed = _observe_rollback(saga, step)
    assert comp.idempotency_key is not None  # every undo the engine builds carries its key (undo.normalize)
    job = UndoJob(saga.saga_id, step.index, step.semantics, undo_name(comp), comp.handler, comp.fn, comp.kwargs,
                  comp.idempotency_key, saga.tags)
    end = yield from run_undo(job, gate=saga.gate, write=saga._append, wal=saga.wal, retry=saga.compensation_retry)
    if end.halt is not None:
        # The rollback goes on without it (its report is not clean): the step stays unresolved.
        saga._append(R.STEP_UNRESOLVED, {
            "op": step.operation_id, "key": comp.idempotency_key, "detail": end.detail, "rule": end.halt.rule,
        }, step.index)
    result = StepOutcome(
        step.index, step.tool, step.semantics, step.state, end.outcome, comp.label, end.attempts,
        comp.idempotency_key, end.detail, step.via_fallback,
    )
    if observed is not None:
        observed.end(result)
    return result
