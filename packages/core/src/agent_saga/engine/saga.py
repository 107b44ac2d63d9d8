"""The saga state machine: run steps forward, unwind them newest-first.

Write-ahead protocol for a non-REVERSIBLE step:

1. ask the gate (nothing has happened yet, so refusing is free);
2. append STEP_INTENT, carrying the undo if it is declared known before the call,
   and wait until it is durable;
3. call the tool (each attempt under its own timeout, same idempotency key),
   asking the gate's last-moment controls (the kill switch) again immediately
   before every attempt that does not follow the gate's check at once;
4. append STEP_COMMITTED with the undo derived from the result, and do *not*
   wait (unless ``wait_for_commit``): the next step's intent barrier, or the
   saga's end, covers it.

REVERSIBLE steps skip (2) and never wait on the disk.

Rollback, newest step first: each undo's COMPENSATION_STARTED is made durable
(with everything queued before it, so the previous undo's outcome, in one flush)
before the undo is called, and the end record is waited for. A crash mid-rollback
therefore leaves at most the one undo in flight without its outcome on disk: the
only one the recovery daemon calls again (with the same idempotency key).

A compensate factory is only ever called with the forward's actual result. An undo
is "known before the call" only when declared so (a ``Compensation`` given
directly, ``call_with``, an ``@inverse_of`` that needs no result field).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, NoReturn, Unpack

from agent_saga.engine import snapshot as snapshots
from agent_saga.engine.commit_record import UNRECORDED, commit_json
from agent_saga.engine.durable_record import durable_commit_json, intent_json
from agent_saga.engine.error_text import describe_error as _describe_error
from agent_saga.engine.inflight import InFlight
from agent_saga.engine.invoke import (
    Barrier,
    Call,
    Check,
    Protocol,
    Settle,
    Sleep,
    call_op,
    drive_async,
    drive_sync,
    still_running,
)
from agent_saga.engine.observe import (
    SagaEnd,
    SagaEvent,
    StepEnd,
    StepEvent,
    Wrappers,
    interceptors,
)
from agent_saga.engine.ports import GatePort, SagaInfo, SpeculationPort, StepRequest, lifecycles
from agent_saga.engine.reconcile_policy import DEFAULT_RECONCILE, ReconcilePolicy
from agent_saga.engine.report import RollbackReport, StepOutcome
from agent_saga.engine.resumed import DurableRun, RecordedStep, Replay
from agent_saga.engine.retry import COMPENSATION_RETRY
from agent_saga.engine.saga_options import SagaKwargs, SagaOptions
from agent_saga.engine.served import Recording, _recording
from agent_saga.engine.snapshot import SnapshotStore
from agent_saga.engine.state import SagaStatus, Step
from agent_saga.engine.step_options import PLAIN, StepKwargs, StepOptions, built_before
from agent_saga.engine.tagged import Tagged, untag_args, untag_call
from agent_saga.engine.undo import build, describe, prebuild, undo_for
from agent_saga.engine.unwind import settle_late, unwind
from agent_saga.errors import (
    CompensationError,
    ConfigurationError,
    NotApplied,
    RepairRequested,
    SagaClosed,
    SagaQuarantined,
    SagaStopped,
    StepRefused,
    WALRefused,
)
from agent_saga.ids import new_saga_id
from agent_saga.log.base import WAL
from agent_saga.log.encodable import encodable, name_problem, unencodable, utf8_safe
from agent_saga.log.group import GroupCommitWAL
from agent_saga.log.records import RecordType as R
from agent_saga.log.results import DURABLE_RESULT_BYTES, MAX_RESULT_BYTES, logged_result
from agent_saga.redaction import redact_args
from agent_saga.registry import CompensationFactory, reconciler_for
from agent_saga.semantics import ActionSemantics, Compensation, Observation, Outcome, StepState

__all__ = ["COMPENSATION_RETRY", "Saga", "SagaStatus", "Step", "describe"]

log = logging.getLogger("agent_saga.engine")

_REVERSIBLE = ActionSemantics.REVERSIBLE
# Members read on every step, named once: an enum class's attribute goes through its metaclass's
# __getattr__ hook (about 500 instructions a read, measured with callgrind), a module name does not.
_COMMITTED, _PENDING = StepState.COMMITTED, StepState.PENDING
_STEP_INTENT, _STEP_COMMITTED = R.STEP_INTENT, R.STEP_COMMITTED
#: What _undo_from answers for a step with no undo: no undo, none described, nothing wrong.
_NO_UNDO: tuple[None, None, None] = (None, None, None)
_OPEN = SagaStatus.OPEN
# A saga whose rollback began (or ended, or was handed over): a call not yet begun never begins.
# A step the rollback left in flight may reach its call after the rollback ended.
_UNWOUND = frozenset({SagaStatus.ROLLING_BACK, SagaStatus.ROLLED_BACK, SagaStatus.ABANDONED})
# The SagaStopped patterns that are a thrash (each also gets a THRASH_STOPPED record).
_THRASH_PATTERNS = frozenset({"identical", "oscillation"})
_SETTLED = (Outcome.COMPENSATED, Outcome.KEPT)
#: What ``Saga._resumed`` returns for a call the log does not answer: it runs as a live step.
_LIVE: Any = object()
# A request's policy_args when none were named: one empty set, not a new one on every step.
_NO_NAMES: frozenset[str] = frozenset()


def _did_nothing(err: BaseException, opts: StepOptions) -> bool:
    """Whether ``err`` says the call had no effect: ``NotApplied``, or a class the step declared so."""
    return isinstance(err, NotApplied) or (bool(opts.not_applied_on) and isinstance(err, opts.not_applied_on))


class Saga:
    """One transaction. Thread-safe; use it from the boundary that created it.

    ``execute`` is the async face, ``execute_sync`` the blocking one; both run the
    same protocol. Created by a boundary (``saga_scope``), which also starts and ends it.
    """

    def __init__(
        self,
        wal: WAL,
        /,
        *,
        saga_id: str | None = None,
        durable: DurableRun | None = None,
        options: SagaOptions | None = None,
        **more: Unpack[SagaKwargs],
    ) -> None:
        """``options`` and/or the same names as keywords are the saga's (:class:`SagaOptions`);
        ``wal`` is its log (a ``wal`` in the options must be that one)."""
        o = SagaOptions.build(options, more)
        if o.wal is not None and o.wal is not wal:
            raise ConfigurationError("the log was given twice, positionally and in the options; give it once")
        name = o.name or "saga"
        _names_at_door(saga_id, name, o.tags)
        self.saga_id = saga_id or new_saga_id()
        self.name = name
        self.wal = wal
        self.gate = o.gate
        self.tags = o.tags
        self.halt_on_compensation_failure = o.halt_on_compensation_failure
        self.compensation_retry = o.compensation_retry
        self.wait_for_commit = o.wait_for_commit
        #: Seconds this saga's end (rollback or commit) waits for its steps still in flight.
        self.rollback_grace = o.rollback_grace
        self.status = SagaStatus.OPEN
        self.report: RollbackReport | None = None
        self._steps: list[Step] = []
        self._failures: list[tuple[str, BaseException]] = []
        self._unprotected: list[str] = []
        # The refusal that ended this saga (repair spent, thrash): every later step is refused.
        self._stopped: SagaStopped | None = None
        self._lock = threading.Lock()
        self._inflight = InFlight(self._lock)
        # Steps the rollback stopped waiting for that have not yet been told to the lifecycle
        # hooks, and those that landed before the saga's end was told (told right after it).
        self._left = 0
        self._landed_late: list[tuple[int, StepOutcome | None]] = []
        self._end_told = False  # the lifecycle hooks heard of the saga's end (``late`` comes after)
        self._halted_at: int | None = None  # the step whose failed undo stopped the rollback (engine.unwind)
        self._started = False
        self._observed: Wrappers | None = None
        # The gate's switch posture as last recorded (see _note_posture); None: not tracked.
        self._posture_since: Callable[[Any], tuple[Any, dict[str, Any] | None]] | None = None
        self._posture_token: Any = None
        # A Speculator attached for this saga's run (agent_saga.runtime._speculation); None: off,
        # and then a tool call pays one attribute test for it, nothing more.
        self.speculation: SpeculationPort | None = None
        #: A ``@durable`` run (engine/resumed.py): its entry and inputs are in the start record, its
        #: steps' results recorded with the larger bound, and when it is resumed, ``_replay`` answers
        #: the calls the log recorded (one attribute test per step otherwise).
        self.durable = durable
        self._replay: Replay | None = durable.replay if durable is not None else None
        self._result_limit = MAX_RESULT_BYTES if durable is None else DURABLE_RESULT_BYTES
        # A log that encodes each record as it is appended checks the undo in the commit record's
        # encoding; any other is given an undo walked first (see _commit).
        self._walk_undo = not getattr(wal, "encodes_on_append", False)
        # A log whose append is the group commit's own (no subclass wraps it) is given the usual
        # REVERSIBLE commit record as the JSON joined from its parts (engine/commit_record.py).
        self._append_json: Callable[[str, str, str, int | None], int] | None = (
            wal.append_encoded if isinstance(wal, GroupCommitWAL) and type(wal).append is GroupCommitWAL.append
            else None
        )
        # The highest step number given so far: a resumed run's live steps come after the recorded ones.
        self._last = self._replay.last_index if self._replay is not None else 0

    # -- lifecycle --------------------------------------------------------------------

    @property
    def info(self) -> SagaInfo:
        return SagaInfo(self.saga_id, self.name, self.tags)

    @property
    def steps(self) -> tuple[Step, ...]:
        with self._lock:
            return tuple(self._steps)

    @property
    def failures(self) -> tuple[tuple[str, BaseException], ...]:
        """Every step that failed or was refused here (tool, exception), oldest first.

        A framework may turn a tool's exception into a message for the model; the
        saga still knows, and a run boundary uses this to unwind a run that stands
        on a failed step instead of committing it.
        """
        with self._lock:
            return tuple(self._failures)

    @property
    def unprotected(self) -> tuple[str, ...]:
        """Tools that ran inside this saga with no declared semantics (see :meth:`note_unprotected`)."""
        with self._lock:
            return tuple(self._unprotected)

    @property
    def stopped(self) -> SagaStopped | None:
        """The gate's refusal that ended this saga (a boundary rolls it back), or None."""
        return self._stopped

    def start(self) -> None:
        """Admit the saga through the gate and record its start (no disk wait)."""
        if self._started:
            return
        if self.gate is not None:
            self.gate.admit(self.info)
            since = getattr(self.gate, "posture_since", None)
            if since is not None:
                self._posture_token = since(None)[0]
                self._posture_since = since
        self._started = True
        body: dict[str, Any] = {
            "name": self.name,
            "tags": sorted(self.tags),
            "owner": _owner(),
            "durable_log": self.wal.durable,
            "gate": _posture(self.gate),
        }
        rtype = R.SAGA_STARTED
        replay = self._replay
        if replay is not None:  # the saga started before: this process takes it over (and its lease)
            rtype = R.SAGA_RESUMED
            body.update(by=replay.by, recorded_steps=replay.recorded)
        elif self.durable is not None:
            body["durable"] = self.durable.started()
        for hook in lifecycles():  # recovery's lease, installed from above this layer
            body.update(hook.started(self.saga_id, self.wal) or {})
        self._append(rtype, body)
        if interceptors():
            self._observed = Wrappers.start("saga", SagaEvent(self.saga_id, self.name, self.tags))

    def _append(self, rtype: R, body: Mapping[str, Any], step: int | None = None) -> int:
        return self.wal.append(rtype, self.saga_id, body, step)  # a StrEnum is its own value

    def _end(self, rtype: R, body: Mapping[str, Any], status: SagaStatus) -> Protocol[None]:
        ticket = self._append(rtype, body)
        yield Barrier(self.wal, ticket)
        self.status = status  # only once the end record is durable
        for hook in lifecycles():
            hook.ended(self.saga_id, self.wal, self.report)
        with self._lock:
            self._end_told = True
            landed, self._landed_late = self._landed_late, []
        for index, outcome in landed:  # steps left in flight that landed before the end was told
            self.tell_late(index, outcome)
        self._finish_observers(status)

    def tell_late(self, index: int, outcome: StepOutcome | None) -> None:
        """Tell the lifecycle hooks how a step left in flight by the rollback was settled when it landed.

        ``outcome`` is None when it never ran. Told after the saga's end (held until then).
        """
        with self._lock:
            if not self._end_told:
                self._landed_late.append((index, outcome))
                return
            self._left -= 1
            remaining = self._left
        for hook in lifecycles():
            hook.late(self.saga_id, self.wal, index, outcome, remaining)

    def _await_steps(self, grace: float) -> Protocol[list[Step]]:
        """Wait (at most ``grace`` seconds) for the steps in flight; return those still out.

        Called once the saga is fenced (its status is no longer OPEN), so none takes off meanwhile.
        """
        if self._inflight.count and grace > 0:
            yield Settle(self._inflight, time.monotonic() + grace)
        with self._lock:
            out = [s for s in self._steps if s.flying]
        return out

    def _finish_observers(self, status: SagaStatus) -> None:
        observed, self._observed = self._observed, None
        if observed is not None:
            observed.end(SagaEnd(status.value, self.report))

    def complete_sync(self) -> None:
        drive_sync(self._complete())

    async def complete(self) -> None:
        await drive_async(self._complete())

    def _complete(self) -> Protocol[None]:
        with self._lock:
            self._check_open()
            self.status = SagaStatus.COMPLETING  # the fence: no step starts its effect from now on
        try:
            # The commit covers the steps already under way: wait for them to land, within the grace.
            out = yield from self._await_steps(self.rollback_grace)
            with self._lock:
                unknown = [s.index for s in self._steps if s.state is StepState.UNKNOWN]
                steps = len(self._steps)
                unprotected = list(self._unprotected)
            body: dict[str, Any] = {"steps": steps, "unknown": unknown}
            if unprotected:
                body["unprotected"] = unprotected
            if out:
                # Still running after the grace: each records its own outcome when it lands.
                body["in_flight"] = [s.index for s in out]
            durable = self.durable
            if durable is not None and durable.returned:  # what the entry point returned, as a step's result
                body["result"] = logged_result(durable.result, "value", (), self._result_limit)[1]
            yield from self._end(R.SAGA_COMPLETED, body, SagaStatus.COMPLETED)
        except BaseException:
            # The commit is not durable: it did not happen. Hand the saga to the daemon
            # (its lease stops now) rather than keep it looking alive.
            self._hand_over(None)
            raise

    def preload(self, steps: Iterable[Step]) -> None:
        """Put steps another saga committed at the bottom of this one's stack, before its first step.

        A repair's continuation (``recovery.repair``): they are unwound with this
        saga's own steps, newest first, exactly as if they had run here.
        """
        with self._lock:
            self._check_open()
            if self._steps:
                raise SagaClosed(f"saga {self.saga_id} already has steps; preload before the first one")
            self._steps.extend(steps)
            self._last = max((s.index for s in self._steps), default=0)

    def freeze(self) -> None:
        """Stop without unwinding (quarantine): the saga stays open for a human."""
        with self._lock:
            self.status = SagaStatus.FROZEN
        for hook in lifecycles():
            # Its lease stops now: an operator can repair it while this process lives on.
            hook.frozen(self.saga_id, self.wal)
        self._finish_observers(SagaStatus.FROZEN)

    def _check_open(self) -> None:
        if self.status is not SagaStatus.OPEN:
            raise SagaClosed(
                f"saga {self.saga_id} is {self.status.value.lower()}; start a new saga_scope "
                "for further steps"
            )
        if not self._started:
            raise SagaClosed(
                f"saga {self.saga_id} was never started; open it with saga_scope() so that its "
                "start (and lease) is recorded before any step"
            )

    def note_unprotected(self, tool: str, args: Mapping[str, Any], origin: str | None = None) -> None:
        """Record that ``tool`` ran here with no declared semantics (observe mode).

        Its effect stands unprotected: nothing will undo it, so this saga's rollback
        is never reported clean and ``certify`` counts it as unaccounted.
        """
        with self._lock:
            self._unprotected.append(tool)
        body: dict[str, Any] = {"tool": tool, "args": encodable(redact_args(args))}
        if origin is not None:
            body["origin"] = origin
        self._append(R.STEP_UNPROTECTED, body)

    def refuse(
        self, tool: str, args: Mapping[str, Any], refused: StepRefused, origin: str | None = None
    ) -> None:
        """Record a call refused before it became a step (an unclassified tool in enforce mode).

        Nothing ran, so there is nothing to undo; the refusal is evidence, and it
        counts as a failure of the run (a run boundary will not commit over it).
        """
        self._failed(tool, refused)
        body: dict[str, Any] = {
            "tool": tool, "semantics": None, "args": encodable(redact_args(args)),
            "reason": refused.reason, "rule": refused.rule,
        }
        if origin is not None:
            body["origin"] = origin
        self._append(R.STEP_REFUSED, body)

    # -- forward ------------------------------------------------------------------------

    def execute(
        self,
        *,
        tool: str,
        forward: Callable[..., Any],
        semantics: ActionSemantics | str | None = None,
        args: Mapping[str, Any] | None = None,
        options: StepOptions | None = None,
        **more: Unpack[StepKwargs],
    ) -> Coroutine[Any, Any, Any]:
        """Run one step and return its result (async face: await what it returns).

        ``forward`` is called with no arguments (plus ``idempotency_key`` if it
        names that parameter); sync callables run on a worker thread unless
        ``inline=True``. ``args`` are what the gate polices and the log records
        (secret-looking names redacted). The step's options come from ``options``
        and/or keywords (``semantics=``, ``compensate=``, ... — see StepOptions).
        Nothing runs, and nothing is raised, until it is awaited.
        """
        # Options checked before (just semantics=, by name, or keywords given before): taken without a
        # call to build them, and the driver's own coroutine handed back (no coroutine of this method's
        # own around it: issue 43 §1). Others are built, and refused, when awaited.
        opts = None if options is not None or not isinstance(semantics, str) else (
            PLAIN.get(semantics) if not more else built_before(semantics, more))
        if opts is not None:
            return drive_async(self._step(tool, forward, args, opts))
        return self._execute_built(tool, forward, args, options, semantics, more)

    async def _execute_built(
        self, tool: str, forward: Callable[..., Any], args: Mapping[str, Any] | None, options: StepOptions | None,
        semantics: ActionSemantics | str | None, more: StepKwargs,
    ) -> Any:
        """``execute`` with options to build: built when awaited, so a bad one is raised there, as ever."""
        return await drive_async(self._step(tool, forward, args, StepOptions.build(options, semantics, more)))

    def execute_sync(
        self,
        *,
        tool: str,
        forward: Callable[..., Any],
        semantics: ActionSemantics | str | None = None,
        args: Mapping[str, Any] | None = None,
        options: StepOptions | None = None,
        **more: Unpack[StepKwargs],
    ) -> Any:
        """Run one step and return its result, blocking (sync face)."""
        opts = None if options is not None or not isinstance(semantics, str) else (
            PLAIN.get(semantics) if not more else built_before(semantics, more))  # (as execute takes them)
        return drive_sync(self._step(tool, forward, args, opts or StepOptions.build(options, semantics, more)))

    async def snapshot(
        self, name: str, *, capture: Callable[[], Any], restore: Callable[..., Any] | str,
        store: SnapshotStore | None = None,
    ) -> Any:
        """Capture state before the next step; ``restore(captured)`` runs on rollback, LIFO with the undos.

        Without ``store`` the snapshot lives in this process (a REVERSIBLE step). With one it
        is durable before the step's intent and ``restore`` must be registered
        (``@compensator``): the recovery daemon restores it after a crash. See
        engine/snapshot.py. Returns what ``capture`` returned.
        """
        return await drive_async(self._snapshot(name, capture, restore, store))

    def snapshot_sync(
        self, name: str, *, capture: Callable[[], Any], restore: Callable[..., Any] | str,
        store: SnapshotStore | None = None,
    ) -> Any:
        """The blocking face of :meth:`snapshot`."""
        return drive_sync(self._snapshot(name, capture, restore, store))

    def _snapshot(
        self, name: str, capture: Callable[[], Any], restore: Callable[..., Any] | str, store: SnapshotStore | None,
    ) -> Protocol[Any]:
        return snapshots.protocol(self, name, capture, restore, store)

    @staticmethod
    def _policed(tool: str, args: Mapping[str, Any] | None, opts: StepOptions) -> dict[str, Any]:
        """What the gate sees and the log records: the arguments (plus policy_args), redacted."""
        if opts.policy_args:
            try:
                args = opts.policed(args or {})
            except KeyError as err:
                # A control that cannot read the value it was told to police refuses (fail closed).
                raise StepRefused(
                    tool, f"a policy_args path does not resolve in the call's arguments: {err.args[0]}",
                    "policy_args",
                ) from None
        return redact_args(args, opts.reveal) if args else {}

    # One step's protocol. Its phases are helper methods, not sub-generators: only this frame
    # yields, so a step costs no more frames than it did as one function (measured, issue 31).
    # The rare paths (a wait at the gate, a failure, a late landing) are sub-generators.
    def _step(
        self,
        tool: str,
        forward: Callable[..., Any],
        args: Mapping[str, Any] | None,
        opts: StepOptions,
        via_fallback: bool = False,
    ) -> Protocol[Any]:
        if _recording.get() is not None or self._replay is not None:  # a replay, or a resumed durable run
            served = self._answered(tool, forward, args, opts)
            if served is not _LIVE:
                return served
        compensate = undo_for(tool, forward, opts)
        step = self._open(tool, opts.semantics, compensate is not None, via_fallback)
        plain_args, tagged = untag_args(args) if args else (args, None)
        claims = None
        if tagged:
            # The tool gets plain values; the gate sees the tags; the log keeps what they claim.
            forward, claims = untag_call(forward), encodable({name: tag.claim() for name, tag in tagged.items()})
        # Admission: records its own refusals. The step is in flight from _open on: the saga's
        # end waits for it to land (and stops it before its call, see _stop_for_rollback).
        try:
            logged_args, request, pending = self._admit(step, args, plain_args, opts, tagged, claims)
        except BaseException:
            yield from self._settle_landing(step)
            raise
        waits = pending is not None
        if pending is not None:
            yield from self._wait_at_gate(step, pending, logged_args, claims)
        observed = None if not interceptors() else Wrappers.start("step", StepEvent(
            self.saga_id, self.name, step.index, tool, step.semantics, logged_args, opts.origin, via_fallback,
        ))
        durable, prebuilt = step.semantics is not _REVERSIBLE, None
        try:
            if durable:
                # Intent: the undo declared known before the call is what rescues an UNKNOWN outcome.
                if self.status is not _OPEN and self.status in _UNWOUND:
                    self._stop_for_rollback(step, None, 1)  # no intent for a call that will not run
                prebuilt = prebuild(compensate, tool, step.compensation_key)
                try:
                    ticket = self._append_intent(step, compensate, prebuilt, logged_args, opts, claims)
                    yield Barrier(self.wal, ticket)
                except BaseException as err:
                    self._unstarted(step, err, observed)
                    raise
            # Call: the gate's last word, asked again before every attempt that does not follow
            # its check at once: the intent's barrier (or a wait) came in between, or a retry's sleep.
            if opts.retry is None:  # the common case, without a nested generator
                if self.status is not _OPEN and self.status in _UNWOUND:
                    self._stop_for_rollback(step, None, 1)
                if request is not None and (durable or waits):  # (a REVERSIBLE step asks nothing here)
                    recheck = getattr(self.gate, "recheck", None)
                    if recheck is not None:
                        self._last_word(recheck, request, step, None, 1)
                try:
                    result = yield call_op(forward, step, opts.timeout, opts.inline)
                except Exception as failed:  # noqa: BLE001 - re-raised unless a reconciler settles it
                    # Did it land anyway? Ask, if someone can answer (else this re-raises).
                    result = yield from self._settle_failure(step, failed, logged_args, opts)
            else:
                recheck = getattr(self.gate, "recheck", None) if request is not None else None
                result = yield from self._attempts(
                    forward, step, logged_args, opts, recheck, request, durable or waits
                )
        except BaseException as err:  # noqa: BLE001 - recorded, then re-raised (or its fallback run) there
            return (yield from self._after_failure(step, err, args, opts, compensate, prebuilt, observed, request,
                                                   logged_args))
        if request is not None and self.gate is not None:  # the gate hears that the call it let through went well
            self.gate.observe(request, None)
        # Commit: its barrier is the next step's intent barrier, or the saga's end, unless asked.
        ticket, problem, late = self._commit(step, result, compensate, logged_args, opts, claims, observed)
        if late:
            yield from self._late_commit(step)
        if problem is not None:
            raise problem
        if durable and (self.wait_for_commit if opts.wait_for_commit is None else opts.wait_for_commit):
            yield Barrier(self.wal, ticket)
        return result

    def _late_commit(self, step: Step) -> Protocol[None]:
        """The rollback stopped waiting for this committed step before it landed: undo it now, and say so."""
        yield from settle_late(self, step)
        raise SagaClosed(
            f"saga {self.saga_id} rolled back while {step.tool!r} was in flight; its effect was settled as it "
            "landed (see the log)"
        )

    def _answered(
        self, tool: str, forward: Callable[..., Any], args: Mapping[str, Any] | None, opts: StepOptions,
    ) -> Any:
        """What a replay answers this call with instead of running it; ``_LIVE``: it runs."""
        recording = _recording.get()
        if recording is not None:
            return self._served(recording, tool, args, opts)
        assert self._replay is not None
        return self._resumed(self._replay, tool, forward, args, opts)

    def _served(self, recording: Recording, tool: str, args: Mapping[str, Any] | None, opts: StepOptions) -> Any:
        """A counterfactual replay: the recording answers; no forward, gate, log or undo runs."""
        try:
            return recording.serve(tool, args, opts)
        except Exception as err:
            self._failed(tool, err)  # a boundary sees a served failure as it saw the recorded one
            raise

    # -- a resumed durable run (engine/resumed.py) -------------------------------------------

    def _resumed(
        self, replay: Replay, tool: str, forward: Callable[..., Any], args: Mapping[str, Any] | None,
        opts: StepOptions,
    ) -> Any:
        """The recorded result of this call, served; ``_LIVE`` when it is to run; raises when it diverged.

        A served step joins the stack under its recorded number, COMMITTED, with its undo built from
        the recorded result exactly as ``_commit`` builds it, so a later failure unwinds it too.
        """
        try:
            plain = untag_args(args)[0] if args else args
            logged = self._policed(tool, plain, opts) if (args or opts.policy_args) else {}
        except StepRefused:
            logged = {}  # its admission refused it then as now: the refusal recorded no arguments
        position, recorded = replay.take()
        if recorded is None:
            self._replay = None  # the log is spent: from here the run is live
            return _LIVE
        if not replay.matches(recorded, tool, logged):
            self._diverge(position, recorded, tool, logged, "another call than the one recorded at this position")
        if recorded.outcome == "unseen":
            return _LIVE  # it died in flight and never landed: the code never saw it end, so it runs
        if recorded.outcome != "committed":
            # Nothing landed then: it fails the same way now, so the code takes the path it took
            # (a retry loop retries, a skipped item is skipped) instead of a new one that diverges.
            failed: NotApplied = StepRefused(tool, f"{recorded.error} (recorded; served from the log)", "resume") if (
                recorded.outcome == "refused") else NotApplied(f"{tool}: {recorded.error} (recorded; served from the log)")
            self._append(R.STEP_SERVED, {"position": position, "outcome": recorded.outcome}, recorded.index)
            self._failed(tool, failed)
            raise failed
        compensate = undo_for(tool, forward, opts)
        if not recorded.replayable:
            if opts.semantics is not _REVERSIBLE:
                self._diverge(position, recorded, tool, logged,
                              "its result was recorded only as a shape or redacted, and it is not REVERSIBLE")
            self._keep_recorded([recorded])  # its effect stands; the call runs again
            return _LIVE
        result = copy.deepcopy(recorded.result)
        step = Step(self.saga_id, recorded.index, tool, opts.semantics, undo_declared=compensate is not None)
        comp, _, problem = self._undo_from(step, compensate, result)
        step.compensation, step.problem, step.state = comp, str(problem or ""), StepState.COMMITTED
        with self._lock:
            if self.status is not _OPEN:
                self._check_open()
            self._steps.append(step)
        replay.served += 1
        # The log says which steps a resumed run took from it (the pictures mark them): one record,
        # queued, not waited for (a crash before it is written loses only the mark; the next resume serves it again).
        self._append(R.STEP_SERVED, {"position": position, "outcome": "committed"}, recorded.index)
        if problem is not None:
            self._failed(tool, problem)
            raise problem
        observed = None if not interceptors() else Wrappers.start("step", StepEvent(
            self.saga_id, self.name, step.index, tool, step.semantics, logged, opts.origin, served=True,
        ))
        if observed is not None:  # observers see the served step too, told it was served
            observed.end(StepEnd(StepState.COMMITTED, None, result))
        return result

    def _keep_recorded(self, recorded: Iterable[RecordedStep]) -> None:
        """Put recorded committed steps no call was served from on the stack, with the undo the log names.

        A REVERSIBLE step that runs again (its result cannot be served), or the steps a diverged run
        never reached: their effects stand, so the rollback must undo them too. An undo the log
        holds only as a closure died with its process: the step goes on the stack without one,
        and the rollback reports it (orphaned), as the daemon would.
        """
        kept = []
        for step in recorded:
            if step.outcome != "committed":
                continue
            desc = step.compensation
            comp = None
            if desc is not None and desc.get("recoverable") is True and isinstance(desc.get("kwargs"), dict):
                comp = Compensation(handler=str(desc["handler"]), kwargs=dict(desc["kwargs"]),
                                    description=str(desc.get("description") or ""), idempotency_key=desc.get("key"))
            kept.append(Step(self.saga_id, step.index, step.tool, ActionSemantics(step.semantics),
                             StepState.COMMITTED, comp, undo_declared=comp is not None))
        with self._lock:
            self._steps.extend(kept)

    def _diverge(
        self, position: int, recorded: RecordedStep | None, tool: str | None, logged: Mapping[str, Any] | None,
        why: str,
    ) -> NoReturn:
        """Record SAGA_DIVERGED and stop the saga: its boundary unwinds it, replayed steps included.

        The recorded steps not served (this one and those after it) go on the stack too: their
        effects stand whether or not the code asks for them again.
        """
        replay, self._replay = self._replay, None
        if replay is not None:
            self._keep_recorded([*([recorded] if recorded is not None else []), *replay.remaining()])
        got = None if tool is None else {"tool": tool, "args": encodable(dict(logged or {}))}
        self._append(R.SAGA_DIVERGED, {
            "position": position, "expected": recorded.called() if recorded is not None else None,
            "got": got, "detail": why,
        })
        expected = f"step {recorded.index} {recorded.tool!r}" if recorded is not None else "no more steps"
        asked = f"{tool!r}" if tool is not None else "nothing more (it returned)"
        stopped = SagaStopped(
            tool or (recorded.tool if recorded is not None else "?"),
            f"the resumed run diverged at recorded position {position}: the log has {expected}, the code now "
            f"asks for {asked} ({why}); it is unwound",
            "resume", "diverged",
        )
        with self._lock:
            self._stopped = self._stopped or stopped
        self._failed(stopped.tool, stopped)
        raise stopped

    def end_replay(self) -> None:
        """The resumed entry point returned: refuse (diverge) if recorded steps were never asked for."""
        replay = self._replay
        left = replay.remaining() if replay is not None else []
        if replay is not None and left:
            replay.take()  # the first of them is the one _diverge names
            self._diverge(replay.recorded - len(left) + 1, left[0], None, None,
                          f"it returned with {len(left)} recorded step(s) not asked for")
        self._replay = None

    def _settle_landing(self, step: Step) -> Protocol[None]:
        """Take ``step`` out of flight; settle it now if a rollback left it (``engine.unwind.settle_late``)."""
        if self._land(step):
            yield from settle_late(self, step)

    def _wait_at_gate(self, step: Step, pending: Check, logged_args: dict[str, Any], claims: Any) -> Protocol[None]:
        """Out of flight while the gate waits (a person may take hours), then fenced again."""
        if self._land(step):
            yield from settle_late(self, step)  # left by a rollback meanwhile: it never ran
        else:
            try:
                yield pending
            except StepRefused as refused:
                self._refused(step, refused, logged_args, claims)
                raise
        self._take_off(step, logged_args, claims)

    def _after_failure(
        self, step: Step, err: BaseException, args: Mapping[str, Any] | None, opts: StepOptions,
        compensate: CompensationFactory | Compensation | None, prebuilt: Compensation | None,
        observed: Wrappers | None, request: StepRequest | None, logged_args: dict[str, Any],
    ) -> Protocol[Any]:
        """A call (or its intent) failed: record it, settle or follow it, then raise ``err`` or run the fallback."""
        fallback = None
        running = None
        recorded = step.state is not StepState.PENDING  # a failed intent recorded its own outcome
        try:
            if not recorded:
                fallback = self._call_failed(step, err, compensate, prebuilt, observed, request, opts, logged_args)
                if step.state is StepState.UNKNOWN:
                    running = still_running(err)  # it timed out, or was cancelled, on a thread that runs on
        finally:
            # A call cancelled by its framework (a sibling failed) is likely to finish: its step stays
            # in flight until it does, so the rollback waits for it. One that timed out is slow: not.
            stays = running is not None and isinstance(err, asyncio.CancelledError)
            late = False if stays else self._land(step)
        if running is not None:
            running.add_done_callback(functools.partial(self._straggled, step, compensate, opts, stays))
        if late:
            yield from settle_late(self, step)
        if fallback is None:
            raise err
        # The fallback is a step of its own, undone like any other.
        fallback_opts = opts.with_changes(fallback_action=None, retry=None, compensate=compensate)
        return (yield from self._step(step.tool, fallback, args, fallback_opts, True))

    def _straggled(
        self, step: Step, compensate: CompensationFactory | Compensation | None, opts: StepOptions,
        flying: bool, call: concurrent.futures.Future[Any],
    ) -> None:
        """A call its step stopped waiting for (a timeout, a cancellation) finished on its thread.

        If it returned, its effect landed: a late STEP_COMMITTED (``"late": true``) records what
        it returned and the undo built from that. While no rollback has settled the step, it
        becomes COMMITTED here too, so a rollback undoes it with that undo; once one has, the
        lifecycle hooks escalate it with its result (``stray``), and recovery reads the saga as
        open if the rollback could not undo it (``recovery.fold``). A call that raised after all
        leaves the step UNKNOWN. A step kept ``flying`` for its call lands now (and is settled at
        once if its rollback stopped waiting for it). Runs on the call's thread: it never raises.
        """
        try:
            if not call.cancelled() and call.exception() is None:
                self._landed_after_all(step, compensate, opts, call.result())
            if flying and self._land(step):
                drive_sync(settle_late(self, step))
        except Exception:  # a callback on a finished call's thread: logged, never raised
            log.exception("saga %s: could not settle step %d after its call finished late", self.saga_id,
                          step.index)

    def _landed_after_all(
        self, step: Step, compensate: CompensationFactory | Compensation | None, opts: StepOptions, result: Any,
    ) -> None:
        """Record that an UNKNOWN step's call returned ``result`` after all (see ``_straggled``)."""
        comp, described, problem = self._undo_from(step, compensate, result)
        body: dict[str, Any] = {"op": step.operation_id, "compensation": described, "late": True}
        if problem is not None:
            body["problem"] = str(problem)
        if opts.record_result != "none":
            body["result"] = logged_result(result, opts.record_result, opts.reveal, self._result_limit)[1]
        with self._lock:
            if step.state is not StepState.UNKNOWN:
                return
            ours = not step.settling
            if ours:
                step.state, step.compensation, step.problem = StepState.COMMITTED, comp, str(problem or "")
            # Appended under the lock: a rollback reaching the step now finds its commit in the log first.
            self._append(R.STEP_COMMITTED, body, step.index)
        if not ours:
            detail = (
                f"{step.tool!r} returned after its step was settled as UNKNOWN: its effect landed "
                f"(recorded result: {body.get('result', 'not recorded')!r})"
            )
            for hook in lifecycles():
                hook.stray(self.saga_id, self.wal, step.index, detail)

    def _take_off(self, step: Step, logged_args: dict[str, Any], claims: Any) -> None:
        """Put ``step`` back in flight after a wait at the gate, or refuse it (recorded) when its saga's end began."""
        with self._lock:
            status = self.status
            if status is _OPEN:
                step.flying = True
                self._inflight.count += 1
                return
        refused = StepRefused(
            step.tool, f"saga {self.saga_id} is {status.value.lower().replace('_', ' ')}: no new step starts",
            status.value.lower().replace("_", "-"),
        )
        self._refused(step, refused, logged_args, claims)
        raise refused

    def _land(self, step: Step) -> bool:
        """``step``'s outcome is recorded: it is no longer in flight. True if it was left (it landed late)."""
        lock = self._lock  # acquire/release, not `with`: no bound __enter__/__exit__ made per step
        lock.acquire()
        try:
            step.flying = False
            flight = self._inflight
            flight.count -= 1
            if flight.waiters:
                flight.wake()
            return step.left
        finally:
            lock.release()

    def _stop_for_rollback(self, step: Step, failed: BaseException | None, attempt: int) -> None:
        """The saga began to roll back (or ended so): attempt ``attempt`` does not start (``failed``: an earlier one's error)."""
        if failed is None:
            step.halted = "before"
            raise StepRefused(step.tool, "the saga began to roll back before this call started; it did not run",
                              "rolling-back")
        step.halted = "between"
        raise StepRefused(
            step.tool,
            f"the saga began to roll back; stopped before attempt {attempt}, after attempt {attempt - 1} failed "
            f"({_describe_error(failed)}) and may have landed",
            "rolling-back",
        ) from failed

    def _open(self, tool: str, sem: ActionSemantics, undo_declared: bool, via_fallback: bool) -> Step:
        """The step, numbered, on the stack and in flight, once the saga is known to take one."""
        lock = self._lock  # (as in _land)
        lock.acquire()
        try:
            if self.status is not _OPEN or not self._started:
                self._check_open()
            index = self._last = self._last + 1  # steps are numbered from 1, as people count them
            # Positional: keywords would cost a dict made and unpacked per step.
            step = Step(self.saga_id, index, tool, sem, _PENDING, None, undo_declared, via_fallback, True)
            self._steps.append(step)
            self._inflight.count += 1
        finally:
            lock.release()
        return step

    def _admit(
        self,
        step: Step,
        args: Mapping[str, Any] | None,
        plain_args: Mapping[str, Any] | None,
        opts: StepOptions,
        tagged: dict[str, Tagged] | None,
        claims: Any,
    ) -> tuple[dict[str, Any], StepRequest | None, Check | None]:
        """Police, check at the door, ask the gate: (logged args, the gate's request, its check to await)."""
        tool, gate = step.tool, self.gate
        request = None
        logged_args: dict[str, Any] = {}
        pending = None
        try:
            if args or opts.policy_args:
                logged_args = self._policed(tool, plain_args, opts)
                unfit = unencodable(logged_args, "args")
                if unfit is not None:
                    # Refused at the door, before the gate, the intent and any effect: one such
                    # record would break the log's flush for every saga writing to it. The
                    # refusal records the args with the bad parts replaced by marked text.
                    logged_args = encodable(logged_args)
                    raise StepRefused(tool, unfit, "unencodable")
            if not tool.isascii():  # O(1); a name is checked in full only when it is not ASCII
                unfit = name_problem(tool, "the tool's name")
                if unfit is not None:
                    # A REVERSIBLE step writes nothing before its call: left to its commit
                    # record, such a name would surface only after the effect.
                    raise StepRefused(tool, unfit, "unencodable")
            stopped = self._stopped
            if stopped is not None:
                # Whatever the framework did with the stopping error, nothing more runs here.
                raise StepRefused(tool, f"the saga was stopped ({stopped.pattern}): {stopped.reason}", "stopped")
            if gate is not None:
                request = StepRequest(  # positional, as in _open: provenance, then policy_args
                    self.saga_id, step.index, tool, step.semantics, logged_args, self.tags, tagged or None,
                    frozenset(opts.policy_args) if opts.policy_args else _NO_NAMES,
                )
                if self._posture_since is not None:
                    self._note_posture(step.index)
                if getattr(gate, "never_waits", False):
                    gate.check(request)  # nothing to await: spare the driver a round trip
                else:
                    pending = Check(gate, request)
        except StepRefused as refused:
            step.tool = utf8_safe(tool)  # the refusal shows a name the log cannot hold as marked text
            self._refused(step, refused, logged_args, claims)
            raise
        return logged_args, request, pending

    def _refused(self, step: Step, refused: StepRefused, logged_args: dict[str, Any], claims: Any) -> None:
        """Record a refusal at admission: a repair request, or a refusal (and a stop, and a thrash)."""
        tool, index = step.tool, step.index
        step.state = StepState.NOT_APPLIED
        if isinstance(refused, RepairRequested):
            # Not a failure of the run: the model gets the errors and one more try.
            repair: dict[str, Any] = {
                "tool": tool, "semantics": step.semantics, "args": logged_args,
                "errors": list(refused.errors), "reason": refused.reason, "rule": refused.rule,
            }
            if claims:
                repair["provenance"] = claims
            self._append(R.ACTION_REPAIR_REQUESTED, repair, index)
            return
        self._failed(tool, refused)
        refusal: dict[str, Any] = {
            "tool": tool, "semantics": step.semantics, "args": logged_args,
            "reason": refused.reason, "rule": refused.rule,
        }
        if claims:
            refusal["provenance"] = claims
        self._append(R.STEP_REFUSED, refusal, index)
        if isinstance(refused, SagaStopped):
            with self._lock:
                self._stopped = self._stopped or refused
            if refused.pattern in _THRASH_PATTERNS:
                self._append(R.THRASH_STOPPED, {
                    "tool": tool, "pattern": refused.pattern, "reason": refused.reason,
                    "calls": encodable(list(refused.calls)),
                }, index)

    def _append_intent(
        self,
        step: Step,
        compensate: CompensationFactory | Compensation | None,
        prebuilt: Compensation | None,
        logged_args: dict[str, Any],
        opts: StepOptions,
        claims: Any,
    ) -> int:
        """Append the STEP_INTENT record of a durable step; its ticket."""
        # How to build the undo from a result, so another process that learns the result (a
        # reconciler, after a crash) can build it too.
        recipe = getattr(compensate, "recipe", None) if prebuilt is None else None
        append_json = self._append_json  # on the group commit's own append: the JSON joined from its parts
        if append_json is not None and (text := intent_json(
                step.tool, step.semantics, step.operation_id, logged_args, prebuilt, step.via_fallback, recipe,
                opts.origin, claims)) is not None:
            return append_json(_STEP_INTENT, self.saga_id, text, step.index)
        intent: dict[str, Any] = {
            "tool": step.tool, "semantics": step.semantics, "op": step.operation_id, "args": logged_args,
            "compensation": describe(prebuilt), "fallback": step.via_fallback,
        }
        if recipe is not None:
            intent["recipe"] = recipe
        if opts.origin is not None:
            intent["origin"] = opts.origin
        if claims:
            intent["provenance"] = claims
        return self._append(_STEP_INTENT, intent, step.index)

    def _unstarted(self, step: Step, err: BaseException, observed: Wrappers | None) -> None:
        """The intent never became durable, so the effect never started."""
        step.state = StepState.NOT_APPLIED
        self._failed(step.tool, err)
        if observed is not None:
            observed.end(StepEnd(StepState.NOT_APPLIED, err))

    def _call_failed(
        self,
        step: Step,
        err: BaseException,
        compensate: CompensationFactory | Compensation | None,
        prebuilt: Compensation | None,
        observed: Wrappers | None,
        request: StepRequest | None,
        opts: StepOptions,
        logged_args: dict[str, Any],
    ) -> Callable[..., Any] | None:
        """Record a call that failed (NOT_APPLIED or UNKNOWN); the fallback to run next, if one may."""
        halted = step.halted  # "before": nothing ran; "between": an earlier attempt may have landed
        # A REVERSIBLE step has no intent record: its outcome record says what was called (a resume
        # matches a recorded call by tool and arguments, a reconciler is asked with them).
        called = {"tool": step.tool, "semantics": step.semantics, "args": logged_args} if (
            step.semantics is _REVERSIBLE) else {}
        if halted == "before" or (_did_nothing(err, opts) and halted != "between"):
            step.state = StepState.NOT_APPLIED
            not_applied: dict[str, Any] = {"op": step.operation_id, "error": _describe_error(err), **called}
            if step.reconciled is not None:
                not_applied["reconciled"] = step.reconciled
            self._append(R.STEP_NOT_APPLIED, not_applied, step.index)
        else:
            step.state = StepState.UNKNOWN
            if step.semantics is _REVERSIBLE:
                # Nothing had to reach the disk before the call, so a declared
                # known-before undo is built only now that it is needed.
                prebuilt = prebuild(compensate, step.tool, step.compensation_key)
            step.compensation = prebuilt
            self._append(R.STEP_UNKNOWN, {
                "tool": step.tool, "semantics": step.semantics, "op": step.operation_id,
                "error": _describe_error(err), "compensation": describe(prebuilt), **called,
            }, step.index)
        self._failed(step.tool, err)
        if observed is not None:
            observed.end(StepEnd(step.state, err))
        if not isinstance(err, Exception) or halted or self.status is not _OPEN:
            return None  # a halt (or a quarantine, or the saga's end) is not the tool's failure: no fallback
        self._observe(request, err)
        # A failed primary that may have landed stays on the stack as UNKNOWN;
        # the fallback is a step of its own, undone like any other.
        return opts.fallback_action

    def _commit(
        self,
        step: Step,
        result: Any,
        compensate: CompensationFactory | Compensation | None,
        logged_args: dict[str, Any],
        opts: StepOptions,
        claims: Any,
        observed: Wrappers | None,
    ) -> tuple[int, CompensationError | None, bool]:
        """Build the undo from the result, append STEP_COMMITTED and land the step.

        Returns (its ticket, what went wrong with the undo, whether it landed late: see ``_land``).
        """
        tool = step.tool
        comp, described, problem = _NO_UNDO
        if compensate is not None:  # (a step without one keeps the defaults: no undo, no problem)
            # (undescribed on a log given the record joined from its parts: described only if that fails)
            comp, described, problem = self._undo_from(step, compensate, result, self._walk_undo,
                                                       self._append_json is None)
            step.compensation = comp
            step.problem = str(problem) if problem else ""
        step.state = _COMMITTED
        # What it returned, bounded and redacted (log/results.py).
        recorded = UNRECORDED if opts.record_result == "none" else logged_result(
            result, opts.record_result, opts.reveal, self._result_limit)[1]
        try:
            append_json = self._append_json  # the usual record: its JSON joined from its parts
            if compensate is None and append_json is not None and step.semantics is _REVERSIBLE and not (
                    claims or step.reconciled) and (text := commit_json(tool, logged_args, opts.origin,
                                                                         recorded)) is not None:
                ticket = append_json(_STEP_COMMITTED, self.saga_id, text, step.index)
            else:
                ticket, problem = self._append_commit(step, comp, described, problem, logged_args, opts, claims,
                                                      recorded)
        except BaseException:
            self._land(step)  # the record was refused (a broken log): out of flight all the same
            raise
        if observed is not None:
            observed.end(StepEnd(_COMMITTED, problem, result))
        if problem is not None:
            self._failed(tool, problem)
        return ticket, problem, self._land(step)

    def _append_commit(
        self,
        step: Step,
        comp: Compensation | None,
        described: dict[str, Any] | None,
        problem: CompensationError | None,
        logged_args: dict[str, Any],
        opts: StepOptions,
        claims: Any,
        recorded: Any,
    ) -> tuple[int, CompensationError | None]:
        """Append the STEP_COMMITTED record (a durable step's joined from its parts, as for its intent, on a log
        that takes that), else built as a body: (its ticket, the step's problem)."""
        append_json = self._append_json
        if step.semantics is not _REVERSIBLE and append_json is not None and (text := durable_commit_json(
                step.operation_id, comp, None if problem is None else str(problem), bool(step.reconciled),
                recorded)) is not None:
            return append_json(_STEP_COMMITTED, self.saga_id, text, step.index), problem
        if described is None and comp is not None:
            described = describe(comp)  # left undescribed for the joined record (see _commit)
        if step.semantics is _REVERSIBLE:  # no intent record before it: this one says what ran
            body: dict[str, Any] = {
                "tool": step.tool, "semantics": step.semantics, "args": logged_args, "compensation": described,
            }
            if opts.origin is not None:
                body["origin"] = opts.origin
            if claims:
                body["provenance"] = claims
        else:  # durable: op was derived for the intent
            body = {"op": step.operation_id, "compensation": described}
        if step.reconciled:
            body["reconciled"] = True  # the call failed, the provider says it landed
        if problem is not None:
            body["problem"] = str(problem)
        if recorded is not UNRECORDED:
            body["result"] = recorded
        try:
            return self.wal.append(_STEP_COMMITTED, self.saga_id, body, step.index), problem  # (no _append call)
        except WALRefused:
            # This log encodes each record as it is appended: that encoding checked the undo
            # (the work done once). Only a refusal walks the undo, to say what it cannot hold.
            marked = _unrecordable(step.tool, described) if comp is not None and not self._walk_undo else None
            if marked is None:
                raise
            body["compensation"], problem = marked
            body["problem"] = step.problem = str(problem)
            return self._append(_STEP_COMMITTED, body, step.index), problem

    def _undo_from(
        self, step: Step, compensate: CompensationFactory | Compensation | None, result: Any, walk: bool = True,
        told: bool = True,
    ) -> tuple[Compensation | None, dict[str, Any] | None, CompensationError | None]:
        """The undo built from the result, as the commit record describes it, and what went wrong.

        ``walk``: check here that the log can hold the undo; False when the record's own encoding
        checks it (see ``_commit``). ``told``: describe it; False leaves that to the commit record
        (None for an undo not yet described).
        """
        problem: CompensationError | None = None
        comp: Compensation | None = None
        if compensate is not None:
            try:
                comp = build(compensate, result, step.tool, step.compensation_key, step.semantics)
            except CompensationError as err:
                problem = err
        described = describe(comp) if told or walk else None
        if walk and comp is not None:
            marked = _unrecordable(step.tool, described)
            if marked is not None:
                described, problem = marked
        return comp, described, problem

    def _failed(self, tool: str, err: BaseException) -> None:
        with self._lock:
            self._failures.append((tool, err))

    def _observe(self, request: StepRequest | None, error: BaseException | None) -> None:
        if self.gate is not None and request is not None:
            self.gate.observe(request, error)

    def _note_posture(self, index: int) -> None:
        """Record it when the kill switch the gate obeys changed since the last step (a setting moved)."""
        since = self._posture_since
        assert since is not None
        with self._lock:
            token, change = since(self._posture_token)
            if change is None:
                return
            self._posture_token = token
        self._append(R.SWITCH_POSTURE_CHANGED, change, index)

    def _last_word(
        self, recheck: Callable[[StepRequest], None], request: StepRequest, step: Step,
        failed: BaseException | None, attempt: int,
    ) -> None:
        """Ask the gate's last-moment controls before attempt ``attempt``; ``failed``: an earlier one's error."""
        if self._posture_since is not None:
            self._note_posture(step.index)
        try:
            recheck(request)
        except StepRefused as refused:
            if failed is None:
                step.halted = "before"
                raise
            step.halted = "between"
            raise StepRefused(
                step.tool,
                f"{refused.reason}; stopped before attempt {attempt}, after attempt {attempt - 1} failed "
                f"({_describe_error(failed)}) and may have landed",
                refused.rule,
            ) from failed
        except SagaQuarantined:
            step.halted = "before" if failed is None else "between"
            raise

    def _attempts(
        self,
        forward: Callable[..., Any],
        step: Step,
        logged_args: Mapping[str, Any],
        opts: StepOptions,
        recheck: Callable[[StepRequest], None] | None = None,
        request: StepRequest | None = None,
        first: bool = False,
    ) -> Protocol[Any]:
        policy = opts.retry
        assert policy is not None
        call = call_op(forward, step, opts.timeout, opts.inline)  # the same op (and key) for every attempt
        attempt = 0
        failed: BaseException | None = None  # an earlier attempt's error, if it may have landed
        while True:
            attempt += 1
            if self.status is not _OPEN and self.status in _UNWOUND:
                self._stop_for_rollback(step, failed, attempt)
            if recheck is not None and request is not None and (first or attempt > 1):
                self._last_word(recheck, request, step, failed, attempt)
            try:
                return (yield call)
            except Exception as err:  # noqa: BLE001 - re-raised unless settled or retried
                # Landed: its result; certainly not: NotApplied; cannot tell: err itself.
                try:
                    return (yield from self._settle_failure(step, err, logged_args, opts))
                except Exception as settled:
                    if failed is None and not _did_nothing(settled, opts):
                        failed = settled
                    if not policy.should_retry(err, attempt):  # decided on what the tool raised
                        raise
            yield Sleep(policy.delay(attempt))

    def _settle_failure(
        self, step: Step, err: Exception, logged_args: Mapping[str, Any], opts: StepOptions
    ) -> Protocol[Any]:
        """After a failed forward call: return its result if it landed, else raise.

        Raises ``NotApplied`` (caused by ``err``) when a reconciler says the effect
        certainly did not happen, and ``err`` itself when nobody can tell.
        """
        if _did_nothing(err, opts) or opts.reconcile is False:
            raise err
        reconciler = reconciler_for(step.tool)
        if reconciler is None:
            raise err
        policy = opts.reconcile if isinstance(opts.reconcile, ReconcilePolicy) else DEFAULT_RECONCILE
        seen = yield from self._ask(step, reconciler, logged_args, policy)
        step.reconciled = seen.exists
        if seen.exists is True:
            return seen.result
        if seen.exists is False:
            raise NotApplied(
                f"{step.tool}: {_describe_error(err)}; the reconciler says it did not happen"
                + (f" ({seen.detail})" if seen.detail else "")
            ) from err
        raise err

    def _ask(
        self, step: Step, reconciler: Callable[..., Any], logged_args: Mapping[str, Any], policy: ReconcilePolicy
    ) -> Protocol[Observation]:
        """Ask ``reconciler`` whether the step's effect landed, until it can tell or the policy is spent."""
        kwargs = {**logged_args, "idempotency_key": step.operation_id}
        seen = Observation(None, detail="not asked")
        for attempt in range(1, policy.attempts + 1):
            yield Sleep(policy.wait_before(attempt))
            self._append(R.RECONCILE_ASKED, {"op": step.operation_id, "attempt": attempt, "about": "forward"},
                         step.index)
            try:
                value = yield Call(reconciler, kwargs, policy.timeout)
                if not isinstance(value, Observation):
                    raise TypeError(f"a reconciler returns an Observation, got {type(value).__name__}")
                seen = value
            except Exception as failed:  # noqa: BLE001 - a reconciler that fails could not tell
                seen = Observation(None, detail=f"the reconciler failed: {_describe_error(failed)}")
            self._append(R.RECONCILE_ANSWERED, {
                "op": step.operation_id, "attempt": attempt, "exists": seen.exists,
                "detail": utf8_safe(seen.detail), "amount": encodable(seen.amount),
            }, step.index)
            if seen.exists is not None:
                break
        return seen

    # -- backward: the unwind itself is engine/unwind.py ----------------------------------

    def rollback_sync(self, cause: BaseException) -> RollbackReport:
        return drive_sync(self._rollback(cause))

    async def rollback(self, cause: BaseException) -> RollbackReport:
        return await drive_async(self._rollback(cause))

    def _rollback(self, cause: BaseException) -> Protocol[RollbackReport]:
        return unwind(self, cause)

    def _hand_over(self, report: RollbackReport | None) -> None:
        self.status = SagaStatus.ABANDONED
        for hook in lifecycles():
            try:
                hook.abandoned(self.saga_id, self.wal, report)
            except Exception:  # noqa: BLE001 - handing over must not hide the original failure
                pass
        self._finish_observers(SagaStatus.ABANDONED)

