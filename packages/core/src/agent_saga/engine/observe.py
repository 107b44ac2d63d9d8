"""Interceptors: the one chain through which the engine tells the world what it does.

Every saga, every step and every rollback step passes through the chain, whatever front
door started it (``saga.execute``, ``@tool``, an adapter, the MCP proxy): telemetry,
logging and the UI are interceptors, never code in each front door.

An interceptor wraps what it observes the way a pluggy ``wrapper=True`` hook or a
Temporal interceptor does: its method returns a generator, which runs up to its
``yield`` before the work and receives how the work ended after it::

    class Timing(Interceptor):
        def step(self, event):
            started = time.perf_counter()
            end = yield                      # the step runs here
            print(event.tool, end.state, time.perf_counter() - started)

The generator runs in the caller's context (thread, task), start and end alike, so it
may enter a context manager around the ``yield`` (an OpenTelemetry span made current).
Returning None instead of a generator means "not interested". An interceptor that
raises is logged and skipped: an observer never changes what a saga does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_saga.ids import operation_id
from agent_saga.semantics import ActionSemantics, StepState

if TYPE_CHECKING:
    from agent_saga.engine.report import RollbackReport

__all__ = [
    "Interceptor",
    "RollbackEvent",
    "SagaEnd",
    "SagaEvent",
    "StepEnd",
    "StepEvent",
    "Wrappers",
    "add_interceptor",
    "interceptors",
    "remove_interceptor",
]

log = logging.getLogger("agent_saga.observe")

Wrapper = Generator[None, Any, None]


@dataclass(frozen=True, slots=True)
class SagaEvent:
    """A saga that started: who it is."""

    saga_id: str
    name: str
    tags: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class SagaEnd:
    """How a saga ended: ``status`` is COMPLETED, ROLLED_BACK or ABANDONED; ``report`` the unwind's."""

    status: str
    report: RollbackReport | None = None


@dataclass(frozen=True, slots=True)
class StepEvent:
    """One step about to run (after the gate let it, before its intent is written)."""

    saga_id: str
    saga_name: str
    step: int
    tool: str
    semantics: ActionSemantics
    args: Mapping[str, Any] = field(default_factory=dict)  # as logged: secrets redacted
    origin: str | None = None  # the framework or front door that made the call
    via_fallback: bool = False
    served: bool = False  # a resumed run's step answered from the log: nothing ran, nothing was paid

    @property
    def operation_id(self) -> str:
        return operation_id(self.saga_id, self.step, self.tool, "forward")


@dataclass(frozen=True, slots=True)
class StepEnd:
    """How a step's forward call ended."""

    state: StepState  # COMMITTED, UNKNOWN or NOT_APPLIED (refused, or the tool said nothing happened)
    error: BaseException | None = None
    result: Any = None


@dataclass(frozen=True, slots=True)
class RollbackEvent:
    """One step being settled by a rollback (its undo run, or its outcome recorded)."""

    saga_id: str
    step: int
    tool: str
    semantics: ActionSemantics
    compensation: str | None = None  # the undo's label (it may show arguments), when there is one
    idempotency_key: str | None = None
    handler: str | None = None  # the undo's registered name: safe to show without its arguments


class Interceptor:
    """Base class: override ``saga``, ``step`` and/or ``rollback_step``.

    Each returns a generator that yields once (see the module docstring) or None.
    ``saga`` receives a :class:`SagaEnd`, ``step`` a :class:`StepEnd`,
    ``rollback_step`` the step's :class:`~agent_saga.engine.report.StepOutcome`.
    """

    def saga(self, event: SagaEvent) -> Wrapper | None:
        return None

    def step(self, event: StepEvent) -> Wrapper | None:
        return None

    def rollback_step(self, event: RollbackEvent) -> Wrapper | None:
        return None


_lock = threading.Lock()
_chain: tuple[Interceptor, ...] = ()


def add_interceptor(interceptor: Interceptor) -> None:
    """Add ``interceptor`` to the chain (once); it sees every saga started from now on."""
    global _chain
    if not isinstance(interceptor, Interceptor):
        raise TypeError(f"an interceptor subclasses agent_saga.Interceptor, got {type(interceptor).__name__}")
    with _lock:
        if interceptor not in _chain:
            _chain = (*_chain, interceptor)


def remove_interceptor(interceptor: Interceptor) -> None:
    global _chain
    with _lock:
        _chain = tuple(i for i in _chain if i is not interceptor)


def interceptors() -> tuple[Interceptor, ...]:
    """The chain, outermost first."""
    return _chain


class Wrappers:
    """The started wrappers of one observed thing; ``end`` resumes them innermost first."""

    __slots__ = ("_running",)

    def __init__(self, running: list[Wrapper]) -> None:
        self._running = running

    @classmethod
    def start(cls, method: str, event: Any, chain: Iterable[Interceptor] | None = None) -> Wrappers | None:
        """Call ``method`` of every interceptor with ``event`` and run each to its yield."""
        running: list[Wrapper] = []
        for interceptor in _chain if chain is None else chain:
            try:
                wrapper = getattr(interceptor, method)(event)
                if wrapper is None:
                    continue
                next(wrapper)
            except Exception:  # an observer never breaks a saga
                log.exception("interceptor %r failed at the start of %s", interceptor, method)
                continue
            running.append(wrapper)
        return cls(running) if running else None

    def end(self, outcome: Any) -> None:
        for wrapper in reversed(self._running):
            try:
                wrapper.send(outcome)
            except StopIteration:
                continue
            except Exception:
                log.exception("interceptor wrapper %r failed at the end", wrapper)
                continue
            wrapper.close()  # it yielded twice: stop it rather than leave it suspended
            log.error("interceptor wrapper %r yielded more than once; closed it", wrapper)
        self._running = []
