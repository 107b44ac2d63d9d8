"""OpenAI Agents SDK ``FunctionTool``s as saga steps, a ``Runner`` run as one saga.

``wrap_tool`` takes the Python function behind a ``@function_tool`` tool, makes it a
step, builds the SDK's own invoker over it with ``function_tool`` and puts that on a
copy of the tool: the step runs *inside* the SDK's failure handling (which still turns
the exception into a message for the model), and name, description, JSON schema,
guardrails, timeouts and the failure function are the original's. A hand-built
``FunctionTool`` (no Python function behind it) gets its ``on_invoke_tool`` made a step
instead. ``patch_all()`` patches the SDK's failure-handling invoker (see ``_compat``): a sync
function's step is the function, on the SDK's worker thread; an async one's is the whole call.
When a Speculator is attached to the saga a run helper starts in, the run's hooks name each
model response's function calls to it (:class:`PlannedCalls`) before the Runner runs them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from typing import Any

import wrapt
from agents import FunctionTool, RunConfig, RunHooks, Runner, function_tool
from agents.lifecycle import RunHooksBase

from agent_saga import SagaOptions, StepRefused
from agent_saga.adapter import SPEC_ATTR, Adapter, ToolSpec, split_saga_options
from agent_saga_openai_agents import _compat

__all__ = ["OpenAIAgents", "PlannedCalls", "adapter", "saga_run", "saga_run_sync", "tool_args"]


def tool_args(raw: str) -> dict[str, Any]:
    """The model's JSON arguments as the log records them."""
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {"input": raw}
    return parsed if isinstance(parsed, dict) else {"input": parsed}


class OpenAIAgents(Adapter):
    framework = "openai_agents"
    distribution = "agent-saga-openai-agents"
    tool_types = (FunctionTool,)
    hint = "make one with @agents.function_tool"
    saga_name = "openai-agents"  # the run helpers' saga name (the entry point's key differs)

    def function_of(self, tool: Any) -> Callable[..., Any] | None:
        return _compat.function_of(tool)

    def framework_params(self, fn: Callable[..., Any]) -> tuple[str, ...]:
        return _compat.context_params(fn)

    def spec_of(self, tool: Any) -> ToolSpec | None:
        fn = self.function_of(tool)
        return getattr(fn if fn is not None else tool.on_invoke_tool, SPEC_ATTR, None)

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        fn = self.function_of(tool)
        if fn is not None:
            fresh = function_tool(
                self.step(spec, fn), name_override=tool.name, description_override=tool.description,
                strict_mode=tool.strict_json_schema,
            )
            # replace() runs the SDK's own binding of the invoker to the new tool.
            return dataclasses.replace(tool, on_invoke_tool=fresh.on_invoke_tool)
        original = tool.on_invoke_tool

        async def on_invoke_tool(ctx: Any, raw: str) -> Any:
            async def forward(**_logged: Any) -> Any:
                return await original(ctx, raw)

            return await spec.call_async(forward, (), tool_args(raw))

        setattr(on_invoke_tool, SPEC_ATTR, spec)
        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)

    def patch(self) -> None:
        self.patches.apply(
            _compat.INVOKER, "__call__", lambda original: wrapt.FunctionWrapper(original, functools.partial(self._invoke, original))
        )

    async def _invoke(
        self, original: Any, wrapped: Any, invoker: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        tool = None if invoker is None else _compat.tool_of(invoker)
        if tool is None:
            return await wrapped(*args, **kwargs)
        impl = _compat.implementation(invoker)
        fn = _compat.thread_function(impl)

        async def stepped(ctx: Any, raw: str) -> Any:
            logged = tool_args(raw)
            if fn is None:  # an async function (a cancelled coroutine does not run on), or a hand-built tool
                return await self.patched_async(tool, lambda: impl(ctx, raw), logged)

            # A sync function runs on the SDK's worker thread, which a cancelled call does not
            # stop: the step is the function itself, there, so it stays in flight until the
            # function returns (as under wrap_tool) instead of ending UNKNOWN while it runs on.
            def step(*args: Any, **kwargs: Any) -> Any:
                return self.patched_sync(tool, functools.partial(fn, *args, **kwargs), logged)

            return await _compat.calling(impl, step)(ctx, raw)

        # The SDK's own failure handling runs around the step, on a copy for this call.
        return await original(_compat.with_implementation(invoker, stepped), *args, **kwargs)


adapter = OpenAIAgents()


class PlannedCalls(RunHooks[Any]):
    """Run hooks that name each model response's function calls to the saga's Speculator.

    ``on_llm_end`` sees the response whose function calls the Runner is about to run: they
    go to :meth:`Adapter.planned <agent_saga.adapter.Adapter.planned>` (the model's JSON
    arguments as they are), so the REVERSIBLE ones run ahead. Every hook of ``inner`` (the
    caller's own ``hooks=``) still runs. The run helpers use it when a Speculator is attached.
    """

    def __init__(self, inner: RunHooksBase[Any, Any] | None = None) -> None:
        self.inner = inner

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        adapter.planned(
            (item.name, item.arguments) for item in response.output if getattr(item, "type", None) == "function_call"
        )
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)


