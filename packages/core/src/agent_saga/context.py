"""The current saga, and the boundary that opens one.

One ContextVar holds the current saga for the whole run. Frameworks copy
contexts (so a ``set()`` inside a tool never reaches its caller); what travels is
a reference to one mutable Saga, which every copy shares.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Literal

from agent_saga.engine.ports import GatePort
from agent_saga.engine.report import RollbackReport
from agent_saga.engine.retry import RetryPolicy
from agent_saga.engine.saga import COMPENSATION_RETRY, Saga, Step
from agent_saga.errors import SagaAborted, SagaQuarantined
from agent_saga.log.base import WAL
from agent_saga.log.default import default_wal
from agent_saga.registry import CompensationFactory
from agent_saga.semantics import ActionSemantics

__all__ = ["SyncSaga", "current_saga", "default_gate", "saga_scope", "set_default_gate", "use_saga"]

_current: contextvars.ContextVar[Saga | None] = contextvars.ContextVar("agent_saga", default=None)
_gate_lock = threading.Lock()
_default_gate: GatePort | Callable[[], GatePort | None] | None = None


def current_saga() -> Saga | None:
    """The saga this code runs in, or None outside any boundary."""
    return _current.get()


def use_saga(saga: Saga | None) -> contextvars.Token[Saga | None]:
    """Make ``saga`` current in this context (to carry it onto another thread)."""
    return _current.set(saga)


def set_default_gate(gate: GatePort | Callable[[], GatePort | None] | None) -> None:
    """The gate every saga uses when ``saga_scope`` is not given one.

    Pass a gate, or a zero-argument factory called once per saga.
    """
    global _default_gate
    with _gate_lock:
        _default_gate = gate


def default_gate() -> GatePort | None:
    """The gate a saga started now gets when it is not given one (a fresh one per call)."""
    with _gate_lock:
        gate = _default_gate
    if gate is None or isinstance(gate, GatePort):
        return gate
    return gate()


class SyncSaga:
    """The blocking face of a saga, as yielded by ``with saga_scope() as s``."""

    def __init__(self, saga: Saga) -> None:
        self.saga = saga

    @property
    def saga_id(self) -> str:
        return self.saga.saga_id

    @property
    def report(self) -> RollbackReport | None:
        return self.saga.report

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.saga.steps

    def execute(
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
        """Run one step, blocking; see :meth:`Saga.execute`."""
        return self.saga.execute_sync(
            tool=tool, semantics=semantics, forward=forward, compensate=compensate, args=args,
            retry=retry, timeout=timeout, fallback_action=fallback_action,
        )


class saga_scope:  # noqa: N801 - used like a function: `async with saga_scope() as s`
    """A saga boundary: everything executed inside is one transaction.

    Use ``async with`` (yields a :class:`Saga`) or ``with`` (yields a
    :class:`SyncSaga`). Leaving normally commits. Leaving with an exception
    unwinds every finished step newest-first and raises :class:`SagaAborted`
    carrying the :class:`RollbackReport` (a ``BaseException`` such as
    cancellation is unwound too, then re-raised as is). ``SagaQuarantined`` stops
    the saga without unwinding.

    With no ``wal=``, the saga writes to the default FileWAL (``./agent-saga.wal``
    or ``$AGENT_SAGA_WAL``).
    """

    def __init__(
        self,
        wal: WAL | None = None,
        *,
        name: str = "saga",
        gate: GatePort | None = None,
        tags: Iterable[str] = (),
        saga_id: str | None = None,
        halt_on_compensation_failure: bool = True,
        compensation_retry: RetryPolicy = COMPENSATION_RETRY,
    ) -> None:
        self._wal = wal
        self._options: dict[str, Any] = {
            "name": name, "gate": gate, "tags": frozenset(tags), "saga_id": saga_id,
            "halt_on_compensation_failure": halt_on_compensation_failure,
            "compensation_retry": compensation_retry,
        }
        self.saga: Saga | None = None
        self._token: contextvars.Token[Saga | None] | None = None

    def _open(self) -> Saga:
        if self.saga is not None:
            raise RuntimeError("a saga_scope can be entered only once; create a new one")
        options = dict(self._options)
        if options["gate"] is None:
            options["gate"] = default_gate()
        saga = Saga(self._wal or default_wal(), **options)
        saga.start()
        self.saga = saga
        self._token = _current.set(saga)
        return saga

    def _close(self) -> Saga:
        assert self.saga is not None
        assert self._token is not None
        _current.reset(self._token)
        return self.saga

    def __enter__(self) -> SyncSaga:
        return SyncSaga(self._open())

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        saga = self._close()
        if error is None:
            saga.complete_sync()
            return False
        if isinstance(error, SagaQuarantined):
            saga.freeze()
            return False
        report = saga.rollback_sync(error)
        if isinstance(error, Exception):
            raise SagaAborted(error, report) from error
        return False

    async def __aenter__(self) -> Saga:
        return self._open()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        saga = self._close()
        if error is None:
            await saga.complete()
            return False
        if isinstance(error, SagaQuarantined):
            saga.freeze()
            return False
        report = await saga.rollback(error)
        if isinstance(error, Exception):
            raise SagaAborted(error, report) from error
        return False
