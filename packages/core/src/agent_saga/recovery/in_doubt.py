"""Asking the outside system about a step whose process died mid-call.

A step with a durable intent and no outcome (the crash window: the provider may
have taken the charge, the commit record never reached the disk) is UNKNOWN to the
log. If a ``@reconciler`` is registered for its tool, one question settles it:

* it landed: the daemon records the step as committed (``reconciled``) with the undo
  built from the provider's result through the intent's declarative recipe
  (``@inverse_of``, ``delete_by``, a policy entry), or the undo recorded before the
  call; a closure factory left no recipe, so the step is escalated with the facts;
* it certainly did not: ``STEP_NOT_APPLIED``, nothing to undo;
* nobody can tell: the daemon goes on as without a reconciler, the answer attached
  to the escalation.

:func:`ask` is also what the ``agent-saga reconcile`` pass uses for every question.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any

from agent_saga.credentials import resolve_credentials, scrub
from agent_saga.engine.invoke import Call, drive_sync
from agent_saga.engine.saga import describe
from agent_saga.engine.undo_run import Write
from agent_saga.errors import CompensationError
from agent_saga.ids import operation_id
from agent_saga.log.records import RecordType as R
from agent_saga.log.results import DURABLE_RESULT_BYTES, logged_result
from agent_saga.recovery.fold import StepView
from agent_saga.registry import from_recipe, reconciler_for
from agent_saga.semantics import Observation

__all__ = ["ASK_TIMEOUT", "ask", "settle_in_flight", "undo_from"]

#: Seconds one question to a reconciler may take before it counts as "could not tell".
ASK_TIMEOUT = 10.0

def _one(call: Call) -> Generator[Call, Any, Any]:
    return (yield call)


def ask(reconciler: Callable[..., Any], kwargs: Mapping[str, Any], timeout: float = ASK_TIMEOUT) -> Observation:
    """Call ``reconciler`` (sync or async) under ``timeout``; never raises.

    Credential references in ``kwargs`` are resolved for this call only. A
    reconciler that raises, times out, or returns something other than an
    :class:`Observation` could not tell: the answer is ``Observation(None, ...)``
    with why in ``detail`` (resolved secrets scrubbed from it).
    """
    secrets: list[str] = []
    try:
        resolved, secrets = resolve_credentials(kwargs)
        value = drive_sync(_one(Call(reconciler, resolved, timeout)))
        if not isinstance(value, Observation):
            raise TypeError(f"a reconciler returns an Observation, got {type(value).__name__}")
        return value
    except Exception as err:  # noqa: BLE001 - a reconciler that fails could not tell
        text = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        return Observation(None, detail=scrub(f"the reconciler failed: {text}", secrets))


def _facts(seen: Observation) -> str:
    """One line saying what a reconciler answered (for records and escalations)."""
    verdict = {True: "it landed", False: "it did not land", None: "it could not tell"}[seen.exists]
    extra = [seen.detail] if seen.detail else []
    if seen.amount is not None:
        extra.append(f"amount={seen.amount}")
    return f"the reconciler says {verdict}" + (f" ({'; '.join(extra)})" if extra else "")


def settle_in_flight(
    saga_id: str, step: StepView, write: Write, *, dry_run: bool = False, timeout: float = ASK_TIMEOUT,
    keep_result: bool = False,
) -> bool:
    """Ask the tool's reconciler what became of an in-flight or UNKNOWN ``step``.

    Returns True when the effect certainly did not land (nothing to undo). When it
    landed, ``step`` becomes committed with the undo its recipe builds from the
    observed result (or the one recorded before the call); when nobody can tell,
    ``step.facts`` says so and the caller goes on as without a reconciler. Records
    (``RECONCILE_ASKED``/``_ANSWERED``, then ``STEP_COMMITTED`` or ``STEP_NOT_APPLIED``)
    go through ``write``. No reconciler registered, or a dry run (which changes nothing,
    ``step`` included): False, nothing asked. ``keep_result``: a durable run's step, whose commit
    records the observed result as its own would have (a resume serves it from there).
    """
    reconciler = reconciler_for(step.tool or "")
    if dry_run or reconciler is None or step.committed or step.not_applied or step.asked_in_recovery:
        return False  # asked once by a daemon: a held saga's later sweeps add nothing to the log
    op = step.op or operation_id(saga_id, step.index, step.tool or "", "forward")

    write(R.RECONCILE_ASKED, {"op": op, "attempt": 1, "about": "forward"}, step.index)
    seen = ask(reconciler, {**(step.args or {}), "idempotency_key": op}, timeout)
    write(R.RECONCILE_ANSWERED, {
        "op": op, "attempt": 1, "exists": seen.exists, "detail": seen.detail, "amount": seen.amount,
    }, step.index)
    step.asked_in_recovery = True
    step.facts = _facts(seen)
    if seen.exists is False:
        write(R.STEP_NOT_APPLIED, {"op": op, "error": f"recovery: {step.facts}", "reconciled": False}, step.index)
        step.not_applied = True
        return True
    if seen.exists is True:
        comp, problem = undo_from(saga_id, step, seen.result)
        body: dict[str, Any] = {"op": op, "compensation": comp, "reconciled": True}
        if problem:
            body["problem"] = problem
        if keep_result:
            body["result"] = step.result = logged_result(seen.result, "value", (), DURABLE_RESULT_BYTES)[1]
            step.has_result = True
        write(R.STEP_COMMITTED, body, step.index)
        step.committed, step.committed_compensation, step.problem = True, comp, problem
    return False


def undo_from(saga_id: str, step: StepView, result: Any) -> tuple[dict[str, Any] | None, str]:
    """The undo of a step that landed, as the log describes one, or why there is none."""
    key = operation_id(saga_id, step.index, step.tool or "", "compensate")
    if step.recipe is not None:
        try:
            return describe(from_recipe(step.recipe, result).with_key(key)), ""
        except (CompensationError, KeyError) as err:
            why = str(err.args[0]) if isinstance(err, KeyError) else str(err)
            return None, f"{step.facts}, but its undo could not be built here: {why}"
    known = step.intent_compensation or step.unknown_compensation
    if known is not None:
        return known, ""
    return None, (
        f"{step.facts}, but its undo was a closure over the result, which cannot cross the process "
        "boundary; declare it by name (@inverse_of(forward, maps=...), delete_by, or call_with) so "
        "the daemon can build it"
    )
