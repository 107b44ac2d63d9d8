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

import enum
import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Unpack

from agent_saga.credentials import resolve_credentials, scrub
from agent_saga.engine.invoke import (
    Barrier,
    Call,
    Check,
    Protocol,
    Sleep,
    accepts_idempotency_key,
    drive_async,
    drive_sync,
)
from agent_saga.engine.observe import (
    RollbackEvent,
    SagaEnd,
    SagaEvent,
    StepEnd,
    StepEvent,
    Wrappers,
    interceptors,
)
from agent_saga.engine.options import StepKwargs, StepOptions
from agent_saga.engine.ports import GatePort, SagaInfo, StepRequest, lifecycles
from agent_saga.engine.reconcile import DEFAULT_RECONCILE, ReconcilePolicy
from agent_saga.engine.report import RollbackReport, StepOutcome
from agent_saga.engine.retry import RetryPolicy
from agent_saga.engine.tagged import Tagged, untag_args, untag_call
from agent_saga.errors import (
    CompensationError,
    NotApplied,
    RepairRequested,
    SagaClosed,
    SagaQuarantined,
    SagaStopped,
    StepRefused,
)
from agent_saga.ids import new_saga_id, step_keys
from agent_saga.log.base import WAL
from agent_saga.log.encodable import encodable, unencodable, utf8_safe
from agent_saga.log.records import RecordType as R
from agent_saga.redaction import redact_args, scrub_text
from agent_saga.registry import CompensationFactory, inverse_for, reconciler_for, resolve
from agent_saga.registry import recoverable as is_recoverable
from agent_saga.semantics import ActionSemantics, Compensation, Observation, Outcome, StepState

__all__ = ["COMPENSATION_RETRY", "Saga", "SagaStatus", "Step", "describe"]

COMPENSATION_RETRY = RetryPolicy(max_attempts=3, backoff="exponential", base_delay=0.05)

_IRREVERSIBLE = ActionSemantics.IRREVERSIBLE
_COMPENSABLE = ActionSemantics.COMPENSABLE
_REVERSIBLE = ActionSemantics.REVERSIBLE
# The SagaStopped patterns that are a thrash (each also gets a THRASH_STOPPED record).
_THRASH_PATTERNS = frozenset({"identical", "oscillation"})
_SETTLED = (Outcome.COMPENSATED, Outcome.KEPT)


class SagaStatus(enum.StrEnum):
    OPEN = "OPEN"
    ROLLING_BACK = "ROLLING_BACK"
    COMPLETED = "COMPLETED"
    ROLLED_BACK = "ROLLED_BACK"
    FROZEN = "FROZEN"
    #: A rollback that could not finish here (broken log, cancellation): left to the daemon.
    ABANDONED = "ABANDONED"


@dataclass(slots=True)
class Step:
    """One step of a saga, as the engine tracks it."""

    saga_id: str
    index: int
    tool: str
    semantics: ActionSemantics
    state: StepState = StepState.PENDING
    compensation: Compensation | None = None
    undo_declared: bool = False  # a compensate= (or pairing) was given
    problem: str = ""  # why the compensation could not be built
    via_fallback: bool = False
    reconciled: bool | None = None  # what a reconciler answered about a failed call, if asked
    #: Stopped by the gate's last word: "before" any attempt ran, or "between" attempts
    #: after one that may have landed.
    halted: str = ""
    _ids: tuple[str, str] | None = None

    # Derived when first needed: a REVERSIBLE step whose tool takes no key never needs them.
    @property
    def operation_id(self) -> str:
        """The forward call's idempotency key."""
        return self._keys()[0]

    @property
    def compensation_key(self) -> str:
        """The undo's idempotency key (unless its Compensation names its own)."""
        return self._keys()[1]

    def _keys(self) -> tuple[str, str]:
        if self._ids is None:
            self._ids = step_keys(self.saga_id, self.index, self.tool)
        return self._ids


def describe(comp: Compensation | None) -> dict[str, Any] | None:
    """The log's view of an undo: enough for another process to run it, or to know it can't."""
    if comp is None:
        return None
    recoverable = is_recoverable(comp)
    return {
        "handler": comp.handler,
        "kwargs": dict(comp.kwargs) if recoverable else None,
        "key": comp.idempotency_key,
        "description": comp.label if recoverable else comp.description,
        "recoverable": recoverable,
    }


