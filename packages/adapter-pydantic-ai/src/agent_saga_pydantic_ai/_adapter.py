"""Pydantic AI function tools as saga steps, an ``Agent.run`` as one saga.

``wrap_tool`` returns a copy of a ``pydantic_ai.Tool`` whose function is the step (same name,
description, JSON schema and validator; the ``RunContext`` reaches the function but not the
log). :func:`wrap_tools` does the same, in place, for tools already inside a
``FunctionToolset``, or an ``Agent``'s own ``@agent.tool`` / ``@agent.tool_plain`` functions.
``patch_all()`` patches ``FunctionToolset.call_tool``, where every function tool of every
agent is called: a sync function's step is the function, on Pydantic AI's worker thread; an
async one's is the whole call.

A gate's :class:`~agent_saga.RepairRequested` (the call's arguments do not fit: nothing ran)
reaches the model as Pydantic AI's own ``ModelRetry``, so the model gets one turn to correct
the call within the tool's retries; every other failure of a step ends the run as Pydantic AI
ends it for any tool exception. When a Speculator is attached to the saga a run helper starts in,
the run's capability :class:`PlannedCalls` names each model response's tool calls to it before
Pydantic AI runs them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import wrapt
from pydantic_ai import Agent, ModelRetry, RunContext, Tool
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelResponse
from pydantic_ai.toolsets import FunctionToolset

from agent_saga import RepairRequested, SagaOptions, StepOptions
from agent_saga.adapter import Adapter, ToolSpec, split_saga_options
from agent_saga_pydantic_ai import _compat

__all__ = ["PlannedCalls", "PydanticAI", "adapter", "saga_run", "saga_run_sync", "wrap_tools"]

F = TypeVar("F", bound=Callable[..., Any])
Target = TypeVar("Target", FunctionToolset[Any], Agent[Any, Any])


def retrying(fn: F) -> F:
    """``fn`` with a gate's repair request raised as ``ModelRetry`` (its message is the validation errors)."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_retrying(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except RepairRequested as err:
                raise ModelRetry(str(err)) from err

        return async_retrying  # type: ignore[return-value]

    @functools.wraps(fn)
    def sync_retrying(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RepairRequested as err:
            raise ModelRetry(str(err)) from err

    return sync_retrying  # type: ignore[return-value]


class PydanticAI(Adapter):
    framework = "pydantic_ai"
    saga_name = "pydantic-ai"  # the run helpers' saga name (the entry point's key differs)
    distribution = "agent-saga-pydantic-ai"
    tool_types = (Tool,)
    hint = (
        "make one with pydantic_ai.Tool(fn); for tools already in a FunctionToolset or registered "
        "with @agent.tool, use agent_saga_pydantic_ai.wrap_tools(toolset_or_agent, {name: options})"
    )

    def function_of(self, tool: Any) -> Callable[..., Any] | None:
        return _compat.function_of(tool) if isinstance(tool, Tool) else _compat.function_of_call(tool)

    def framework_params(self, fn: Callable[..., Any]) -> tuple[str, ...]:
        return _compat.context_params(fn)

    def tool_name(self, tool: Any) -> str:
        return str(tool.name if isinstance(tool, Tool) else tool.tool_def.name)

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        return _compat.with_function(tool, retrying(self.step(spec, _compat.function_of(tool))))

    def patch(self) -> None:
        self.patches.apply(FunctionToolset, "call_tool", lambda original: wrapt.FunctionWrapper(original, self._call_tool))

    async def _call_tool(self, wrapped: Any, toolset: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name, tool_args, ctx, tool = _call_of(*args, **kwargs)
        fn = _compat.thread_function(tool)
        try:
            if fn is None:  # an async function: a cancelled coroutine does not run on
                return await self.patched_async(tool, lambda: wrapped(*args, **kwargs), tool_args)

            # A sync function runs on a worker thread, which a cancelled run does not stop: the
            # step is the function itself, there, so it stays in flight until the function
            # returns (as under wrap_tool) instead of ending UNKNOWN while it runs on.
            def step(*fn_args: Any, **fn_kwargs: Any) -> Any:
                return self.patched_sync(tool, functools.partial(fn, *fn_args, **fn_kwargs), tool_args)

            return await wrapped(name, tool_args, ctx, _compat.calling(tool, step))
        except RepairRequested as err:
            raise ModelRetry(str(err)) from err


def _call_of(name: str, tool_args: dict[str, Any], ctx: Any, tool: Any) -> tuple[str, dict[str, Any], Any, Any]:
    """The parts of a ``FunctionToolset.call_tool`` call: the name, the model's (validated) arguments, context, tool."""
    return name, tool_args, ctx, tool


adapter = PydanticAI()


class PlannedCalls(AbstractCapability[Any]):
    """A capability that names each model response's tool calls to the saga's Speculator.

    ``after_model_request`` sees the response whose tool calls Pydantic AI is about to run: they
    go to :meth:`Adapter.planned <agent_saga.adapter.Adapter.planned>` (the model's arguments as
    they are, a dict or its JSON text), so the REVERSIBLE ones run ahead. The response goes on
    unchanged. The run helpers add it to a run when a Speculator is attached (pydantic-ai-slim
    2.x, whose runs take capabilities); an agent may also be built with it,
    ``Agent(..., capabilities=[PlannedCalls()])``, which 1.71 takes too.
    """

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: Any, response: ModelResponse,
    ) -> ModelResponse:
        if response.tool_calls:
            adapter.planned((call.tool_name, call.args) for call in response.tool_calls)
        return response


def _planning(agent: Agent[Any, Any], run: dict[str, Any]) -> dict[str, Any]:
    """The run's options with :class:`PlannedCalls` among its capabilities when the saga has a Speculator; else as is.

    Also as is when the agent or the run has one already (each response is named once), and
    with a release whose runs take no capabilities (the Agent's own, if given, still names them).
    """
    if not adapter.speculating() or not _compat.RUN_TAKES_CAPABILITIES:
        return run
    given = list(run.get("capabilities") or ())
    if any(isinstance(c, PlannedCalls) for c in given) or _compat.has_capability(agent, PlannedCalls):
        return run
    return {**run, "capabilities": [*given, PlannedCalls()]}


def wrap_tools(target: Target, steps: Mapping[str, StepOptions | Mapping[str, Any]]) -> Target:
    """Make the named tools of a ``FunctionToolset`` (or an ``Agent``'s own tools) saga steps, in place.

    ``steps`` maps a tool's name to its step options: a :class:`~agent_saga.StepOptions`, or
    the keywords ``wrap_tool`` takes (``{"semantics": "COMPENSABLE", "compensate": ...}``).
    For an ``Agent`` the tools are those registered with ``@agent.tool``, ``@agent.tool_plain``
    or ``tools=[...]``, and those of the ``FunctionToolset``s in its ``toolsets=[...]``. Returns
    ``target``. A name none of them holds is refused before anything changes.
    """
    holders = _function_toolsets(target)
    held = {name: toolset for toolset in reversed(holders) for name in toolset.tools}  # the first holder wins
    missing = sorted(set(steps) - set(held))
    if missing:
        raise ValueError(
            f"wrap_tools: no tool named {', '.join(map(repr, missing))} in this "
            f"{type(target).__name__} (it has {', '.join(map(repr, sorted(held))) or 'no tools'})"
        )
    wrapped = {}
    for name, options in steps.items():
        step = {"options": options} if isinstance(options, StepOptions) else dict(options)
        wrapped[name] = adapter.wrap_tool(held[name].tools[name], **step)
    for name, tool in wrapped.items():
        held[name].tools[name] = tool
    return target


def _function_toolsets(target: Any) -> list[FunctionToolset[Any]]:
    """The function toolsets of ``target``: itself, or an agent's own and those it was given."""
    if isinstance(target, FunctionToolset):
        return [target]
    if isinstance(target, Agent):  # the agent's own function toolset (its decorated tools) comes first
        return [toolset for toolset in target.toolsets if isinstance(toolset, FunctionToolset)]
    raise TypeError(
        f"wrap_tools takes a pydantic_ai FunctionToolset or Agent, got {type(target).__module__}.{type(target).__qualname__}"
    )


async def saga_run(
    agent: Agent[Any, Any], user_prompt: Any = None, *, options: SagaOptions | None = None, **run: Any,
) -> Any:
    """``await agent.run(user_prompt, **run)`` as one transaction.

    A tool's exception ends Pydantic AI's run and comes out of it; the boundary then undoes
    every finished step newest-first (``SagaAborted``). Inside an open saga the run joins it; a
    Speculator attached to that saga is told each model response's tool calls (:class:`PlannedCalls`).
    """
    saga, run = split_saga_options(run)
    async with adapter.boundary(options=options, **saga):
        return await agent.run(user_prompt, **_planning(agent, run))


def saga_run_sync(
    agent: Agent[Any, Any], user_prompt: Any = None, *, options: SagaOptions | None = None, **run: Any,
) -> Any:
    """The blocking form (``agent.run_sync``)."""
    saga, run = split_saga_options(run)
    with adapter.boundary(options=options, **saga):
        return agent.run_sync(user_prompt, **_planning(agent, run))