_owners: dict[int, str] = {}


def _unrecordable(tool: str, described: dict[str, Any] | None) -> tuple[dict[str, Any], CompensationError] | None:
    """The undo's description marked as not replayable, and the step's problem, if the log cannot hold it.

    The undo, built from the result, holds a value the log cannot hold (a NaN amount): the
    commit record still says what ran, with the undo marked as not replayable, and the step
    fails with its effect standing, so the rollback runs the undo here and now. Carrying on
    would leave an effect only this process can undo: a crash would orphan it. (Failing the
    commit record instead would lose the step from the log and break the log for every saga.)
    """
    unfit = unencodable(described, "compensation")
    if unfit is None:
        return None
    return encodable({**(described or {}), "kwargs": None, "recoverable": False}), CompensationError(
        f"{tool!r} ran, but its undo cannot be recorded ({unfit}); it is undone in this process"
    )


def _names_at_door(saga_id: str | None, name: str, tags: frozenset[str]) -> None:
    """Refuse a saga whose id, name or a tag the log cannot hold, before anything is written."""
    for what, text in (("saga_id", saga_id), ("name=", name), *(("tags=", tag) for tag in tags)):
        unfit = name_problem(text, what) if isinstance(text, str) else None
        if unfit is not None:
            raise ConfigurationError(f"saga {unfit}")


def _owner() -> str:
    """``host:pid`` of this process (asked of the system once per process, not per saga)."""
    pid = os.getpid()
    owner = _owners.get(pid)
    if owner is None:
        owner = _owners[pid] = f"{socket.gethostname()}:{pid}"
    return owner


def _posture(gate: GatePort | None) -> Any:
    """What the start record says about the gate, so an opt-out is visible in the log."""
    if gate is None:
        return None  # no gate at all: not even the kill switch was consulted
    posture = getattr(gate, "posture", None)
    if callable(posture):
        try:
            return posture()
        except Exception as err:  # noqa: BLE001 - recorded, not fatal
            return {"type": type(gate).__name__, "posture_unreadable": _describe_error(err)}
    return {"type": type(gate).__name__}

