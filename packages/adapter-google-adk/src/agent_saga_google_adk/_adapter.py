"""Google ADK function tools as saga steps, a run as one saga.

``wrap_tool`` takes a ``FunctionTool`` (or the plain function an ADK agent would make one
of) and returns a ``FunctionTool`` of the same class, name, description and declaration
whose function is the step. ``patch_all()`` polices ``FunctionTool._invoke_callable``:
every function tool an agent calls from then on (plain functions in ``tools=[...]``
included: ADK makes them ``FunctionTool``s) is classified by the tool policy.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Unpack

from google.adk.events import Event
from google.adk.runners import Runner
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.genai import types

from agent_saga import ActionSemantics, SagaOptions
from agent_saga.adapter import Adapter, StepKwargs, StepOptions, ToolSpec, split_saga_options
from agent_saga_google_adk import _compat

__all__ = ["GoogleADK", "adapter", "saga_run", "saga_run_sync"]

Invoke = Callable[[FunctionTool, Callable[..., Any], dict[str, Any]], Any]


class GoogleADK(Adapter):
    framework = "google_adk"
    saga_name = "google-adk"  # the run helpers' saga name (the entry point's key differs)
    distribution = "agent-saga-google-adk"
    tool_types = (FunctionTool,)
    hint = "make one with google.adk.tools.FunctionTool(fn), or pass the plain function itself"

    def function_of(self, tool: Any) -> Callable[..., Any]:
        return tool.func  # type: ignore[no-any-return]

    def framework_params(self, fn: Callable[..., Any]) -> tuple[str, ...]:
        return _compat.context_params(fn)

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        return _compat.with_function(tool, self.step(spec, tool.func))

    def wrap_tool(  # type: ignore[override]  # also takes the plain function ADK would wrap
        self,
        tool: Any,
        *,
        semantics: ActionSemantics | str | None = None,
        name: str | None = None,
        options: StepOptions | None = None,
        **more: Unpack[StepKwargs],
    ) -> FunctionTool:
        """``tool`` made a saga step: a ``FunctionTool`` with the same name, description and declaration.

        A plain function becomes the ``FunctionTool`` an ADK agent would make of it.
        """
        if callable(tool) and not isinstance(tool, BaseTool) and (inspect.isfunction(tool) or inspect.ismethod(tool)):
            tool = FunctionTool(tool)
        wrapped: FunctionTool = super().wrap_tool(tool, semantics=semantics, name=name, options=options, **more)
        return wrapped

    def patch(self) -> None:
        self.patches.apply(FunctionTool, "_invoke_callable", self._policed)

    def _policed(self, original: Invoke) -> Invoke:
        @functools.wraps(original)
        async def _invoke_callable(tool: FunctionTool, target: Callable[..., Any], args_to_call: dict[str, Any]) -> Any:
            if target is not tool.func:  # a require_confirmation callable, not the tool
                return await original(tool, target, args_to_call)
            hidden = _compat.context_params(tool.func)
            logged = {k: v for k, v in args_to_call.items() if k not in hidden}
            return await self.patched_async(tool, lambda: original(tool, target, args_to_call), logged)

        return _invoke_callable


adapter = GoogleADK()


def _content(message: str | types.Content) -> types.Content:
    if isinstance(message, str):
        return types.Content(role="user", parts=[types.Part(text=message)])
    return message


async def saga_run(
    runner: Runner, new_message: str | types.Content, *, options: SagaOptions | None = None, **run: Any,
) -> list[Event]:
    """Every event of ``runner.run_async(new_message=..., **run)`` as one transaction.

    ``run`` is what ``Runner.run_async`` takes (``user_id``, ``session_id``, ``run_config``);
    a string message becomes the user's text. A tool exception ends an ADK run unless an
    ``on_tool_error_callback`` answers the model instead; either way the failed step fails the
    run (``ToolFailed`` when the run returned) and everything is undone newest-first. Inside an
    open saga the run joins it.
    """
    saga, run = split_saga_options(run)
    async with adapter.boundary(options=options, **saga):
        events: AsyncIterator[Event] = runner.run_async(new_message=_content(new_message), **run)
        return [event async for event in events]


def saga_run_sync(
    runner: Runner, new_message: str | types.Content, *, options: SagaOptions | None = None, **run: Any,
) -> list[Event]:
    """The blocking form (``Runner.run``, which runs the agent on a thread of its own)."""
    saga, run = split_saga_options(run)
    with adapter.boundary(options=options, **saga):
        events: Iterator[Event] = runner.run(new_message=_content(new_message), **run)
        return list(events)
