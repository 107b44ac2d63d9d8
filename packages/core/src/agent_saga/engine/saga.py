"""The saga state machine: run steps forward, unwind them newest-first.

Write-ahead protocol for a non-REVERSIBLE step:

1. ask the gate (nothing has happened yet, so refusing is free);
2. append STEP_INTENT, carrying the undo if it is known before the call, and
   wait until it is durable;
3. call the tool (each attempt under its own timeout, same idempotency key);
4. append STEP_COMMITTED with the undo derived from the result, and do *not*
   wait: the next step's intent barrier, or the saga's end, covers it.

REVERSIBLE steps skip (2) and never wait on the disk.
"""

from __future__ import annotations

import enum
import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

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
from agent_saga.engine.ports import GatePort, SagaInfo, StepRequest, lifecycles
from agent_saga.engine.report import RollbackReport, StepOutcome
from agent_saga.engine.retry import RetryPolicy
from agent_saga.errors import CompensationError, NotApplied, SagaClosed, StepRefused
from agent_saga.ids import new_saga_id, operation_id
from agent_saga.log.base import WAL
from agent_saga.log.records import RecordType as R
from agent_saga.registry import CompensationFactory, inverse_for, is_prebound, resolve
from agent_saga.semantics import ActionSemantics, Compensation, Outcome, StepState

__all__ = ["COMPENSATION_RETRY", "Saga", "SagaStatus", "Step", "describe"]

COMPENSATION_RETRY = RetryPolicy(max_attempts=3, backoff="exponential", base_delay=0.05)

_IRREVERSIBLE = ActionSemantics.IRREVERSIBLE
_COMPENSABLE = ActionSemantics.COMPENSABLE
_REVERSIBLE = ActionSemantics.REVERSIBLE
# What a factory raises when it needs a result it was not given (outcome unknown).
_NEEDS_RESULT = (TypeError, KeyError, AttributeError, IndexError)


class SagaStatus(enum.StrEnum):
    OPEN = "OPEN"
    ROLLING_BACK = "ROLLING_BACK"
    COMPLETED = "COMPLETED"
    ROLLED_BACK = "ROLLED_BACK"
    FROZEN = "FROZEN"


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
            self._ids = (
                operation_id(self.saga_id, self.index, self.tool, "forward"),
                operation_id(self.saga_id, self.index, self.tool, "compensate"),
            )
        return self._ids


def describe(comp: Compensation | None) -> dict[str, Any] | None:
    """The log's view of an undo: enough for another process to run it, or to know it can't."""
    if comp is None:
        return None
    recoverable = comp.recoverable
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
    if isinstance(value, Mapping):
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
        value = Compensation(
            fn=fn, handler=handler, kwargs=value.get("kwargs") or {},
            description=str(value.get("description", "")),
        )
    if not isinstance(value, Compensation):
        raise CompensationError(
            f"compensate= for {tool!r} must return a Compensation (or a dict naming a registered "
            f"handler), but it returned {type(value).__name__}: {value!r}"
        )
    if value.handler is not None and value.fn is not None:
        try:
            registered_fn = resolve(value.handler)
        except KeyError:
            registered_fn = None
        if registered_fn is not None and registered_fn != value.fn:  # == : bound methods are fresh objects
            raise CompensationError(
                f"compensation for {tool!r} runs {getattr(value.fn, '__qualname__', value.fn)!r} in "
                f"process but names handler {value.handler!r}, which is registered to "
                f"{getattr(registered_fn, '__qualname__', registered_fn)!r}; the recovery daemon "
                "would run a different function. Use the registered function or another name"
            )
    return value if value.idempotency_key is not None else value.with_key(key)


