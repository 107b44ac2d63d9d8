"""CrewAI tools as saga steps, a crew run as one saga.

``wrap_tool`` copies a function-backed ``Tool`` (what ``@tool`` makes) with its
``func`` made a step, and a ``BaseTool`` subclass with its own ``_run`` / ``_arun``
made a step on the copy (see ``_compat``). Either way the copy is the same class with
the same name, description and ``args_schema``, and the step sits inside the tool:
CrewAI turns a tool exception into text for the model, but the step still sees the
raw exception. ``patch_all()`` patches the six places CrewAI calls a tool
(``_compat.ENTRY_POINTS``); one call is one step however many of them it passes.
When a Speculator is attached to the saga a run helper starts in, a before-tool-call hook
scoped to the run names each model response's tool calls to it (:class:`PlannedCalls`)
before the first of them runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import wrapt
from crewai.hooks.dispatch import InterceptionPoint, get_scoped_hooks, scoped_hooks
from crewai.tools import BaseTool
from crewai.tools.base_tool import Tool
from crewai.tools.tool_failure import ToolExecutionFailedError

from agent_saga import Saga, SagaOptions, SyncSaga
from agent_saga.adapter import Adapter, ToolSpec, split_saga_options
from agent_saga_crewai import _compat

__all__ = ["CrewAI", "PlannedCalls", "adapter", "saga_kickoff", "saga_kickoff_async"]

_NOT_ARGS = frozenset({"config", "callbacks"})


class CrewAI(Adapter):
    framework = "crewai"
    distribution = "agent-saga-crewai"
    tool_types = (BaseTool,)
    hint = "wrap the function with crewai.tools.tool first"

    def function_of(self, tool: Any) -> Callable[..., Any] | None:
        return tool.func if isinstance(tool, Tool) else getattr(tool, "_run", None)

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        if isinstance(tool, Tool):
            return tool.model_copy(update={"func": self.step(spec, tool.func)})
        copy = tool.model_copy()
        overrides_arun = type(tool)._arun is not BaseTool._arun
        for attr in ("_run", "_arun") if overrides_arun else ("_run",):
            _compat.bind(copy, attr, self.step(spec, getattr(tool, attr)))
        return copy

    def patch(self) -> None:
        for cls, sync_entry, async_entry in _compat.ENTRY_POINTS:
            self.patches.apply(cls, sync_entry, lambda original: wrapt.FunctionWrapper(original, self._sync_entry))
            self.patches.apply(cls, async_entry, lambda original: wrapt.FunctionWrapper(original, self._async_entry))

    def _sync_entry(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if instance is None:
            return wrapped(*args, **kwargs)
        tool = _compat.origin_of(instance)
        return self.patched_sync(tool, lambda: wrapped(*args, **kwargs), _logged(args, kwargs))

    async def _async_entry(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if instance is None:
            return await wrapped(*args, **kwargs)
        tool = _compat.origin_of(instance)
        return await self.patched_async(tool, lambda: wrapped(*args, **kwargs), _logged(args, kwargs))


def _logged(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The model's arguments, whichever entry they came through (``run(**kw)``, ``invoke(input)``)."""
    logged = {k: v for k, v in kwargs.items() if k not in _NOT_ARGS}
    if isinstance(logged.get("input"), dict):
        return dict(logged["input"])
    if args and isinstance(args[0], dict):
        return dict(args[0])
    logged.update({f"arg{i}": a for i, a in enumerate(args)})
    return logged


adapter = CrewAI()


