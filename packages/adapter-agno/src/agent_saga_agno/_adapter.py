"""Agno tool functions as saga steps, an agent run as one saga.

``wrap_tool`` takes an ``agno.tools.function.Function`` (what ``@tool`` makes) or the plain
function an agent would make one of, and returns a ``Function`` of the same class, name,
description and parameters whose entrypoint is the step. ``patch_all()`` polices the copy of
each tool an agent's run prepares (``Function.process_entrypoint``, ``Function.from_callable``):
every tool a run calls from then on is classified by the tool policy. When a Speculator is
attached to the saga a run helper starts in, each model response's tool calls are named to it
before Agno runs them (``_compat.observe_planned``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Unpack

from agno.agent import Agent
from agno.run.agent import RunOutput
from agno.run.base import RunStatus
from agno.tools.function import Function

from agent_saga import ActionSemantics, SagaOptions
from agent_saga.adapter import SPEC_ATTR, Adapter, StepKwargs, StepOptions, ToolSpec, split_saga_options
from agent_saga_agno import _compat

__all__ = ["Agno", "RunFailed", "adapter", "saga_run", "saga_run_sync"]


class RunFailed(RuntimeError):
    """An Agno run that returned with ``status=error`` (Agno reports a failed run instead of raising)."""


class Agno(Adapter):
    framework = "agno"
    distribution = "agent-saga-agno"
    tool_types = (Function,)
    hint = "make one with @agno.tools.tool or Function.from_callable(fn), or pass the plain function itself"

    def function_of(self, tool: Any) -> Callable[..., Any] | None:
        return tool.entrypoint  # type: ignore[no-any-return]

    def framework_params(self, fn: Callable[..., Any]) -> tuple[str, ...]:
        return _compat.context_params(fn)

    def spec_of(self, tool: Any) -> ToolSpec | None:
        # A run re-processes the tool: Agno's argument validation wraps the step (functools.wraps).
        fn = self.function_of(tool)
        while fn is not None:
            spec = getattr(fn, SPEC_ATTR, None)
            if spec is not None:
                return spec  # type: ignore[no-any-return]
            fn = getattr(fn, "__wrapped__", None)
        return None

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        if tool.entrypoint is None:
            raise TypeError(f"agno tool {tool.name!r} has no entrypoint (a tool the model runs elsewhere); nothing to wrap")
        fn = getattr(tool.entrypoint, self.POLICED_ATTR, tool.entrypoint)  # made while patched: the step is the policy now
        return _compat.with_entrypoint(tool, self.step(spec, fn))

    def wrap_tool(  # type: ignore[override]  # also takes the plain function Agno would wrap
        self,
        tool: Any,
        *,
        semantics: ActionSemantics | str | None = None,
        name: str | None = None,
        options: StepOptions | None = None,
        **more: Unpack[StepKwargs],
    ) -> Function:
        """``tool`` made a saga step: a ``Function`` with the same name, description and parameters.

        A plain function becomes the ``Function`` an Agno agent would make of it.
        """
        if not isinstance(tool, Function) and (inspect.isfunction(tool) or inspect.ismethod(tool)):
            tool = Function.from_callable(tool)
        wrapped: Function = super().wrap_tool(tool, semantics=semantics, name=name, options=options, **more)
        return wrapped

    def patch(self) -> None:
        self.patches.apply(Function, "process_entrypoint", self._processing)
        self.patches.apply(Function, "from_callable", self._making)

    def _processing(self, original: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(original)
        def process_entrypoint(tool: Function, *args: Any, **kwargs: Any) -> None:
            original(tool, *args, **kwargs)
            self._police(tool)

        return process_entrypoint

    def _making(self, original: classmethod[Any, Any, Any]) -> classmethod[Any, Any, Any]:
        build = original.__func__

        @functools.wraps(build)
        def from_callable(cls: type[Function], *args: Any, **kwargs: Any) -> Function:
            tool: Function = build(cls, *args, **kwargs)
            self._police(tool)
            return tool

        return classmethod(from_callable)

    def _police(self, tool: Function) -> None:
        """Make this copy's entrypoint go through the tool policy (once; a wrapped tool is left alone)."""
        fn = tool.entrypoint
        if fn is None or getattr(fn, self.POLICED_ATTR, None) is not None or self.is_wrapped(tool):
            return
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            return  # a streaming tool's effect happens while it is consumed, not when it is called
        tool.entrypoint = self.policed_by_keyword(tool, fn, _compat.owned_params(tool))  # Agno passes keywords only


adapter = Agno()


def _planning() -> None:
    """When the saga has a Speculator, have Agno's models name each response's tool calls to it.

    Agno runs no hook per model response, and a run takes none: the first run helper that
    starts in a saga with a Speculator wraps ``Model.get_function_calls_to_run`` for the
    process (it then costs a context-variable read per model response in a saga without one).
    """
    if adapter.speculating():
        _compat.observe_planned(adapter.planned)


def _whole(run: dict[str, Any]) -> dict[str, Any]:
    if run.pop("stream", False):
        raise ValueError("saga_run and saga_run_sync return the finished run: leave out stream=True "
                         "(or stream inside your own saga_scope and check the run's status yourself)")
    return run


def _checked(output: RunOutput) -> RunOutput:
    if output.status == RunStatus.error:
        raise RunFailed(f"the agno run ended with status error: {output.content}")
    return output


async def saga_run(
    agent: Agent, input: Any, *, options: SagaOptions | None = None, **run: Any,
) -> RunOutput:
    """``await agent.arun(input, **run)`` as one transaction.

    Agno hands a tool's exception to the model as the tool's result and the run goes on; the
    failed step fails the run all the same (``ToolFailed``), and a run Agno reports as failed
    (``status=error``, which it returns rather than raises) raises ``RunFailed``: either way
    everything is undone newest-first. Inside an open saga the run joins it; a Speculator
    attached to that saga is told each model response's tool calls before Agno runs them.
    """
    run = _whole(run)  # before the saga opens: a wrong call is not a failed run
    saga, run = split_saga_options(run)
    async with adapter.boundary(options=options, **saga):
        _planning()
        return _checked(await agent.arun(input, stream=False, **run))


def saga_run_sync(
    agent: Agent, input: Any, *, options: SagaOptions | None = None, **run: Any,
) -> RunOutput:
    """The blocking form (``agent.run``; Agno refuses async tools there)."""
    run = _whole(run)
    saga, run = split_saga_options(run)
    with adapter.boundary(options=options, **saga):
        _planning()
        return _checked(agent.run(input, stream=False, **run))
