"""Running one undo: the single executor behind the in-process rollback and the recovery daemon.

Both ask the same questions in the same order, and write the same records: before every
attempt, whether a halt names the undo (``engine.undo.halt_on_undo``); once, before the first
attempt, ``COMPENSATION_STARTED``, made durable before the undo is called (a crash then leaves
at most this one undo without its outcome on disk, the only one recovery calls again, with the
same key); then, per attempt, the handler (its function, else the one registered under its
name, looked up per attempt), the kwargs checked against its signature (the record, not the
handler, would decide what runs), credential references resolved for this call only, the
idempotency key passed when the handler names one, the call as an undo of its saga; at the
end ``STEP_COMPENSATED`` or ``COMPENSATION_FAILED``, the error text scrubbed of the secrets
resolved for it.

What differs between the callers is a parameter, each said where it is passed:

* ``retry``: the rollback retries within the call (``SagaOptions.compensation_retry``), the
  daemon makes one attempt per sweep (its ledger counts attempts across sweeps and daemons);
* ``attempts_before``: the attempts earlier sweeps made (the daemon's ledger), so that the
  records count every attempt of the undo;
* ``journal``: the daemon's ledger, written before each attempt and after its outcome (fsync'd,
  shared by every daemon: a success it knows is never repeated, even if its log record was lost);
  the rollback has none (the saga's lease is its owner's, and no other process undoes it);
* what a halt does is the caller's: the executor returns, saying which halt stopped it, and
  writes nothing for it (the rollback records the step unresolved and ends; the daemon holds
  the saga and escalates it, to run the undo at the first sweep after the halt is lifted).
"""

from __future__ import annotations

import concurrent.futures
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import CodeType
from typing import Any
from typing import Protocol as Interface

from agent_saga.credentials import resolve_credentials, scrub
from agent_saga.engine.error_text import describe_error
from agent_saga.engine.invoke import Barrier, Call, Protocol, Sleep, accepts_idempotency_key, still_running
from agent_saga.engine.retry import RetryPolicy
from agent_saga.engine.undo import as_undo_of, halt_on_undo
from agent_saga.errors import CompensationRefused, StepRefused
from agent_saga.log.base import WAL
from agent_saga.log.records import RecordType as R
from agent_saga.registry import resolve
from agent_saga.semantics import ActionSemantics, Outcome

__all__ = ["Journal", "UndoEnd", "UndoJob", "Write", "run_undo"]

log = logging.getLogger(__name__)

#: Appends one record of the undo's step (type, body, step index) and returns its ticket, if any.
Write = Callable[[R, dict[str, Any], int | None], int | None]


@dataclass(frozen=True, slots=True)
class UndoJob:
    """One undo to run: whose saga, which step, and what (``fn`` in process, else ``handler`` by name)."""

    saga_id: str
    step: int
    semantics: ActionSemantics
    name: str  # what a halt names it by (engine.undo.undo_name)
    handler: str | None
    fn: Callable[..., Any] | None
    kwargs: Mapping[str, Any]
    key: str
    tags: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class UndoEnd:
    """How the undo ended: COMPENSATED, FAILED, or UNRESOLVED (not attempted: ``halt`` or the journal stopped it)."""

    outcome: Outcome
    attempts: int  # every attempt of this undo, ``attempts_before`` included
    detail: str = ""
    error: BaseException | None = None  # the last attempt's error (FAILED)
    halt: StepRefused | None = None


class Journal(Interface):
    """Where a caller keeps its own account of the attempts (the daemon's ledger)."""

    def before(self, attempt: int) -> bool:
        """Called before attempt ``attempt`` (after the halt was asked); False: do not attempt it."""

    def done(self) -> None:
        """The undo succeeded (called before its record is written)."""

    def failed(self, detail: str) -> None:
        """The undo failed for good (called before its record is written)."""


#: Signatures of plain functions, by code object and which parameters have defaults: what
#: ``bind`` checks. ``inspect.signature`` costs tens of microseconds a call, once per undo otherwise.
_signatures: dict[tuple[CodeType, int, frozenset[str]], inspect.Signature] = {}


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    code = getattr(fn, "__code__", None)
    if not isinstance(code, CodeType) or not inspect.isfunction(fn) or hasattr(fn, "__wrapped__") or hasattr(
        fn, "__signature__"
    ):
        return inspect.signature(fn)  # a method, a partial, a callable object, a decorated function
    key = (code, len(fn.__defaults__ or ()), frozenset(fn.__kwdefaults__ or ()))
    known = _signatures.get(key)
    if known is None:
        known = _signatures[key] = inspect.signature(fn)
    return known