def _delegate(name: str) -> Callable[..., Any]:
    async def hook(self: PlannedCalls, *args: Any, **kwargs: Any) -> Any:
        if self.inner is not None:
            return await getattr(self.inner, name)(*args, **kwargs)
        return None

    hook.__name__ = name
    return hook


# Every other hook of the caller's, whichever the installed SDK has.
for _name in [m for m in vars(RunHooksBase) if m.startswith("on_") and m != "on_llm_end"]:
    setattr(PlannedCalls, _name, _delegate(_name))


def _planning(runner: dict[str, Any]) -> dict[str, Any]:
    """The run's options with :class:`PlannedCalls` as its hooks when the saga has a Speculator; else as is."""
    hooks = runner.get("hooks")
    if not adapter.speculating() or not (hooks is None or isinstance(hooks, RunHooksBase)):
        return runner  # (hooks of another kind: the SDK's own error says what it takes)
    return {**runner, "hooks": PlannedCalls(hooks)}


async def saga_run(
    agent: Any, input: Any, *, options: SagaOptions | None = None, **runner: Any,
) -> Any:
    """``await Runner.run(agent, input, **runner)`` as one transaction.

    The SDK turns a tool exception into a message for the model by default and the
    run goes on (a gate refusal's reason is in that message, unless ``run_config`` has
    its own ``tool_error_formatter``); the failed step is UNKNOWN all the same, so when the run returns the
    helper fails it (``ToolFailed``) and everything is undone newest-first. Inside an
    open saga the run joins it; a Speculator attached to that saga is told each model
    response's function calls (:class:`PlannedCalls`).
    """
    saga, runner = split_saga_options(runner)
    async with adapter.boundary(options=options, **saga):
        return await Runner.run(agent, input, **_planning(_refusals_shown(runner)))


def saga_run_sync(
    agent: Any, input: Any, *, options: SagaOptions | None = None, **runner: Any,
) -> Any:
    """The blocking form (``Runner.run_sync``)."""
    saga, runner = split_saga_options(runner)
    with adapter.boundary(options=options, **saga):
        return Runner.run_sync(agent, input, **_planning(_refusals_shown(runner)))


def _refusals_shown(runner: dict[str, Any]) -> dict[str, Any]:
    """The run's options with a gate refusal's reason shown to the model.

    The SDK gives the model a fixed text for any tool exception. A refusal's reason is
    agent-saga's own words (the model's values in it quoted inert): without it a model
    asked to repair its arguments, or to fetch a source, cannot. A formatter the caller
    set is kept as is.
    """
    config = runner.get("run_config") or RunConfig()
    if getattr(config, "tool_error_formatter", True) is not None:  # set by the caller, or an SDK without it
        return runner
    return {**runner, "run_config": dataclasses.replace(config, tool_error_formatter=_refusal_text)}


def _refusal_text(args: Any) -> str | None:
    error = getattr(args, "error", None)
    return str(error) if isinstance(error, StepRefused) else None  # None: the SDK's own text
