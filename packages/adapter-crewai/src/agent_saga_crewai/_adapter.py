"""CrewAI tools as saga steps, a crew run as one saga.

``wrap_tool`` copies a function-backed ``Tool`` (what ``@tool`` makes) with its
``func`` made a step, and a ``BaseTool`` subclass with its own ``_run`` / ``_arun``
made a step on the copy (see ``_compat``). Either way the copy is the same class with
the same name, description and ``args_schema``, and the step sits inside the tool:
CrewAI turns a tool exception into text for the model, but the step still sees the
raw exception. ``patch_all()`` patches the six places CrewAI calls a tool
(``_compat.ENTRY_POINTS``); one call is one step however many of them it passes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import wrapt
from crewai.tools import BaseTool
from crewai.tools.base_tool import Tool
from crewai.tools.tool_failure import ToolExecutionFailedError

from agent_saga import Saga, SagaOptions, SyncSaga
from agent_saga.adapter import Adapter, ToolSpec, split_saga_options
from agent_saga_crewai import _compat

__all__ = ["CrewAI", "adapter", "saga_kickoff", "saga_kickoff_async"]

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
    crew's own exception does the same. Inside an open saga the run joins it.
    """
    given, kickoff = split_saga_options(kickoff)
    with adapter.boundary(options=options, **given) as saga, _chained(saga):
        return crew.kickoff(inputs=None if inputs is None else dict(inputs), **kickoff)


async def saga_kickoff_async(
    crew: Any, inputs: Mapping[str, Any] | None = None, *, options: SagaOptions | None = None, **kickoff: Any,
) -> Any:
    """The awaiting form of :func:`saga_kickoff` (``await crew.akickoff(inputs, **kickoff)``)."""
    given, kickoff = split_saga_options(kickoff)
    async with adapter.boundary(options=options, **given) as saga:
        with _chained(saga):
            return await crew.akickoff(inputs=None if inputs is None else dict(inputs), **kickoff)
