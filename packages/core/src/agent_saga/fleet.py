"""SagaFleet: many frameworks' tools, one saga, on whatever thread they run.

Two silent failures a ContextVar alone cannot prevent:

* a framework runs a tool on its own thread (a raw ``threading.Thread``, a
  ``ThreadPoolExecutor`` that does not copy the context): ``current_saga()`` is None
  there, and an ordinary wrapper would perform the effect unprotected;
* one of twelve tools was never registered, and nobody notices until its effect
  needs undoing.

A registered tool finds the saga in its context or, failing that, the fleet's one
active transaction; with none it raises ``BoundaryRequired`` instead of running.
``coverage()`` and ``assert_fully_covered()`` make the second failure a CI check.

Honest limit: the fleet moves the saga's identity across threads, not the event
loop that owns it. A sync tool on a worker thread runs its step with the blocking
face (fine); a coroutine that must run on the saga's loop has to be sent there with
``asyncio.run_coroutine_threadsafe(coro, loop)`` — calling ``asyncio.run()`` on a
worker starts a second loop, which the saga does not belong to.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Unpack

from agent_saga.context import Boundary, current_saga, use_saga
from agent_saga.engine.ports import GatePort
from agent_saga.engine.saga import Saga
from agent_saga.engine.saga_options import SagaKwargs, SagaOptions
from agent_saga.engine.step_options import StepKwargs, StepOptions
from agent_saga.errors import BoundaryRequired, CompensationError, ConfigurationError
from agent_saga.log.base import WAL
from agent_saga.registry import CompensationFactory, handler_name, inverse_for, is_prebound, registered
from agent_saga.semantics import ActionSemantics, Compensation
from agent_saga.toolspec import SPEC_ATTR, ToolSpec, awaited_by_caller

__all__ = ["CoverageError", "SagaFleet"]


class CoverageError(ConfigurationError):
    """``assert_fully_covered`` found a tool that could not be undone as promised."""


@dataclass(frozen=True)
class _Entry:
    name: str
    framework: str
    spec: ToolSpec
    undo: str | None  # "registered", "paired", "prebound", "factory" or None
    handler: str | None
    recoverable: bool | None  # None: decided per step by what the factory returns


def _params(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    return [
        p for p in inspect.signature(fn).parameters.values()
        if p.name != "idempotency_key" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


def _from_registered(inverse: Callable[..., Any], handler: str, tool: str) -> CompensationFactory:
    """An undo that calls the registered ``inverse`` with the result's fields it names.

    A dict result gives the inverse the fields named like its parameters; any other
    result is passed whole when the inverse takes exactly one parameter.
    """
    params = _params(inverse)

    def build(result: Any) -> Compensation:
        if isinstance(result, Mapping):
            kwargs = {p.name: result[p.name] for p in params if p.name in result}
            missing = [p.name for p in params if p.name not in kwargs and p.default is p.empty]
            if missing:
                raise CompensationError(
                    f"the undo of {tool!r} is {handler!r}, which needs {missing}, but the result has "
                    f"{sorted(result)}; return those fields, or pass compensate=lambda r: Compensation(...)"
                )
        elif len(params) == 1:
            kwargs = {params[0].name: result}
        else:
            raise CompensationError(
                f"the undo of {tool!r} is {handler!r}, which takes {[p.name for p in params]}, but the "
                f"result is a {type(result).__name__}, not a dict of those fields"
            )
        return Compensation(fn=inverse, handler=handler, kwargs=kwargs)

    return build


class SagaFleet:
    """Tools from several frameworks, registered once, protected on every thread."""

    def __init__(self, name: str, *, wal: WAL | None = None, gate: GatePort | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"a SagaFleet needs a non-empty name, got {name!r}")
        self.name = name
        self.wal = wal
        self.gate = gate
        self._entries: dict[str, _Entry] = {}
        self._active: list[Saga] = []
        self._saga_ids: set[str] = set()
        self._lock = threading.Lock()

    # -- registration ---------------------------------------------------------------------

    def register(
        self,
        call: Callable[..., Any],
        *,
        framework: str,
        semantics: ActionSemantics | str | None = None,
        name: str | None = None,
        options: StepOptions | None = None,
        **more: Unpack[StepKwargs],
    ) -> Callable[..., Any]:
        """Protect ``call``; returns a callable of the same shape (sync or async).

        ``compensate`` is a factory ``(result) -> Compensation``, or a function
        registered with ``@compensator`` (called with the result's fields it names).
        Left out on a COMPENSABLE tool, an ``@inverse_of`` pairing of ``call`` is used.
        Every other step option is accepted too; a fleet tool always requires a boundary.
        """
        if not callable(call):
            raise ConfigurationError(f"SagaFleet.register needs a callable, got {type(call).__name__}")
        if not isinstance(framework, str) or not framework:
            raise ConfigurationError("SagaFleet.register needs framework= (e.g. 'langgraph', 'crewai')")
        tool = name or getattr(call, "__name__", None) or type(call).__name__
        given = more.get("compensate", options.compensate if options is not None else None)
        factory, undo, handler, recoverable = self._undo(call, tool, given)
        more["compensate"] = factory
        more["require_boundary"] = True
        more.setdefault("origin", framework)
        spec = ToolSpec.for_function(call, name=tool, semantics=semantics, options=options, **more)
        if spec.semantics is ActionSemantics.COMPENSABLE and factory is None:
            raise CompensationError(
                f"fleet {self.name!r}: {tool!r} is COMPENSABLE but has no undo; pass compensate= or "
                "pair an inverse with @inverse_of"
            )
        with self._lock:
            if tool in self._entries:
                raise ConfigurationError(f"fleet {self.name!r} already has a tool named {tool!r}")
            self._entries[tool] = _Entry(tool, framework, spec, undo, handler, recoverable)
        return self._protect(spec, call)

    @staticmethod
    def _undo(
        call: Callable[..., Any], tool: str, compensate: Any
    ) -> tuple[CompensationFactory | Compensation | None, str | None, str | None, bool | None]:
        if compensate is None:
            paired = inverse_for(call)
            if paired is None:
                return None, None, None, None
            handler = getattr(paired, "handler", None)
            return paired, "paired", handler, bool(handler and registered(handler))
        if isinstance(compensate, Compensation):  # known before the call
            handler = compensate.handler
            return compensate, "prebound", handler, bool(handler and registered(handler))
        if not callable(compensate):
            raise CompensationError(f"compensate= for {tool!r} must be callable, got {compensate!r}")
        handler = handler_name(compensate)
        if handler is not None:
            return _from_registered(compensate, handler, tool), "registered", handler, True
        if is_prebound(compensate):
            handler = getattr(compensate, "handler", None)
            return compensate, "prebound", handler, bool(handler and registered(handler))
        handler = getattr(compensate, "handler", None)  # an inverse_of/_FieldMap style factory
        if isinstance(handler, str):
            return compensate, "paired", handler, registered(handler)
        return compensate, "factory", None, None

    def _protect(self, spec: ToolSpec, call: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(call):

            @functools.wraps(call)
            async def async_tool(*args: Any, **kwargs: Any) -> Any:
                with self._attached():
                    return await spec.call_async(call, args, kwargs)

            wrapper: Callable[..., Any] = async_tool
        else:

            @functools.wraps(call)
            def sync_tool(*args: Any, **kwargs: Any) -> Any:
                if awaited_by_caller():  # `await tool(...)`: see toolspec.awaited_by_caller
                    return self._awaited(spec, call, args, kwargs)
                with self._attached():
                    return spec.call_sync(call, args, kwargs)

            wrapper = sync_tool
        setattr(wrapper, SPEC_ATTR, spec)
        return wrapper

    async def _awaited(
        self, spec: ToolSpec, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        with self._attached():
            return await spec.call_awaited(call, args, kwargs)

    # -- the saga on foreign threads ----------------------------------------------------

    def _fallback(self) -> Saga | None:
        with self._lock:
            active = list(self._active)
        if len(active) > 1:
            raise BoundaryRequired(
                f"fleet {self.name!r} has {len(active)} transactions open and this thread carries none "
                "of them, so the call cannot be attributed; hand the callable to the framework "
                "through fleet.bind_saga(fn) inside the transaction it belongs to"
            )
        return active[0] if active else None

    @contextlib.contextmanager
    def _attached(self) -> Iterator[None]:
        if current_saga() is not None:
            yield
            return
        saga = self._fallback()
        if saga is None:
            yield  # the spec (require_boundary=True) refuses the call
            return
        use_saga(saga)
        try:
            yield
        finally:
            use_saga(None)  # this thread's context had none; leave it as found

    def bind_saga(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` carrying the current saga onto whatever thread later calls it."""
        from agent_saga.plugins.propagation import carry

        saga = current_saga() or self._fallback()
        if saga is None:
            raise BoundaryRequired(
                f"fleet {self.name!r}: bind_saga() needs an open transaction to bind; call it inside "
                "fleet.transaction()"
            )
        token = use_saga(saga)  # carry() captures what is current
        try:
            return carry(fn)
        finally:
            token.var.reset(token)

    # -- boundaries -----------------------------------------------------------------------

    def transaction(self, *, options: SagaOptions | None = None, **more: Unpack[SagaKwargs]) -> Boundary:
        """One saga for every registered tool called inside (``with`` or ``async with``).

        Takes every saga option (see :class:`~agent_saga.SagaOptions`); one given wins over the fleet's.
        """
        return Boundary(
            options=SagaOptions.build(options, more, name=self.name, wal=self.wal, gate=self.gate), owner=self
        )

    def boundary_opened(self, saga: Saga) -> None:
        with self._lock:
            self._active.append(saga)
            self._saga_ids.add(saga.saga_id)

    def boundary_closed(self, saga: Saga) -> None:
        with self._lock:
            if saga in self._active:
                self._active.remove(saga)

    # -- coverage -------------------------------------------------------------------------

    def coverage(self) -> dict[str, Any]:
        """A machine-readable manifest: every tool, its framework, and whether its undo survives a crash."""
        from agent_saga.plugins.patching import unclassified_calls

        with self._lock:
            entries = list(self._entries.values())
            ids = set(self._saga_ids)
        unprotected = sorted({o.tool for o in unclassified_calls() if o.saga_id in ids})
        tools = [
            {
                "name": e.name,
                "framework": e.framework,
                "semantics": e.spec.semantics.value,
                "protected": True,
                "boundary_required": e.spec.options.require_boundary,
                "undo": e.undo,
                "handler": e.handler,
                "recoverable_after_crash": (
                    False if e.spec.semantics is ActionSemantics.IRREVERSIBLE else e.recoverable
                ),
            }
            for e in entries
        ]
        return {
            "fleet": self.name,
            "tools": tools,
            "frameworks": sorted({e.framework for e in entries}),
            "unprotected_calls": unprotected,
        }

    def assert_fully_covered(
        self, expected: Iterable[str] = (), *, require_recoverable: bool = True
    ) -> None:
        """Raise CoverageError if anything that should be undoable is not.

        Checked: every name in ``expected`` is registered; every COMPENSABLE tool has an
        undo that another process can run after a crash (a registered handler), unless
        ``require_recoverable=False``; no unclassified tool ran inside this fleet's
        transactions (seen by ``patch_all``).
        """
        report = self.coverage()
        names = {t["name"] for t in report["tools"]}
        problems = [f"{n!r} is expected but not registered" for n in expected if n not in names]
        for t in report["tools"]:
            if t["semantics"] != ActionSemantics.COMPENSABLE.value or not require_recoverable:
                continue
            if t["recoverable_after_crash"] is not True:
                why = "a factory whose undo is only known per step" if t["undo"] == "factory" else "no registered handler"
                problems.append(
                    f"{t['name']!r} ({t['framework']}) is COMPENSABLE but its undo is not recoverable "
                    f"after a crash ({why}); pass a function registered with @compensator"
                )
        problems += [f"{n!r} ran unprotected inside a transaction" for n in report["unprotected_calls"]]
        if problems:
            raise CoverageError(f"fleet {self.name!r} is not fully covered: " + "; ".join(problems))