def _normalize(value: Any, tool: str, key: str) -> Compensation | None:
    """Turn what a compensate= factory returned into a Compensation (or refuse it)."""
    if value is None:
        return None
    if isinstance(value, Compensation):
        comp = value
    else:
        if not isinstance(value, Mapping):
            raise CompensationError(
                f"compensate= for {tool!r} must return a Compensation (or a dict naming a registered "
                f"handler), but it returned {type(value).__name__}: {value!r}"
            )
        handler = value.get("handler")
        if not isinstance(handler, str):
            raise CompensationError(
                f"compensate= for {tool!r} returned a dict without a 'handler' name: {dict(value)!r}. "
                "Return {'handler': 'registered.name', 'kwargs': {...}} or a Compensation"
            )
        extra = set(value) - {"handler", "kwargs", "description"}
        if extra:
            raise CompensationError(f"compensate= for {tool!r} returned unknown keys {sorted(extra)}")
        try:
            fn = resolve(handler)
        except KeyError as err:
            raise CompensationError(str(err.args[0])) from None
        comp = Compensation(
            fn=fn, handler=handler, kwargs=value.get("kwargs") or {},
            description=str(value.get("description", "")),
        )
    if comp.handler is not None and comp.fn is not None:
        try:
            registered_fn = resolve(comp.handler)
        except KeyError:
            registered_fn = None
        if registered_fn is not None and registered_fn != comp.fn:  # == : bound methods are fresh objects
            raise CompensationError(
                f"compensation for {tool!r} runs {getattr(comp.fn, '__qualname__', comp.fn)!r} in "
                f"process but names handler {comp.handler!r}, which is registered to "
                f"{getattr(registered_fn, '__qualname__', registered_fn)!r}; the recovery daemon "
                "would run a different function. Use the registered function or another name"
            )
    return comp if comp.idempotency_key is not None else comp.with_key(key)


