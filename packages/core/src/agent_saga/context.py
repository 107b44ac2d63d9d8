"""The current saga, and the one boundary type that opens (or joins) one.

One ContextVar holds the current saga for the whole run. Frameworks copy
contexts (so a ``set()`` inside a tool never reaches its caller); what travels is
a reference to one mutable Saga, which every copy shares.

:class:`Boundary` is behind every way of making a transaction: ``saga_scope``,
``@guard``, ``AgentKit.transaction``, ``SagaFleet.transaction``, the adapters' run
helpers and the MCP proxy. ``with`` yields the blocking face (:class:`SyncSaga`),
``async with`` the awaiting one (:class:`Saga`): a ``with`` block never hands out
an object whose ``execute`` returns a coroutine nobody awaits.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, Unpack

from agent_saga import boot
from agent_saga._migrating import gone_names
from agent_saga.engine import invoke
from agent_saga.engine.invoke import drive_async, drive_sync
from agent_saga.engine.ports import GatePort
from agent_saga.engine.report import RollbackReport, SagaAborted
from agent_saga.engine.resumed import DurableRun
from agent_saga.engine.saga import Saga, SagaStatus, Step
from agent_saga.engine.saga_options import SagaKwargs, SagaOptions, positional_wal
from agent_saga.engine.served import replaying
from agent_saga.engine.snapshot import SnapshotStore
from agent_saga.engine.step_options import StepKwargs, StepOptions
from agent_saga.errors import SagaQuarantined, ToolFailed
from agent_saga.log.base import WAL
from agent_saga.log.default import default_wal
from agent_saga.semantics import ActionSemantics

__all__ = [
    "Boundary",
    "BoundaryOwner",
    "GateSetting",
    "SyncSaga",
    "current_saga",
    "default_gate",
    "saga_scope",
    "set_default_gate",
    "use_saga",
]

_current: contextvars.ContextVar[Saga | None] = contextvars.ContextVar("agent_saga", default=None)
_gate_lock = threading.Lock()
#: What ``set_default_gate`` takes: a gate, a zero-argument factory of one, or None.
GateSetting = GatePort | Callable[[], GatePort | None] | None
# (setting, gate, factory): gate and factory told apart once, when set (the structural
# isinstance check against GatePort is too slow for every saga), replaced as one tuple
# so that a reader needs no lock.
_default_gate: tuple[GateSetting, GatePort | None, Callable[[], GatePort | None] | None] = (None, None, None)


def current_saga() -> Saga | None:
    """The saga this code runs in, or None outside any boundary."""
    return _current.get()


def use_saga(saga: Saga | None) -> contextvars.Token[Saga | None]:
    """Make ``saga`` current in this context (to carry it onto another thread)."""
    return _current.set(saga)


def set_default_gate(gate: GateSetting) -> GateSetting:
    """The gate every saga uses when its boundary is not given one; returns the previous setting.

    Pass a gate, or a zero-argument factory called once per saga. Passing None
    turns off even the kill switch; every saga started so records ``"gate": null``
    in its start record, so the opt-out is visible in the log. The previous
    setting is returned so that a caller can wrap it and put it back.
    """
    global _default_gate
    boot.ensure()  # the package's default gate first, so that this setting replaces it
    told = (gate, gate, None) if gate is None or isinstance(gate, GatePort) else (gate, None, gate)
    with _gate_lock:
        previous, _default_gate = _default_gate[0], told
    return previous


def default_gate() -> GatePort | None:
    """The gate a saga started now gets when it is not given one (a fresh one per call)."""
    boot.ensure()
    _, gate, factory = _default_gate
    return gate if factory is None else factory()


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

    @property
    def failures(self) -> tuple[tuple[str, BaseException], ...]:
        return self.saga.failures

    def execute(
        self,
        *,
        tool: str,
        forward: Callable[..., Any],
        semantics: ActionSemantics | str | None = None,
        args: Mapping[str, Any] | None = None,
        options: StepOptions | None = None,
        **more: Unpack[StepKwargs],
    ) -> Any:
        """Run one step, blocking; see :meth:`Saga.execute`."""
        return self.saga.execute_sync(
            tool=tool, forward=forward, semantics=semantics, args=args, options=options, **more
        )


    def snapshot(
        self, name: str, *, capture: Callable[[], Any], restore: Callable[..., Any] | str,
        store: SnapshotStore | None = None,
    ) -> Any:
        """Capture state before the next step, blocking; see :meth:`Saga.snapshot`."""
        return self.saga.snapshot_sync(name, capture=capture, restore=restore, store=store)


class BoundaryOwner(Protocol):
    """Something that wants to know which sagas a boundary opened (``SagaFleet``)."""

    def boundary_opened(self, saga: Saga) -> None: ...

    def boundary_closed(self, saga: Saga) -> None: ...


class Boundary:
    """A saga boundary: everything executed inside is one transaction.

    Use ``async with`` (yields a :class:`Saga`) or ``with`` (yields a
    :class:`SyncSaga`). Leaving normally commits. Leaving with an exception
    unwinds every finished step newest-first and raises :class:`SagaAborted`
    carrying the :class:`RollbackReport` (a ``BaseException`` such as
    cancellation is unwound too, then re-raised as is). ``SagaQuarantined`` stops
    the saga without unwinding.

    ``join=True`` joins the saga already current instead of opening one inside it
    (the outer boundary owns the commit or rollback). ``fail_on_swallowed=True``
    treats a step that failed inside the block while the block still returned
    normally (a framework turned the exception into a message) as a failure of
    the block: :class:`ToolFailed` is raised inside, so the run is unwound.
    The saga's options (name, tags, gate, log, ...) are one :class:`~agent_saga.SagaOptions`:
    ``options=`` and/or the same names as keywords (an option given both ways is refused);
    ``saga_id`` names this one run; ``durable`` is set by a ``@durable`` entry point (its saga
    is always its own, and records its inputs, or is that run resumed).

    With no ``wal=``, the saga writes to the default FileWAL (``./agent-saga.wal``
    or ``$AGENT_SAGA_WAL``); with no ``gate=``, the default gate (the kill switch).
    """

    def __init__(
        self,
        wal: WAL | None = None,
        /,
        *,
        options: SagaOptions | None = None,
        saga_id: str | None = None,
        join: bool = False,
        fail_on_swallowed: bool = False,
        owner: BoundaryOwner | None = None,
        durable: DurableRun | None = None,
        **more: Unpack[SagaKwargs],
    ) -> None:
        if wal is not None:
            more = positional_wal(wal, more)
        #: The saga's options, whole: every door builds one and hands it here.
        self.options = SagaOptions.build(options, more)
        self._saga_id = saga_id
        self._join = join
        self._fail_on_swallowed = fail_on_swallowed
        self._owner = owner
        self._durable = durable
        self._entered = False
        self._seen = 0
        self._token: contextvars.Token[Saga | None] | None = None
        self.saga: Saga | None = None
        #: True when this boundary joined a saga opened outside it.
        self.joined = False

    def _open(self) -> Saga:
        if self._entered:
            raise RuntimeError("a saga boundary can be entered only once; create a new one")
        self._entered = True
        # During a replay every boundary joins the replay's saga: a new one would write to a real log.
        outer = _current.get() if (self._join or replaying() is not None) and self._durable is None else None
        if outer is not None and outer.status is SagaStatus.OPEN:
            saga = outer
            self.joined = True
        else:
            o = self.options
            saga = Saga(
                o.wal or default_wal(), saga_id=self._saga_id, durable=self._durable,
                options=o if o.gate is not None else o.with_changes(gate=default_gate()),
            )
            saga.start()
            self._token = _current.set(saga)
        self.saga = saga
        self._seen = len(saga.failures)
        if self._owner is not None:
            self._owner.boundary_opened(saga)
        return saga

    def _close(self, error: BaseException | None) -> tuple[Saga, BaseException | None]:
        """Leave the block: restore the context and say how the block ended.

        A step that failed inside while the block returned normally counts as the
        block's failure when ``fail_on_swallowed`` (see the class docstring).
        """
        saga = self.saga
        assert saga is not None
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        if self._owner is not None:
            self._owner.boundary_closed(saga)
        if error is None and saga.stopped is not None:
            # The gate ended the saga (repair spent, thrash): roll back even if a framework
            # turned the refusal into a message and the block returned normally.
            error = ToolFailed(saga.stopped.tool, saga.stopped)
            error.__cause__ = saga.stopped
        if error is None and self._fail_on_swallowed:
            failures = saga.failures
            if len(failures) > self._seen:
                tool, cause = failures[self._seen]
                error = ToolFailed(tool, cause)
                error.__cause__ = cause
        return saga, error

    def _joined_exit(self, original: BaseException | None, error: BaseException | None) -> Literal[False]:
        if error is not None and error is not original:
            raise error  # the outer boundary unwinds the run that swallowed a failure
        return False

    def __enter__(self) -> SyncSaga:
        return SyncSaga(self._open())

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        return drive_sync(self._exit(error))

    async def __aenter__(self) -> Saga:
        return self._open()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        return await drive_async(self._exit(error))

    def _exit(self, error: BaseException | None) -> invoke.Protocol[Literal[False]]:
        """Commit, freeze or unwind the saga as the block ended: one protocol for both faces."""
        saga, outcome = self._close(error)
        if self.joined:
            return self._joined_exit(error, outcome)
        if outcome is None:
            yield from saga._complete()
            return False
        if isinstance(outcome, SagaQuarantined):
            saga.freeze()
            return False
        report = yield from saga._rollback(outcome)
        if isinstance(outcome, Exception):
            raise SagaAborted(outcome, report) from outcome
        return False


def saga_scope(
    wal: WAL | None = None,
    /,
    *,
    options: SagaOptions | None = None,
    saga_id: str | None = None,
    **more: Unpack[SagaKwargs],
) -> Boundary:
    """A new saga boundary (``async with saga_scope() as s`` / ``with saga_scope() as s``).

    Takes every saga option (see :class:`~agent_saga.SagaOptions`) as a keyword, or a ready
    ``options=``; ``saga_id`` names this one run. Always a saga of its own, even inside
    another one; ``@guard`` and the run helpers join an open saga instead. See :class:`Boundary`.
    """
    return Boundary(wal, options=options, saga_id=saga_id, **more)


if not TYPE_CHECKING:  # at run time only: mypy still refuses a name this module lacks
    __getattr__ = gone_names(__name__)  # a 2.x name of this module says what 3.x has instead