def fits(name: str, fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> None:
    """Refuse kwargs the handler does not take: the record, not the handler, would decide what runs.

    Checked against the signature under any decorator (``inspect.signature`` follows
    ``__wrapped__``), so a wrapper that takes ``**kwargs`` is not run with arguments its
    function would refuse.
    """
    try:
        _signature(fn).bind(**kwargs)
    except ValueError:
        return  # no signature to check against (a builtin): the call itself decides
    except TypeError as err:
        raise CompensationRefused(
            f"the recorded kwargs {sorted(kwargs)} do not fit the undo {name!r} ({err}); it was not called"
        ) from None


def run_undo(
    job: UndoJob,
    *,
    gate: object,
    write: Write,
    wal: WAL | None,
    retry: RetryPolicy,
    attempts_before: int = 0,
    journal: Journal | None = None,
) -> Protocol[UndoEnd]:
    """Run ``job``'s undo under ``retry``, writing its records through ``write`` (the module docstring).

    ``wal``: the log ``write`` appends to, whose barrier makes ``COMPENSATION_STARTED`` durable
    before the call (None: nothing to wait for, as in a dry run).
    """
    made = 0  # attempts made here
    started = False
    secrets: list[str] = []
    while True:
        attempt = attempts_before + made + 1
        # Undos run under a halt unless it names them: asked before every attempt.
        stop = halt_on_undo(gate, job.saga_id, job.step, job.name, job.semantics, job.tags)
        if stop is not None:
            detail = f"undo not run (attempt {attempt} stopped by the gate): {stop.reason}"
            return UndoEnd(Outcome.UNRESOLVED, attempt - 1, detail, halt=stop)
        if journal is not None and not journal.before(attempt):
            return UndoEnd(Outcome.UNRESOLVED, attempt - 1, "not attempted")
        if not started:
            started = True
            ticket = write(R.COMPENSATION_STARTED, {"key": job.key, "handler": job.handler, "attempt": attempt},
                           job.step)
            if wal is not None and wal.durable:
                yield Barrier(wal, ticket)
        made += 1
        try:
            # Resolved per attempt: a handler missing now is a failed attempt, not a crash.
            fn = job.fn if job.fn is not None else resolve(job.handler or "")
            kwargs = dict(job.kwargs)
            if accepts_idempotency_key(fn):
                kwargs["idempotency_key"] = job.key
            fits(job.name, fn, kwargs)
            # Credential references become secrets only here, for this call.
            kwargs, secrets = resolve_credentials(kwargs)
            yield Call(as_undo_of(job.saga_id, fn), kwargs)
        except BaseException as err:  # every failure of an undo is recorded, none hidden
            if not isinstance(err, Exception):  # cancelled (a loop shutting down): its thread may run on
                _follow(job, write, attempt, secrets, still_running(err))
                raise
            if retry.should_retry(err, made):
                yield Sleep(retry.delay(made))
                continue
            detail = scrub(describe_error(err), secrets)
            if journal is not None:
                journal.failed(detail)
            write(R.COMPENSATION_FAILED, {"key": job.key, "attempts": attempt, "error": detail}, job.step)
            return UndoEnd(Outcome.FAILED, attempt, detail, err)
        if journal is not None:
            journal.done()
        write(R.STEP_COMPENSATED, {"key": job.key, "attempts": attempt}, job.step)
        return UndoEnd(Outcome.COMPENSATED, attempt)


def _follow(
    job: UndoJob, write: Write, attempt: int, secrets: list[str], call: concurrent.futures.Future[Any] | None,
) -> None:
    """Record the outcome of an undo whose task was cancelled while its thread ran on, when it ends.

    A thread cannot be stopped: without this its COMPENSATION_STARTED would stay without an
    outcome, and the recovery daemon would run the undo again. As ``Saga._straggled`` follows a
    forward call. Runs on the undo's thread: it never raises.
    """
    if call is None:
        return  # an async undo, cancelled with its task: it did not finish, and recovery runs it

    def landed(done: concurrent.futures.Future[Any]) -> None:
        try:
            error = None if done.cancelled() else done.exception()
            if error is None and not done.cancelled():
                write(R.STEP_COMPENSATED, {"key": job.key, "attempts": attempt, "late": True}, job.step)
            else:
                detail = scrub(describe_error(error) if error is not None else "cancelled before it ran", secrets)
                write(R.COMPENSATION_FAILED, {"key": job.key, "attempts": attempt, "error": detail, "late": True},
                      job.step)
        except Exception:  # on a finished undo's thread: logged, never raised
            log.exception("saga %s: could not record the undo of step %d after its task was cancelled",
                          job.saga_id, job.step)

    call.add_done_callback(landed)