class Saga:
    """One transaction. Thread-safe; use it from the boundary that created it.

    ``execute`` is the async face, ``execute_sync`` the blocking one; both run the
    same protocol. Created by a boundary (``saga_scope``), which also starts and ends it.
    """

    def __init__(
        self,
        wal: WAL,
        *,
        name: str = "saga",
        gate: GatePort | None = None,
        tags: frozenset[str] = frozenset(),
        saga_id: str | None = None,
        halt_on_compensation_failure: bool = True,
        compensation_retry: RetryPolicy = COMPENSATION_RETRY,
        wait_for_commit: bool = False,
    ) -> None:
        self.saga_id = saga_id or new_saga_id()
        self.name = name
        self.wal = wal
        self.gate = gate
        self.tags = tags
        self.halt_on_compensation_failure = halt_on_compensation_failure
        self.compensation_retry = compensation_retry
        self.wait_for_commit = wait_for_commit
        self.status = SagaStatus.OPEN
        self.report: RollbackReport | None = None
        self._steps: list[Step] = []
        self._failures: list[tuple[str, BaseException]] = []
        self._unprotected: list[str] = []
        # The refusal that ended this saga (repair spent, thrash): every later step is refused.
        self._stopped: SagaStopped | None = None
        self._lock = threading.Lock()
        self._started = False
        self._observed: Wrappers | None = None
        # The gate's switch posture as last recorded (see _note_posture); None: not tracked.
        self._posture_since: Callable[[Any], tuple[Any, dict[str, Any] | None]] | None = None
        self._posture_token: Any = None

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
        for hook in lifecycles():  # recovery's lease, installed from above this layer
            body.update(hook.started(self.saga_id, self.wal) or {})
        self._append(R.SAGA_STARTED, body)
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
        self._finish_observers(status)

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
            unknown = [s.index for s in self._steps if s.state is StepState.UNKNOWN]
            steps = len(self._steps)
            unprotected = list(self._unprotected)
        body: dict[str, Any] = {"steps": steps, "unknown": unknown}
        if unprotected:
            body["unprotected"] = unprotected
        try:
            yield from self._end(R.SAGA_COMPLETED, body, SagaStatus.COMPLETED)
        except BaseException:
            # The commit is not durable: it did not happen. Hand the saga to the daemon
            # (its lease stops now) rather than keep it looking alive.
            self._hand_over(None)
            raise

    def freeze(self) -> None:
        """Stop without unwinding (quarantine): the saga stays open for a human."""
        with self._lock:
            self.status = SagaStatus.FROZEN
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

    async def execute(
        self,
        *,
        tool: str,
        forward: Callable[..., Any],
        semantics: ActionSemantics | str | None = None,
        args: Mapping[str, Any] | None = None,
        options: StepOptions | None = None,
        **more: Unpack[StepKwargs],
    ) -> Any:
        """Run one step and return its result (async face).

        ``forward`` is called with no arguments (plus ``idempotency_key`` if it
        names that parameter); sync callables run on a worker thread unless
        ``inline=True``. ``args`` are what the gate polices and the log records
        (secret-looking names redacted). The step's options come from ``options``
        and/or keywords (``semantics=``, ``compensate=``, ... — see StepOptions).
        """
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
        return drive_sync(self._step(tool, forward, args, StepOptions.build(options, semantics, more)))

    @staticmethod
    def _undo_for(tool: str, forward: Callable[..., Any], opts: StepOptions) -> CompensationFactory | Compensation | None:
        if not isinstance(tool, str) or not tool:
            raise CompensationError(f"tool= must be a non-empty name, got {tool!r}")
        if not callable(forward):
            raise CompensationError(f"forward= for {tool!r} must be callable, got {forward!r}")
        compensate = opts.compensate
        if compensate is None and opts.semantics is not _IRREVERSIBLE:
            compensate = inverse_for(forward)
            if compensate is None and opts.semantics is _COMPENSABLE:
                raise CompensationError(
                    f"{tool!r} is declared COMPENSABLE but has no undo: pass compensate= (a factory "
                    "over the forward result), or pair an inverse with @inverse_of"
                )
        return compensate

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

    def _step(
        self,
        tool: str,
        forward: Callable[..., Any],
        args: Mapping[str, Any] | None,
        opts: StepOptions,
        via_fallback: bool = False,
    ) -> Protocol[Any]:
        # The phases are helper methods, not sub-generators: only this frame yields, so a
        # step costs no more frames than it did as one function (measured, issue 31).
        compensate = self._undo_for(tool, forward, opts)
        step = self._open(tool, opts.semantics, compensate is not None, via_fallback)
        plain_args, tagged = untag_args(args) if args else (args, None)
        claims = None
        if tagged:
            # The tool gets plain values; the gate sees the tags; the log keeps what they claim.
            forward = untag_call(forward)
            claims = encodable({name: tag.claim() for name, tag in tagged.items()})
        # Admission: records its own refusals.
        logged_args, request, pending = self._admit(step, args, plain_args, opts, tagged, claims)
        waits = pending is not None
        if pending is not None:
            try:
                yield pending
            except StepRefused as refused:
                self._refused(step, refused, logged_args, claims)
                raise
        observed = None
        if interceptors():
            observed = Wrappers.start("step", StepEvent(
                self.saga_id, self.name, step.index, tool, step.semantics, logged_args, opts.origin, via_fallback,
            ))
        # Intent: the undo declared known before the call is what rescues an UNKNOWN outcome.
        durable = step.semantics is not _REVERSIBLE
        prebuilt = None
        if durable:
            prebuilt = self._prebuild(compensate, tool, step.compensation_key)
            try:
                ticket = self._append(R.STEP_INTENT, self._intent(step, compensate, prebuilt, logged_args, opts,
                                                                  claims), step.index)
                yield Barrier(self.wal, ticket)
            except BaseException as err:
                self._unstarted(step, err, observed)
                raise
        # Call: the gate's last word, asked again before every attempt that does not follow
        # its check at once: the intent's barrier (or a wait) came in between, or a retry's sleep.
        recheck = getattr(self.gate, "recheck", None) if request is not None else None
        try:
            if opts.retry is None:  # the common case, without a nested generator
                if recheck is not None and request is not None and (durable or waits):
                    self._last_word(recheck, request, step, None, 1)
                kwargs = {"idempotency_key": step.operation_id} if accepts_idempotency_key(forward) else {}
                try:
                    result = yield Call(forward, kwargs, opts.timeout, opts.inline)
                except Exception as failed:  # noqa: BLE001 - re-raised unless a reconciler settles it
                    # Did it land anyway? Ask, if someone can answer (else this re-raises).
                    result = yield from self._settle_failure(step, failed, logged_args, opts)
            else:
                result = yield from self._attempts(
                    forward, step, logged_args, opts, recheck, request, durable or waits
                )
        except BaseException as err:
            # Failure, then the fallback (a step of its own) when one may run.
            fallback = self._call_failed(step, err, compensate, prebuilt, observed, request, opts)
            if fallback is None:
                raise
            fallback_opts = opts.with_changes(fallback_action=None, retry=None, compensate=compensate)
            return (yield from self._step(tool, fallback, args, fallback_opts, True))
        self._observe(request, None)
        # Commit: its barrier is the next step's intent barrier, or the saga's end, unless asked.
        ticket = self._commit(step, result, compensate, logged_args, opts, claims, observed)
        if durable and (self.wait_for_commit if opts.wait_for_commit is None else opts.wait_for_commit):
            yield Barrier(self.wal, ticket)
        return result

    def _open(self, tool: str, sem: ActionSemantics, undo_declared: bool, via_fallback: bool) -> Step:
        """The step, numbered and on the stack, once the saga is known to take one."""
        with self._lock:
            if self.status is not SagaStatus.OPEN or not self._started:
                self._check_open()
            index = len(self._steps) + 1  # steps are numbered from 1, as people count them
            step = Step(self.saga_id, index, tool, sem, undo_declared=undo_declared, via_fallback=via_fallback)
            self._steps.append(step)
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
            stopped = self._stopped
            if stopped is not None:
                # Whatever the framework did with the stopping error, nothing more runs here.
                raise StepRefused(tool, f"the saga was stopped ({stopped.pattern}): {stopped.reason}", "stopped")
            if gate is not None:
                request = StepRequest(
                    self.saga_id, step.index, tool, step.semantics, logged_args, self.tags,
                    provenance=tagged or None,
                    policy_args=frozenset(opts.policy_args) if opts.policy_args else frozenset(),
                )
                if self._posture_since is not None:
                    self._note_posture(step.index)
                if getattr(gate, "never_waits", False):
                    gate.check(request)  # nothing to await: spare the driver a round trip
                else:
                    pending = Check(gate, request)
        except StepRefused as refused:
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

    def _intent(
        self,
        step: Step,
        compensate: CompensationFactory | Compensation | None,
        prebuilt: Compensation | None,
        logged_args: dict[str, Any],
        opts: StepOptions,
        claims: Any,
    ) -> dict[str, Any]:
        """The STEP_INTENT record of a durable step."""
        intent: dict[str, Any] = {
            "tool": step.tool, "semantics": step.semantics, "op": step.operation_id, "args": logged_args,
            "compensation": describe(prebuilt), "fallback": step.via_fallback,
        }
        recipe = getattr(compensate, "recipe", None) if prebuilt is None else None
        if recipe is not None:
            # How to build the undo from a result, so another process that learns the
            # result (a reconciler, after a crash) can build it too.
            intent["recipe"] = recipe
        if opts.origin is not None:
            intent["origin"] = opts.origin
        if claims:
            intent["provenance"] = claims
        return intent

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
    ) -> Callable[..., Any] | None:
        """Record a call that failed (NOT_APPLIED or UNKNOWN); the fallback to run next, if one may."""
        halted = step.halted  # "before": nothing ran; "between": an earlier attempt may have landed
        if halted == "before" or (isinstance(err, NotApplied) and halted != "between"):
            step.state = StepState.NOT_APPLIED
            not_applied: dict[str, Any] = {"op": step.operation_id, "error": _describe_error(err)}
            if step.reconciled is not None:
                not_applied["reconciled"] = step.reconciled
            self._append(R.STEP_NOT_APPLIED, not_applied, step.index)
        else:
            step.state = StepState.UNKNOWN
            if step.semantics is _REVERSIBLE:
                # Nothing had to reach the disk before the call, so a declared
                # known-before undo is built only now that it is needed.
                prebuilt = self._prebuild(compensate, step.tool, step.compensation_key)
            step.compensation = prebuilt
            self._append(R.STEP_UNKNOWN, {
                "tool": step.tool, "semantics": step.semantics, "op": step.operation_id,
                "error": _describe_error(err), "compensation": describe(prebuilt),
            }, step.index)
        self._failed(step.tool, err)
        if observed is not None:
            observed.end(StepEnd(step.state, err))
        if not isinstance(err, Exception) or halted:
            return None  # a halt (or a quarantine) is not the tool's failure: no fallback runs
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
    ) -> int:
        """Build the undo from the result and append STEP_COMMITTED (its ticket); raise if the undo failed."""
        tool = step.tool
        comp, described, problem = self._undo_from(step, compensate, result)
        step.compensation = comp
        step.problem = str(problem) if problem else ""
        step.state = StepState.COMMITTED
        if step.semantics is _REVERSIBLE:  # no intent record before it: this one says what ran
            body: dict[str, Any] = {
                "tool": tool, "semantics": step.semantics, "args": logged_args, "compensation": described,
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
        ticket = self._append(R.STEP_COMMITTED, body, step.index)
        if observed is not None:
            observed.end(StepEnd(StepState.COMMITTED, problem, result))
        if problem is not None:
            self._failed(tool, problem)
            raise problem
        return ticket

    def _undo_from(
        self, step: Step, compensate: CompensationFactory | Compensation | None, result: Any
    ) -> tuple[Compensation | None, dict[str, Any] | None, CompensationError | None]:
        """The undo built from the result, as the commit record describes it, and what went wrong."""
        problem: CompensationError | None = None
        comp: Compensation | None = None
        if compensate is not None:
            try:
                comp = self._build(compensate, result, step.tool, step.compensation_key, step.semantics)
            except CompensationError as err:
                problem = err
        described = describe(comp)
        unfit = unencodable(described, "compensation") if comp is not None else None
        if unfit is not None:
            # The undo, built from the result, holds a value the log cannot hold (a NaN
            # amount): the commit record still says what ran, with the undo marked as not
            # replayable, and the step fails with its effect standing, so the rollback runs
            # the undo here and now. Carrying on would leave an effect only this process
            # can undo: a crash would orphan it. (Failing the commit record instead would
            # lose the step from the log and break the log for every saga.)
            described = encodable({**(described or {}), "kwargs": None, "recoverable": False})
            problem = CompensationError(
                f"{step.tool!r} ran, but its undo cannot be recorded ({unfit}); it is undone in this process"
            )
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
        kwargs = {"idempotency_key": step.operation_id} if accepts_idempotency_key(forward) else {}
        attempt = 0
        failed: BaseException | None = None  # an earlier attempt's error, if it may have landed
        while True:
            attempt += 1
            if recheck is not None and request is not None and (first or attempt > 1):
                self._last_word(recheck, request, step, failed, attempt)
            try:
                return (yield Call(forward, kwargs, opts.timeout, opts.inline))
            except Exception as err:  # noqa: BLE001 - re-raised unless settled or retried
                # Landed: its result; certainly not: NotApplied; cannot tell: err itself.
                try:
                    return (yield from self._settle_failure(step, err, logged_args, opts))
                except Exception as settled:
                    if failed is None and not isinstance(settled, NotApplied):
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
        if isinstance(err, NotApplied) or opts.reconcile is False:
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

    @staticmethod
    def _prebuild(
        compensate: CompensationFactory | Compensation | None, tool: str, key: str
    ) -> Compensation | None:
        """The undo when it is declared known before the call; None otherwise (never a probe)."""
        if compensate is None:
            return None
        if isinstance(compensate, Compensation):
            return _normalize(compensate, tool, key)
        # The step's opts.compensate when one was given, else an @inverse_of factory: asking
        # the factory itself is all StepOptions.known_before_call would ask.
        if getattr(compensate, "known_before_call", False):
            return _normalize(compensate(None), tool, key)
        return None

    @staticmethod
    def _build(
        compensate: CompensationFactory | Compensation, result: Any, tool: str, key: str, sem: ActionSemantics
    ) -> Compensation | None:
        if isinstance(compensate, Compensation):
            return _normalize(compensate, tool, key)
        try:
            value = compensate(result)
        except CompensationError:
            raise
        except Exception as err:
            raise CompensationError(
                f"compensate= for {tool!r} raised {type(err).__name__}: {err} when given the "
                f"forward result {result!r}; the effect happened but cannot be undone"
            ) from err
        comp = _normalize(value, tool, key)
        if comp is None and sem is _COMPENSABLE:
            raise CompensationError(
                f"compensate= for COMPENSABLE {tool!r} returned None for result {result!r}; return "
                "a Compensation, or declare the step REVERSIBLE if nothing needs undoing"
            )
        return comp

    # -- backward -----------------------------------------------------------------------

    def rollback_sync(self, cause: BaseException) -> RollbackReport:
        return drive_sync(self._rollback(cause))

    async def rollback(self, cause: BaseException) -> RollbackReport:
        return await drive_async(self._rollback(cause))

    def _rollback(self, cause: BaseException) -> Protocol[RollbackReport]:
        with self._lock:
            if self.status is not SagaStatus.OPEN:
                raise SagaClosed(f"saga {self.saga_id} is already {self.status.value.lower()}")
            self.status = SagaStatus.ROLLING_BACK
            stack = [s for s in reversed(self._steps) if s.state is not StepState.NOT_APPLIED]
            unprotected = tuple(self._unprotected)
        cause_text = _describe_error(cause)
        outcomes: list[StepOutcome] = []
        halted_at: int | None = None
        try:
            self._append(R.ROLLBACK_STARTED, {"cause": cause_text})
            for step in stack:
                if halted_at is not None:
                    outcomes.append(self._settle(
                        step, Outcome.UNRESOLVED, R.STEP_UNRESOLVED,
                        f"not attempted: rollback halted at step {halted_at}",
                    ))
                    continue
                if step.compensation is not None:
                    outcome = yield from self._compensate(step)
                    outcomes.append(outcome)
                    # An undo that failed, or that a halt naming it stopped, halts the unwind.
                    if outcome.outcome is not Outcome.COMPENSATED and self.halt_on_compensation_failure:
                        halted_at = step.index
                    continue
                outcomes.append(self._settle_without_undo(step))
            report = RollbackReport(
                self.saga_id, cause_text, tuple(outcomes), halted_at is not None, unprotected=unprotected
            )
            self.report = report
            yield from self._end(R.SAGA_ROLLED_BACK, {
                "clean": report.clean, "halted": report.halted,
                "outcomes": {o.value: len(report.with_outcome(o)) for o in Outcome},
                **({"unprotected": list(unprotected)} if unprotected else {}),
            }, SagaStatus.ROLLED_BACK)
        except BaseException as err:
            report = self._abandon(cause_text, outcomes, stack, halted_at, unprotected, err)
            if not isinstance(err, Exception):
                raise  # cancellation: the caller's task is being stopped; the daemon finishes
        return report

    def _abandon(
        self,
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
        why = _describe_error(err)
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
            self.saga_id, cause_text, tuple(outcomes), halted_at is not None, why, unprotected
        )
        self.report = report
        self._hand_over(report)
        return report

    def _hand_over(self, report: RollbackReport | None) -> None:
        self.status = SagaStatus.ABANDONED
        for hook in lifecycles():
            try:
                hook.abandoned(self.saga_id, self.wal, report)
            except Exception:  # noqa: BLE001 - handing over must not hide the original failure
                pass
        self._finish_observers(SagaStatus.ABANDONED)

    def _settle_without_undo(self, step: Step) -> StepOutcome:
        if step.semantics is _REVERSIBLE and not step.undo_declared:
            return self._settle(step, Outcome.KEPT, R.STEP_KEPT, "REVERSIBLE with nothing to undo")
        if step.state is StepState.COMMITTED:
            why = step.problem or (
                "IRREVERSIBLE: no undo exists" if step.semantics is _IRREVERSIBLE else "no undo was given"
            )
            return self._settle(step, Outcome.ORPHANED, R.STEP_ORPHANED, why)
        return self._settle(
            step, Outcome.UNRESOLVED, R.STEP_UNRESOLVED,
            "outcome unknown and no undo was known before the call: reconcile or escalate",
        )

    def _settle(self, step: Step, outcome: Outcome, rtype: R, detail: str) -> StepOutcome:
        observed = self._observe_rollback(step)
        self._append(rtype, {"op": step.operation_id, "detail": detail}, step.index)
        result = StepOutcome(
            step.index, step.tool, step.semantics, step.state, outcome,
            step.compensation.label if step.compensation else None, 0,
            step.compensation.idempotency_key if step.compensation else None,
            detail, step.via_fallback,
        )
        if observed is not None:
            observed.end(result)
        return result

    def _observe_rollback(self, step: Step) -> Wrappers | None:
        if not interceptors():
            return None
        comp = step.compensation
        return Wrappers.start("rollback_step", RollbackEvent(
            self.saga_id, step.index, step.tool, step.semantics,
            comp.label if comp else None, comp.idempotency_key if comp else None,
            comp.handler if comp else None,
        ))

    def _compensate(self, step: Step) -> Protocol[StepOutcome]:
        comp = step.compensation
        assert comp is not None
        observed = self._observe_rollback(step)
        ticket = self._append(R.COMPENSATION_STARTED, {"key": comp.idempotency_key, "handler": comp.handler},
                              step.index)
        if self.wal.durable:
            # No undo starts before every record ahead of it is on disk: the previous undo's
            # outcome (and this one's intent, in the same flush). A crash then leaves at most
            # this one undo unrecorded, the only one the daemon repeats (same key).
            yield Barrier(self.wal, ticket)
        policy = self.compensation_retry
        # Undos run under a halt unless it names them: asked before every attempt.
        check_undo = getattr(self.gate, "check_undo", None) if self.gate is not None else None
        attempt = 0
        secrets: list[str] = []
        while True:
            attempt += 1
            if check_undo is not None:
                try:
                    check_undo(StepRequest(self.saga_id, step.index, _undo_tool(comp), step.semantics, {}, self.tags))
                except StepRefused as stop:
                    attempt -= 1  # the attempts that ran
                    detail = f"undo not run (attempt {attempt + 1} stopped by the gate): {stop.reason}"
                    self._append(R.STEP_UNRESOLVED, {
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
                yield Call(fn, kwargs)
            except Exception as err:  # noqa: BLE001 - every failure of an undo is recorded, none hidden
                if policy.should_retry(err, attempt):
                    yield Sleep(policy.delay(attempt))
                    continue
                detail = scrub(_describe_error(err), secrets)
                self._append(R.COMPENSATION_FAILED, {
                    "key": comp.idempotency_key, "attempts": attempt, "error": detail,
                }, step.index)
                outcome = Outcome.FAILED
                break
            self._append(R.STEP_COMPENSATED, {"key": comp.idempotency_key, "attempts": attempt}, step.index)
            outcome, detail = Outcome.COMPENSATED, ""
            break
        result = StepOutcome(
            step.index, step.tool, step.semantics, step.state, outcome, comp.label, attempt,
            comp.idempotency_key, detail, step.via_fallback,
        )
        if observed is not None:
            observed.end(result)
        return result


_owners: dict[int, str] = {}


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


def _undo_tool(comp: Compensation) -> str:
    """The name a halt uses for an undo: its registered handler, else its function's name."""
    return comp.handler or str(getattr(comp.fn, "__qualname__", "") or comp.label)


def _describe_error(err: BaseException) -> str:
    # Where error text becomes records, reports and SagaAborted's message: a secret this
    # process knows (or a URL's password) echoed in it is scrubbed, and utf8_safe keeps
    # a lone surrogate in it from breaking the log.
    text = utf8_safe(scrub_text(str(err)))
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
