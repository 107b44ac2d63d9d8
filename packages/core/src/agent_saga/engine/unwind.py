"""Unwinding a saga: its steps newest-first, each undone, kept, orphaned or left unresolved.

Each undo's COMPENSATION_STARTED is made durable (with everything queued before it, so
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

import concurrent.futures
import logging
from typing import TYPE_CHECKING, Any

from agent_saga.credentials import resolve_credentials, scrub
from agent_saga.engine.error_text import describe_error
from agent_saga.engine.invoke import Barrier, Call, Protocol, Sleep, accepts_idempotency_key, still_running
from agent_saga.engine.observe import RollbackEvent, Wrappers, interceptors
from agent_saga.engine.report import RollbackReport, StepOutcome
from agent_saga.engine.state import SagaStatus, Step
from agent_saga.engine.undo import as_undo_of, halt_on_undo, undo_name
from agent_saga.errors import SagaClosed
from agent_saga.log.records import RecordType as R
from agent_saga.registry import resolve
from agent_saga.semantics import ActionSemantics, Outcome, StepState

if TYPE_CHECKING:
    from agent_saga.engine.saga import Saga

__all__ = ["unwind"]

log = logging.getLogger(__name__)

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


def _follow_undo(
    saga: Saga, step: Step, attempt: int, secrets: list[str], call: concurrent.futures.Future[Any] | None,
) -> None:
    """Record the outcome of an undo whose task was cancelled while its thread ran on, when it ends.

    A thread cannot be stopped: without this its COMPENSATION_STARTED would stay without an
    outcome, and the recovery daemon would run the undo again. As ``Saga._straggled`` follows a
    forward call. Runs on the undo's thread: it never raises.
    """
    if call is None:
        return  # an async undo, cancelled with its task: it did not finish, and recovery runs it
    key = step.compensation.idempotency_key if step.compensation is not None else None

    def landed(done: concurrent.futures.Future[Any]) -> None:
        try:
            error = None if done.cancelled() else done.exception()
            if error is None and not done.cancelled():
                saga._append(R.STEP_COMPENSATED, {"key": key, "attempts": attempt, "late": True}, step.index)
            else:
                detail = scrub(describe_error(error) if error is not None else "cancelled before it ran", secrets)
                saga._append(R.COMPENSATION_FAILED, {"key": key, "attempts": attempt, "error": detail, "late": True},
                             step.index)
        except Exception:  # on a finished undo's thread: logged, never raised
            log.exception("saga %s: could not record the undo of step %d after its task was cancelled",
                          saga.saga_id, step.index)

    call.add_done_callback(landed)


def _compensate(saga: Saga, step: Step) -> Protocol[StepOutcome]:
    comp = step.compensation
    assert comp is not None
    observed = _observe_rollback(saga, step)
    ticket = saga._append(R.COMPENSATION_STARTED, {"key": comp.idempotency_key, "handler": comp.handler},
                          step.index)
    if saga.wal.durable:
        # No undo starts before every record ahead of it is on disk: the previous undo's
        # outcome (and this one's intent, in the same flush). A crash then leaves at most
        # this one undo unrecorded, the only one the daemon repeats (same key).
        yield Barrier(saga.wal, ticket)
    policy = saga.compensation_retry
    attempt = 0
    secrets: list[str] = []
    while True:
        attempt += 1
        # Undos run under a halt unless it names them: asked before every attempt.
        stop = halt_on_undo(saga.gate, saga.saga_id, step.index, undo_name(comp), step.semantics, saga.tags)
        if stop is not None:
            attempt -= 1  # the attempts that ran
            detail = f"undo not run (attempt {attempt + 1} stopped by the gate): {stop.reason}"
            saga._append(R.STEP_UNRESOLVED, {
                "op": step.operation_id, "key": comp.idempotency_key, "detail": detail, "rule": stop.rule,
            }, step.index)
            outcome = Outcome.UNRESOLVED
            break
        try:
            # Resolved per attempt: a handler missing now is a failed attempt, not a crash.
            fn = comp.fn if comp.fn is not None else resolve(comp.handler or "")
            # Credential references become secrets only here, for this call.
            kwargs, secrets = resolve_credentials(comp.kwargs)
            if accepts_idempotency_key(fn):
                kwargs["idempotency_key"] = comp.idempotency_key
            yield Call(as_undo_of(saga.saga_id, fn), kwargs)
        except BaseException as err:  # every failure of an undo is recorded, none hidden
            if not isinstance(err, Exception):  # cancelled (a loop shutting down): its thread may run on
                _follow_undo(saga, step, attempt, secrets, still_running(err))
                raise
            if policy.should_retry(err, attempt):
                yield Sleep(policy.delay(attempt))
                continue
            detail = scrub(describe_error(err), secrets)
            saga._append(R.COMPENSATION_FAILED, {
                "key": comp.idempotency_key, "attempts": attempt, "error": detail,
            }, step.index)
            outcome = Outcome.FAILED
            break
        saga._append(R.STEP_COMPENSATED, {"key": comp.idempotency_key, "attempts": attempt}, step.index)
        outcome, detail = Outcome.COMPENSATED, ""
        break
    result = StepOutcome(
        step.index, step.tool, step.semantics, step.state, outcome, comp.label, attempt,
        comp.idempotency_key, detail, step.via_fallback,
    )
    if observed is not None:
        observed.end(result)
    return result