class Saga:
    """One transaction. Thread-safe; use it from the scope that created it.

    ``execute`` is the async face, ``execute_sync`` the blocking one; both run the
    same protocol. Created by ``saga_scope`` (which also starts and ends it).
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
    ) -> None:
        self.saga_id = saga_id or new_saga_id()
        self.name = name
        self.wal = wal
        self.gate = gate
        self.tags = tags
        self.halt_on_compensation_failure = halt_on_compensation_failure
        self.compensation_retry = compensation_retry
        self.status = SagaStatus.OPEN
        self.report: RollbackReport | None = None
        self._steps: list[Step] = []
        self._lock = threading.Lock()
        self._started = False

    # -- lifecycle --------------------------------------------------------------------

    @property
    def info(self) -> SagaInfo:
        return SagaInfo(self.saga_id, self.name, self.tags)

    @property
    def steps(self) -> tuple[Step, ...]:
        with self._lock:
            return tuple(self._steps)

    def start(self) -> None:
        """Admit the saga through the gate and record its start (no disk wait)."""
        if self._started:
            return
        if self.gate is not None:
            self.gate.admit(self.info)
        self._started = True
        body: dict[str, Any] = {
            "name": self.name,
            "tags": sorted(self.tags),
            "owner": f"{socket.gethostname()}:{os.getpid()}",
            "durable_log": self.wal.durable,
        }
        for hook in lifecycles():  # recovery's lease, installed from above this layer
            body.update(hook.started(self.saga_id, self.wal) or {})
        self._append(R.SAGA_STARTED, body)

    def _append(self, rtype: R, body: Mapping[str, Any], step: int | None = None) -> int:
        return self.wal.append(rtype, self.saga_id, body, step)  # a StrEnum is its own value

    def _end(self, rtype: R, body: Mapping[str, Any], status: SagaStatus) -> Protocol[None]:
        ticket = self._append(rtype, body)
        self.status = status
        yield Barrier(self.wal, ticket)
        for hook in lifecycles():  # only once the end record is durable
            hook.ended(self.saga_id, self.wal)

    def complete_sync(self) -> None:
        drive_sync(self._complete())

    async def complete(self) -> None:
        await drive_async(self._complete())

    def _complete(self) -> Protocol[None]:
        with self._lock:
            self._check_open()
            unknown = [s.index for s in self._steps if s.state is StepState.UNKNOWN]
            steps = len(self._steps)
        yield from self._end(R.SAGA_COMPLETED, {"steps": steps, "unknown": unknown}, SagaStatus.COMPLETED)

    def freeze(self) -> None:
        """Stop without unwinding (quarantine): the saga stays open for a human."""
        with self._lock:
            self.status = SagaStatus.FROZEN

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

    # -- forward ------------------------------------------------------------------------

    async def execute(
        self,
        *,
        tool: str,
        semantics: ActionSemantics | str,
        forward: Callable[..., Any],
        compensate: CompensationFactory | None = None,
        args: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        fallback_action: Callable[..., Any] | None = None,
        inline: bool = False,
    ) -> Any:
        """Run one step and return its result (async face).

        ``forward`` is called with no arguments (plus ``idempotency_key`` if it
        names that parameter); sync callables run on a worker thread unless
        ``inline=True``. ``compensate`` maps the forward result to its undo.
        ``args`` are what the gate polices and the log records.
        """
        return await drive_async(self._step(
            tool, semantics, forward, compensate, args, retry, timeout, fallback_action, inline
        ))

    def execute_sync(
        self,
        *,
        tool: str,
        semantics: ActionSemantics | str,
        forward: Callable[..., Any],
        compensate: CompensationFactory | None = None,
        args: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        fallback_action: Callable[..., Any] | None = None,
    ) -> Any:
        """Run one step and return its result, blocking (sync face)."""
        return drive_sync(self._step(
            tool, semantics, forward, compensate, args, retry, timeout, fallback_action, False
        ))

    def _declare(
        self,
        tool: str,
        semantics: ActionSemantics | str,
        forward: Callable[..., Any],
        compensate: CompensationFactory | None,
    ) -> tuple[ActionSemantics, CompensationFactory | None]:
        if not isinstance(tool, str) or not tool:
            raise CompensationError(f"tool= must be a non-empty name, got {tool!r}")
        if not callable(forward):
            raise CompensationError(f"forward= for {tool!r} must be callable, got {forward!r}")
        sem = ActionSemantics.parse(semantics)
        if compensate is not None and not callable(compensate):
            raise CompensationError(
                f"compensate= for {tool!r} must be a factory (forward_result) -> Compensation, "
                f"got {type(compensate).__name__}; wrap a fixed undo as `lambda r: Compensation(...)` "
                "or use call_with(fn, ...)"
            )
        if sem is _IRREVERSIBLE and compensate is not None:
            raise CompensationError(
                f"{tool!r} is declared IRREVERSIBLE but was given compensate=: an effect that can be "
                "undone is COMPENSABLE. Change the semantics, or drop compensate="
            )
        if sem is _COMPENSABLE and compensate is None:
            compensate = inverse_for(forward)
            if compensate is None:
                raise CompensationError(
                    f"{tool!r} is declared COMPENSABLE but has no undo: pass compensate= (a factory "
                    "over the forward result), or pair an inverse with @inverse_of"
                )
        return sem, compensate

    def _step(
        self,
        tool: str,
        semantics: ActionSemantics | str,
        forward: Callable[..., Any],
        compensate: CompensationFactory | None,
        args: Mapping[str, Any] | None,
        retry: RetryPolicy | None,
        timeout: float | None,
        fallback: Callable[..., Any] | None,
        inline: bool,
        via_fallback: bool = False,
    ) -> Protocol[Any]:
        sem, compensate = self._declare(tool, semantics, forward, compensate)
        logged_args = dict(args) if args else {}
        with self._lock:
            self._check_open()
            index = len(self._steps) + 1  # steps are numbered from 1, as people count them
            step = Step(
                self.saga_id, index, tool, sem,
                undo_declared=compensate is not None, via_fallback=via_fallback,
            )
            self._steps.append(step)
        request = None
        if self.gate is not None:
            request = StepRequest(self.saga_id, index, tool, sem, logged_args, self.tags)
            try:
                yield Check(self.gate, request)
            except StepRefused as refused:
                step.state = StepState.NOT_APPLIED
                self._append(R.STEP_REFUSED, {
                    "tool": tool, "semantics": sem, "args": logged_args,
                    "reason": refused.reason, "rule": refused.rule,
                }, index)
                raise

        # The undo known before the call is what rescues an UNKNOWN outcome.
        durable = sem is not _REVERSIBLE
        prebuilt = self._prebuild(compensate, tool, step.compensation_key) if durable else None
        if durable:
            ticket = self._append(R.STEP_INTENT, {
                "tool": tool, "semantics": sem, "op": step.operation_id, "args": logged_args,
                "compensation": describe(prebuilt), "fallback": via_fallback,
            }, index)
            yield Barrier(self.wal, ticket)

        try:
            if retry is None:  # the common case, without a nested generator
                kwargs = {"idempotency_key": step.operation_id} if accepts_idempotency_key(forward) else {}
                result = yield Call(forward, kwargs, timeout, inline)
            else:
                result = yield from self._attempts(forward, step.operation_id, retry, timeout, inline)
        except BaseException as err:
            if isinstance(err, NotApplied):
                step.state = StepState.NOT_APPLIED
                self._append(R.STEP_NOT_APPLIED, {"op": step.operation_id, "error": _describe_error(err)}, index)
            else:
                step.state = StepState.UNKNOWN
                if not durable and compensate is not None:
                    # Nothing had to reach the disk before the call, so the undo that
                    # does not need the result is derived only now that it is needed.
                    prebuilt = self._prebuild(compensate, tool, step.compensation_key)
                step.compensation = prebuilt
                self._append(R.STEP_UNKNOWN, {
                    "tool": tool, "semantics": sem, "op": step.operation_id,
                    "error": _describe_error(err), "compensation": describe(prebuilt),
                }, index)
            if not isinstance(err, Exception):
                raise
            self._observe(request, err)
            if fallback is None:
                raise
            # A failed primary that may have landed stays on the stack as UNKNOWN;
            # the fallback is a step of its own, undone like any other.
            return (yield from self._step(
                tool, sem, fallback, compensate, args, None, timeout, None, inline, True
            ))
        self._observe(request, None)

        problem: CompensationError | None = None
        comp: Compensation | None = None
        if compensate is not None:
            try:
                comp = self._build(compensate, result, tool, step.compensation_key, sem)
            except CompensationError as err:
                problem = err
        step.compensation = comp
        step.problem = str(problem) if problem else ""
        step.state = StepState.COMMITTED
        if sem is _REVERSIBLE:  # no intent record before it: this one says what ran
            body: dict[str, Any] = {
                "tool": tool, "semantics": sem, "args": logged_args, "compensation": describe(comp),
            }
        else:
            body = {"op": step.operation_id, "compensation": describe(comp)}
        if problem is not None:
            body["problem"] = str(problem)
        self._append(R.STEP_COMMITTED, body, index)
        if problem is not None:
            raise problem
        return result

    def _observe(self, request: StepRequest | None, error: BaseException | None) -> None:
        if self.gate is not None and request is not None:
            self.gate.observe(request, error)

    def _attempts(
        self,
        forward: Callable[..., Any],
        key: str,
        retry: RetryPolicy,
        timeout: float | None,
        inline: bool,
    ) -> Protocol[Any]:
        policy = retry
        kwargs = {"idempotency_key": key} if accepts_idempotency_key(forward) else {}
        attempt = 0
        while True:
            attempt += 1
            try:
                return (yield Call(forward, kwargs, timeout, inline))
            except Exception as err:
                if not policy.should_retry(err, attempt):
                    raise
            yield Sleep(policy.delay(attempt))

    @staticmethod
    def _prebuild(
        compensate: CompensationFactory | None, tool: str, key: str
    ) -> Compensation | None:
        """The undo as far as it is known before the call (factory over ``None``)."""
        if compensate is None:
            return None
        if is_prebound(compensate):
            return _normalize(compensate(None), tool, key)
        try:
            value: Any = compensate(None)
        except _NEEDS_RESULT:
            return None  # it needs the result; nothing is known before the call
        return _normalize(value, tool, key)

    @staticmethod
    def _build(
        compensate: CompensationFactory, result: Any, tool: str, key: str, sem: ActionSemantics
    ) -> Compensation | None:
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
            stack = list(reversed(self._steps))
        cause_text = _describe_error(cause)
        self._append(R.ROLLBACK_STARTED, {"cause": cause_text})
        outcomes: list[StepOutcome] = []
        halted_at: int | None = None
        for step in stack:
            if step.state is StepState.NOT_APPLIED:
                continue
            if halted_at is not None:
                outcomes.append(self._settle(
                    step, Outcome.UNRESOLVED, R.STEP_UNRESOLVED,
                    f"not attempted: rollback halted at step {halted_at}",
                ))
                continue
            if step.compensation is not None:
                outcome = yield from self._compensate(step)
                outcomes.append(outcome)
                if outcome.outcome is Outcome.FAILED and self.halt_on_compensation_failure:
                    halted_at = step.index
                continue
            outcomes.append(self._settle_without_undo(step))
        report = RollbackReport(self.saga_id, cause_text, tuple(outcomes), halted_at is not None)
        self.report = report
        yield from self._end(R.SAGA_ROLLED_BACK, {
            "clean": report.clean, "halted": report.halted,
            "outcomes": {o.value: len(report.with_outcome(o)) for o in Outcome},
        }, SagaStatus.ROLLED_BACK)
        return report

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
        self._append(rtype, {"op": step.operation_id, "detail": detail}, step.index)
        return StepOutcome(
            step.index, step.tool, step.semantics, step.state, outcome,
            step.compensation.label if step.compensation else None, 0,
            step.compensation.idempotency_key if step.compensation else None,
            detail, step.via_fallback,
        )

    def _compensate(self, step: Step) -> Protocol[StepOutcome]:
        comp = step.compensation
        assert comp is not None
        self._append(R.COMPENSATION_STARTED, {"key": comp.idempotency_key, "handler": comp.handler}, step.index)
        policy = self.compensation_retry
        attempt = 0
        while True:
            attempt += 1
            try:
                # Resolved per attempt: a handler missing now is a failed attempt, not a crash.
                fn = comp.fn if comp.fn is not None else resolve(comp.handler or "")
                kwargs = dict(comp.kwargs)
                if accepts_idempotency_key(fn):
                    kwargs["idempotency_key"] = comp.idempotency_key
                yield Call(fn, kwargs)
            except Exception as err:  # noqa: BLE001 - every failure of an undo is recorded, none hidden
                if policy.should_retry(err, attempt):
                    yield Sleep(policy.delay(attempt))
                    continue
                detail = _describe_error(err)
                self._append(R.COMPENSATION_FAILED, {
                    "key": comp.idempotency_key, "attempts": attempt, "error": detail,
                }, step.index)
                outcome = Outcome.FAILED
                break
            self._append(R.STEP_COMPENSATED, {"key": comp.idempotency_key, "attempts": attempt}, step.index)
            outcome, detail = Outcome.COMPENSATED, ""
            break
        return StepOutcome(
            step.index, step.tool, step.semantics, step.state, outcome, comp.label, attempt,
            comp.idempotency_key, detail, step.via_fallback,
        )


def _describe_error(err: BaseException) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
