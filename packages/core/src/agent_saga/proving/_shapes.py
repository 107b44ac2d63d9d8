"""Failure shapes of a saga, and one run of a shape against the real engine.

A shape says, for a saga of a few steps: how each step that committed can be
undone (its undo works, its undo refuses every attempt, or it has no undo at
all), how the step whose call fails fails (it certainly did nothing; it landed
and its answer was lost, with an undo known before the call that works or
refuses, or with none), and whether the engine halts on a failed undo. Running a
shape drives ``saga.execute`` with tools that write to a ledger, so what the
engine did can be checked against what it says it did.
"""

from __future__ import annotations

import contextvars
import enum
import itertools
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from agent_saga.engine.ports import SagaInfo, StepRequest
from agent_saga.engine.report import RollbackReport, SagaAborted
from agent_saga.engine.retry import RetryPolicy
from agent_saga.errors import NotApplied
from agent_saga.log.base import MemoryWAL
from agent_saga.log.records import Record
from agent_saga.registry import call_with, compensator, registered, resolve
from agent_saga.semantics import ActionSemantics, Compensation

__all__ = [
    "ATTEMPTS",
    "RETRY",
    "Failing",
    "Ledger",
    "OpenGate",
    "Run",
    "SagaFails",
    "Scope",
    "Shape",
    "Undo",
    "committed_steps",
    "count",
    "run_shape",
    "shapes",
    "undo_in",
]

#: Attempts every undo gets (the verifier's compensation retry policy).
ATTEMPTS = 3
#: That policy: no wait between attempts.
RETRY = RetryPolicy(max_attempts=ATTEMPTS, backoff="constant", base_delay=0.0)
_HANDLER = "agent_saga.proving.undo"

#: What the verifier drives: ``saga_scope``, or a stand-in for it (a seam for tests).
Scope = Callable[..., AbstractAsyncContextManager[Any]]


class Undo(enum.StrEnum):
    """How a committed step can be undone."""

    WORKS = "works"
    REFUSES = "refuses"  # fails every attempt
    NONE = "none"  # IRREVERSIBLE: there is no undo


class Failing(enum.StrEnum):
    """How the step whose call fails fails (NONE: the saga fails after its last step)."""

    NONE = "none"
    NOT_APPLIED = "not_applied"  # the tool knows nothing happened
    UNKNOWN_UNDO_WORKS = "unknown_undo_works"  # landed, answer lost; undo known before the call
    UNKNOWN_UNDO_REFUSES = "unknown_undo_refuses"
    UNKNOWN_NO_UNDO = "unknown_no_undo"  # landed, answer lost; the undo needed the answer


@dataclass(frozen=True, slots=True)
class Shape:
    committed: tuple[Undo, ...]
    failing: Failing = Failing.NONE
    halt: bool = True

    @property
    def size(self) -> int:
        return len(self.committed) + (self.failing is not Failing.NONE)

    def undo_works(self, step: int) -> bool | None:
        """Whether step ``step``'s undo works (None: it has no undo the engine can run)."""
        if step <= len(self.committed):
            kind = self.committed[step - 1]
            return None if kind is Undo.NONE else kind is Undo.WORKS
        return {
            Failing.UNKNOWN_UNDO_WORKS: True,
            Failing.UNKNOWN_UNDO_REFUSES: False,
        }.get(self.failing)

    def describe(self) -> str:
        parts = [f"step {i} undo {kind.value}" for i, kind in enumerate(self.committed, start=1)]
        failing = len(self.committed) + 1
        if self.failing is Failing.NONE:
            last = len(self.committed)
            parts.append(f"the saga fails after step {last}" if last else "the saga fails before any step")
        else:
            parts.append(f"step {failing}'s call fails: {self.failing.value.replace('_', ' ')}")
        parts.append("halt on a failed undo" if self.halt else "no halt")
        return "; ".join(parts)


def flaky(step: int) -> bool:
    """A working undo of an odd-numbered step fails its first attempt, so every shape retries."""
    return step % 2 == 1


def committed_steps(count: int) -> Iterator[tuple[Undo, ...]]:
    """``count`` committed steps: every subset of refusing undos, and at most one step without undo."""
    for orphan in range(count + 1):  # 0: none; else the position of the step without an undo
        for kinds in itertools.product((Undo.WORKS, Undo.REFUSES), repeat=count - (orphan > 0)):
            yield (*kinds[: orphan - 1], Undo.NONE, *kinds[orphan - 1:]) if orphan else kinds


def shapes(max_steps: int) -> Iterator[Shape]:
    """Every shape of at most ``max_steps`` steps, smallest first."""
    for size in range(max_steps + 1):
        for committed in committed_steps(size):
            for halt in (True, False):
                yield Shape(committed, Failing.NONE, halt)
        if size == 0:
            continue
        for committed in committed_steps(size - 1):
            for failing in tuple(Failing)[1:]:
                for halt in (True, False):
                    yield Shape(committed, failing, halt)