class PlannedCalls:
    """A CrewAI before-tool-call hook that names each model response's tool calls to the saga's Speculator.

    CrewAI appends a response's tool calls to the agent's messages as one assistant
    message, then runs them (in parallel when it can), each behind the before-tool-call
    hooks. The first call's hook hands the whole message to :meth:`Adapter.planned
    <agent_saga.adapter.Adapter.planned>` under a lock, so the REVERSIBLE ones run ahead
    before any call of that response reaches its tool; the response's other calls find it
    named. The run helpers add one, scoped to the run, when a Speculator is attached; a crew
    run another way can be given one with ``crewai.hooks.dispatch.register_scoped`` inside
    ``scoped_hooks()``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # The responses already named, held (not their ids) so an id is never reused for a new one.
        self._named: list[dict[str, Any]] = []

    def __call__(self, context: Any) -> None:
        response = _response_of(context)
        if response is None:
            return
        with self._lock:
            if any(named is response for named in self._named):
                return
            self._named.append(response)
            adapter.planned(
                (call["function"]["name"], call["function"]["arguments"])
                for call in response["tool_calls"]
                if isinstance(call, dict) and isinstance(call.get("function"), dict)
            )


def _response_of(context: Any) -> dict[str, Any] | None:
    """The assistant message whose tool calls the agent is running (None in CrewAI's ReAct text loop)."""
    messages = getattr(getattr(context.agent, "agent_executor", None), "messages", None)
    message: Any
    for message in reversed(messages if isinstance(messages, list) else ()):
        if isinstance(message, dict) and message.get("role") == "assistant":
            return message if isinstance(message.get("tool_calls"), list) else None
    return None


@contextmanager
def _planning() -> Iterator[None]:
    """A hook scope with :class:`PlannedCalls` when the saga has a Speculator; else nothing.

    The new scope starts with the caller's own scoped hooks, in their order, so they
    keep running; ours runs after them.
    """
    if not adapter.speculating():
        yield
        return
    hooks = {point: get_scoped_hooks(point) for point in InterceptionPoint}
    hooks[InterceptionPoint.PRE_TOOL_CALL].append(PlannedCalls())
    with scoped_hooks({point: found for point, found in hooks.items() if found}):
        yield


@contextmanager
def _chained(saga: Saga | SyncSaga) -> Iterator[None]:
    """Chain CrewAI's ``ToolExecutionFailedError`` to the tool's own exception.

    Under ``tool_failure_policy="raise"`` CrewAI raises a summary of the failure that
    does not carry the exception the tool raised; the step saw it, so the rollback's
    cause can name it.
    """
    seen = len(saga.failures)
    try:
        yield
    except ToolExecutionFailedError as err:
        failed = saga.failures[seen:]
        if failed and err.__cause__ is None:
            err.__cause__ = failed[-1][1]
        raise


def saga_kickoff(
    crew: Any, inputs: Mapping[str, Any] | None = None, *, options: SagaOptions | None = None, **kickoff: Any,
) -> Any:
    """``crew.kickoff(inputs, **kickoff)`` as one transaction.

    CrewAI runs tools on worker threads that copy the caller's context, so the saga
    opened here is the one every tool call joins. By default CrewAI hands a tool's
    exception to the model as text and the crew carries on; the failed step is UNKNOWN
    all the same, so when the crew returns the run is failed (``ToolFailed``) and every
    finished step is undone newest-first. With ``tool_failure_policy="raise"`` the
    crew's own exception does the same. Inside an open saga the run joins it; a
    Speculator attached to that saga is told each model response's tool calls
    (:class:`PlannedCalls`).
    """
    given, kickoff = split_saga_options(kickoff)
    with adapter.boundary(options=options, **given) as saga, _chained(saga), _planning():
        return crew.kickoff(inputs=None if inputs is None else dict(inputs), **kickoff)


async def saga_kickoff_async(
    crew: Any, inputs: Mapping[str, Any] | None = None, *, options: SagaOptions | None = None, **kickoff: Any,
) -> Any:
    """The awaiting form of :func:`saga_kickoff` (``await crew.akickoff(inputs, **kickoff)``)."""
    given, kickoff = split_saga_options(kickoff)
    async with adapter.boundary(options=options, **given) as saga:
        with _chained(saga), _planning():
            return await crew.akickoff(inputs=None if inputs is None else dict(inputs), **kickoff)
