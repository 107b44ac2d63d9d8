"""Google ADK function tools as saga steps, a run as one saga.

``wrap_tool`` takes a ``FunctionTool`` (or the plain function an ADK agent would make one
of) and returns a ``FunctionTool`` of the same class, name, description and declaration
whose function is the step. ``patch_all()`` polices ``FunctionTool._invoke_callable``:
every function tool an agent calls from then on (plain functions in ``tools=[...]``
included: ADK makes them ``FunctionTool``s) is classified by the tool policy; a sync
function's step is the function, where ADK runs it; an async one's is the whole call.
When a Speculator is attached to the saga a run helper starts in, the runner's plugin
:class:`PlannedCalls` names each model response's function calls to it before ADK runs them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Unpack

from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.genai import types

from agent_saga import ActionSemantics, SagaOptions
from agent_saga.adapter import Adapter, StepKwargs, StepOptions, ToolSpec, split_saga_options
from agent_saga_google_adk import _compat

__all__ = ["GoogleADK", "PlannedCalls", "adapter", "saga_run", "saga_run_sync"]

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
            if not _compat.runs_sync(tool):  # a coroutine (a cancelled one does not run on), a generator
                return await self.patched_async(tool, lambda: original(tool, target, args_to_call), logged)

            # A sync function may run on ADK's tool pool, whose thread a cancelled call does not
            # stop: the step is the function itself, where ADK runs it, so it stays in flight
            # until the function returns (as under wrap_tool) instead of ending UNKNOWN.
            @functools.wraps(target)
            def step(*args: Any, **kwargs: Any) -> Any:
                return self.patched_sync(tool, functools.partial(target, *args, **kwargs), logged)

            stepped = _compat.with_function(tool, step)
            return await original(stepped, stepped.func, args_to_call)

        return _invoke_callable


adapter = GoogleADK()


class PlannedCalls(BasePlugin):
    """An ADK plugin that names each model response's function calls to the saga's Speculator.

    ``on_event_callback`` runs on the runner's loop while the agent waits for its event to be
    processed, so it sees a complete (non-partial) model response before ADK runs its function
    calls: they go to :meth:`Adapter.planned <agent_saga.adapter.Adapter.planned>`, so the
    REVERSIBLE ones run ahead. It returns None: the event, and every other plugin, are left as
    they are. The run helpers register it for the run when a Speculator is attached; a runner
    driven another way can be given it in ``App(plugins=[PlannedCalls()], ...)``.
    """

    def __init__(self) -> None:
        super().__init__(name="agent_saga_planned_calls")

    async def on_event_callback(self, *, invocation_context: InvocationContext, event: Event) -> Event | None:
        if not event.partial:  # ADK runs the calls of a complete response only
            adapter.planned((call.name or "", call.args or {}) for call in event.get_function_calls())
        return None


@contextlib.contextmanager
def _planning(runner: Runner) -> Iterator[None]:
    """:class:`PlannedCalls` among the runner's plugins for the run when the saga has a Speculator.

    Nothing is touched when none is attached, or when the runner already has one; the plugin
    this added is removed when the run ends, so the runner is left as it was given.
    """
    plugins = runner.plugin_manager
    if not adapter.speculating() or any(isinstance(p, PlannedCalls) for p in plugins.plugins):
        yield
        return
    added = PlannedCalls()
    plugins.register_plugin(added)
    try:
        yield
    finally:
        _compat.unregister_plugin(plugins, added)


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
    open saga the run joins it; a Speculator attached to that saga is told each model response's
    function calls (:class:`PlannedCalls`).
    """
    saga, run = split_saga_options(run)
    async with adapter.boundary(options=options, **saga):
        with _planning(runner):
            events: AsyncIterator[Event] = runner.run_async(new_message=_content(new_message), **run)
            return [event async for event in events]


def saga_run_sync(
    runner: Runner, new_message: str | types.Content, *, options: SagaOptions | None = None, **run: Any,
) -> list[Event]:
    """The blocking form (``Runner.run``, which runs the agent on a thread of its own)."""
    saga, run = split_saga_options(run)
    with adapter.boundary(options=options, **saga), _planning(runner):
        events: Iterator[Event] = runner.run(new_message=_content(new_message), **run)
        return list(events)
