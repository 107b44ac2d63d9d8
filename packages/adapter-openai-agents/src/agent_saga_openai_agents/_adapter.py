"""OpenAI Agents SDK ``FunctionTool``s as saga steps, a ``Runner`` run as one saga.

``wrap_tool`` takes the Python function behind a ``@function_tool`` tool, makes it a
step, builds the SDK's own invoker over it with ``function_tool`` and puts that on a
copy of the tool: the step runs *inside* the SDK's failure handling (which still turns
the exception into a message for the model), and name, description, JSON schema,
guardrails, timeouts and the failure function are the original's. A hand-built
``FunctionTool`` (no Python function behind it) gets its ``on_invoke_tool`` made a step
instead. ``patch_all()`` patches the SDK's failure-handling invoker (see ``_compat``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from typing import Any

import wrapt
from agents import FunctionTool, RunConfig, Runner, function_tool

from agent_saga import SagaOptions, StepRefused
from agent_saga.adapter import SPEC_ATTR, Adapter, ToolSpec, split_saga_options
from agent_saga_openai_agents import _compat

__all__ = ["OpenAIAgents", "adapter", "saga_run", "saga_run_sync", "tool_args"]


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

        async def stepped(ctx: Any, raw: str) -> Any:
            return await self.patched_async(tool, lambda: impl(ctx, raw), tool_args(raw))

        # The SDK's own failure handling runs around the step, on a copy for this call.
        return await original(_compat.with_implementation(invoker, stepped), *args, **kwargs)


adapter = OpenAIAgents()


async def saga_run(
    agent: Any, input: Any, *, options: SagaOptions | None = None, **runner: Any,
) -> Any:
    """``await Runner.run(agent, input, **runner)`` as one transaction.

    The SDK turns a tool exception into a message for the model by default and the
    run goes on (a gate refusal's reason is in that message, unless ``run_config`` has
    its own ``tool_error_formatter``); the failed step is UNKNOWN all the same, so when the run returns the
    helper fails it (``ToolFailed``) and everything is undone newest-first. Inside an
    open saga the run joins it.
    """
    saga, runner = split_saga_options(runner)
    async with adapter.boundary(options=options, **saga):
        return await Runner.run(agent, input, **_refusals_shown(runner))


def saga_run_sync(
    agent: Any, input: Any, *, options: SagaOptions | None = None, **runner: Any,
) -> Any:
    """The blocking form (``Runner.run_sync``)."""
    saga, runner = split_saga_options(runner)
    with adapter.boundary(options=options, **saga):
        return Runner.run_sync(agent, input, **_refusals_shown(runner))


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