def count(max_steps: int) -> int:
    """How many shapes :func:`shapes` yields (without making them)."""

    def variants(c: int) -> int:  # refusal subsets, times "no step / step j has no undo"
        return 2**c + c * 2 ** (c - 1) if c else 1

    failings = len(Failing) - 1
    return 2 * sum(variants(s) + (failings * variants(s - 1) if s else 0) for s in range(max_steps + 1))


@dataclass(slots=True)
class Ledger:
    """What the tools saw: the outside world of one run."""

    forwards: list[tuple[int, str | None]] = field(default_factory=list)  # (step, key)
    undo_calls: list[tuple[int, str | None]] = field(default_factory=list)  # every attempt
    standing: set[int] = field(default_factory=set)  # effects in place right now
    undone: list[int] = field(default_factory=list)  # undos that took effect


@dataclass(slots=True)
class Run:
    shape: Shape
    ledger: Ledger
    report: RollbackReport | None
    records: list[Record]
    error: BaseException | None = None  # what escaped the scope, if not SagaAborted


_ledger: contextvars.ContextVar[Ledger] = contextvars.ContextVar("agent_saga_proving_ledger")


class OpenGate:
    """A gate that lets everything through: the host's kill switch is not under test."""

    def admit(self, saga: SagaInfo) -> None:
        return None

    def check(self, request: StepRequest) -> None:
        return None

    async def check_async(self, request: StepRequest) -> None:
        return None

    def observe(self, request: StepRequest, error: BaseException | None) -> None:
        return None


class SagaFails(Exception):
    """The agent gives up: the failure that ends every shape's saga."""


async def _undo(step: int, works: bool, idempotency_key: str | None = None) -> None:
    undo_in(_ledger.get(), step, works, idempotency_key)


def undo_in(ledger: Ledger, step: int, works: bool, idempotency_key: str | None) -> None:
    """One attempt of step ``step``'s undo, seen by ``ledger`` (a working undo of an odd step
    fails its first attempt: see :func:`flaky`)."""
    ledger.undo_calls.append((step, idempotency_key))
    attempts = sum(1 for s, _ in ledger.undo_calls if s == step)
    if not works or (flaky(step) and attempts == 1):
        raise ConnectionError(f"undo of step {step} refused (attempt {attempts})")
    ledger.standing.discard(step)
    ledger.undone.append(step)


def _handler() -> Callable[..., Any]:
    # Registered on first use, under a name of ours, so that importing agent_saga
    # adds nothing to the user's registry.
    if not registered(_HANDLER):
        compensator(_HANDLER)(_undo)
    return resolve(_HANDLER)


def _forward(step: int, ends: Failing = Failing.NONE) -> Callable[..., Any]:
    async def forward(idempotency_key: str | None = None) -> dict[str, int]:
        if ends is Failing.NOT_APPLIED:
            raise NotApplied(f"step {step} was declined")
        ledger = _ledger.get()
        ledger.forwards.append((step, idempotency_key))
        ledger.standing.add(step)
        if ends is not Failing.NONE:
            raise TimeoutError(f"step {step} landed but its answer was lost")
        return {"step": step}

    return forward


def _derived(handler: Callable[..., Any], works: bool) -> Callable[[Any], Compensation]:
    # Needs the result (a subscript of None raises): an undo known only after the call.
    return lambda result: Compensation(
        fn=handler, handler=_HANDLER, kwargs={"step": result["step"], "works": works}
    )


async def run_shape(shape: Shape, scope: Scope) -> Run:
    """Run ``shape`` once through ``scope`` (``saga_scope`` unless a test passes a broken one)."""
    handler = _handler()
    ledger = Ledger()
    token = _ledger.set(ledger)
    wal = MemoryWAL("verify_rollback_invariants")
    report: RollbackReport | None = None
    error: BaseException | None = None
    try:
        async with scope(
            wal, name="verify", gate=OpenGate(), halt_on_compensation_failure=shape.halt,
            compensation_retry=RETRY,
        ) as saga:
            for step, kind in enumerate(shape.committed, start=1):
                if kind is Undo.NONE:
                    await saga.execute(tool=f"t{step}", semantics=ActionSemantics.IRREVERSIBLE,
                                       forward=_forward(step))
                else:
                    await saga.execute(tool=f"t{step}", semantics=ActionSemantics.COMPENSABLE,
                                       forward=_forward(step),
                                       compensate=_derived(handler, kind is Undo.WORKS))
            if shape.failing is not Failing.NONE:
                step = len(shape.committed) + 1
                works = shape.undo_works(step)
                undo = (call_with(handler, step=step, works=works) if works is not None
                        else _derived(handler, True))
                try:
                    await saga.execute(tool=f"t{step}", semantics=ActionSemantics.COMPENSABLE,
                                       forward=_forward(step, shape.failing), compensate=undo)
                except (NotApplied, TimeoutError):
                    pass  # the step's state is what is under test; the saga fails below
            raise SagaFails("the agent gives up")
    except SagaAborted as aborted:
        report = aborted.report
    except Exception as err:  # noqa: BLE001 - a broken engine's escape is a finding, not a crash
        error = err
    finally:
        _ledger.reset(token)
    return Run(shape, ledger, report, list(wal.records()), error)
