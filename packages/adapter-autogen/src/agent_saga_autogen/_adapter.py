"""AutoGen tools as saga steps, an agent or team run as one saga.

``wrap_tool`` builds a new ``FunctionTool`` with the public constructor over the step
made of the tool's function, with the original's name, description and strictness, so
the argument model and schema are computed from the same signature. AutoGen runs a
sync function with ``loop.run_in_executor(None, ...)``, which does not copy the
caller's context: the step of a sync function is the sync step, handed to that same
executor with :func:`~agent_saga.adapter.carry`, so the saga (and whatever plugins
carry) is there, and a cancelled run leaves it in flight until the function returns
(a thread cannot be cancelled; an async step around the thread would end UNKNOWN while
the function ran on). A custom ``BaseTool`` is copied with its ``run`` made a step.
The step sits inside the tool, so it sees the raw exception that AutoGen's workbench
turns into an ``is_error`` result. ``patch_all()`` patches ``BaseTool.run_json``: a sync
``FunctionTool``'s step is its function on AutoGen's executor thread, as above.
When a Speculator is attached to the saga ``saga_run`` starts in and the runner is one agent,
each model response's tool calls are named to it (:class:`PlannedCalls`) before AutoGen runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Mapping
from typing import Any

import wrapt
from autogen_core import CancellationToken
from autogen_core.tools import BaseTool, FunctionTool
from pydantic import BaseModel

from agent_saga import SagaOptions
from agent_saga.adapter import SPEC_ATTR, Adapter, ToolSpec, carry, split_saga_options
from agent_saga_autogen import _compat

__all__ = ["AutoGen", "PlannedCalls", "adapter", "saga_run"]


class AutoGen(Adapter):
    framework = "autogen"
    distribution = "agent-saga-autogen"
    tool_types = (BaseTool,)
    hint = "make one with FunctionTool(fn, description=...)"

    def function_of(self, tool: Any) -> Callable[..., Any] | None:
        return _compat.function_of(tool) if isinstance(tool, FunctionTool) else None

    def framework_params(self, fn: Callable[..., Any]) -> frozenset[str]:
        return frozenset({"cancellation_token"}) & set(inspect.signature(fn).parameters)

    def spec_of(self, tool: Any) -> ToolSpec | None:
        return getattr(self.function_of(tool) or _compat.own_run(tool), SPEC_ATTR, None)

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        if not isinstance(tool, FunctionTool):
            return _compat.with_run(tool, _run_step(spec, tool))
        fn = _compat.function_of(tool)
        step = self.step(spec, fn) if inspect.iscoroutinefunction(fn) else _on_executor(self.step(spec, fn))
        return FunctionTool(
            _compat.reads_as(step, fn), tool.description, name=tool.name, strict=tool.schema.get("strict", False)
        )

    def patch(self) -> None:
        self.patches.apply(BaseTool, "run_json", lambda original: wrapt.FunctionWrapper(original, self._run_json))

    async def _run_json(self, wrapped: Any, tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if tool is None:
            return await wrapped(*args, **kwargs)
        logged = _logged(args, kwargs)
        fn = _thread_function(tool)
        if fn is None:  # an async function or a custom tool: a cancelled coroutine does not run on
            return await self.patched_async(tool, lambda: wrapped.__func__(tool, *args, **kwargs), logged)

        def step(**fn_kwargs: Any) -> Any:  # AutoGen passes the validated arguments by keyword
            return self.patched_sync(tool, functools.partial(fn, **fn_kwargs), logged)

        # A per-call copy that runs the step on AutoGen's executor thread, the saga carried there.
        return await wrapped.__func__(_compat.with_function(tool, carry(step)), *args, **kwargs)


def _on_executor(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The sync step ``fn`` run where AutoGen runs a sync tool (the loop's default executor), the saga carried there."""

    @functools.wraps(fn)
    async def handed_off(*args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, carry(functools.partial(fn, *args, **kwargs)))

    return handed_off


def _run_step(spec: ToolSpec, tool: BaseTool[Any, Any]) -> Callable[..., Any]:
    """The custom tool's own ``run`` as a step; the log holds the validated arguments' fields."""
    run = tool.run

    async def stepped(args: BaseModel, cancellation_token: CancellationToken) -> Any:
        async def forward(**_fields: Any) -> Any:
            return await run(args, cancellation_token)

        return await spec.call_async(forward, (), args.model_dump())

    setattr(stepped, SPEC_ATTR, spec)
    return stepped


def _thread_function(tool: Any) -> Callable[..., Any] | None:
    """The sync function a ``FunctionTool`` runs on AutoGen's executor (None: an async one, a custom tool)."""
    if not isinstance(tool, FunctionTool) or type(tool).run is not FunctionTool.run:
        return None
    fn = _compat.function_of(tool)
    return None if inspect.iscoroutinefunction(fn) else fn


def _logged(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The model's arguments as ``run_json(args, cancellation_token, call_id=)`` received them."""
    given = args[0] if args else kwargs.get("args", {})
    return dict(given) if isinstance(given, Mapping) else {"args": repr(given)}


adapter = AutoGen()


class PlannedCalls:
    """An agent's ``run_stream`` that names each model response's tool calls to the saga's Speculator.

    An agent's stream stops at each item until the next is asked for, and AutoGen yields a
    ``ToolCallRequestEvent`` (the calls of one model response) before it runs them: each
    one's calls go to :meth:`Adapter.planned <agent_saga.adapter.Adapter.planned>` (the
    model's JSON arguments as they are), so the REVERSIBLE ones run ahead, and then the item
    is passed on unchanged. ``saga_run`` uses it for an agent when a Speculator is attached;
    code that streams an agent itself can iterate ``PlannedCalls(agent.run_stream(task=...))``.
    A team's stream is not one to give it: a team's events reach it through the team's
    runtime while its agents go on, so the calls could already be running.
    """

    def __init__(self, stream: AsyncIterable[Any]) -> None:
        self.stream = stream

    def __aiter__(self) -> AsyncGenerator[Any, None]:
        return self._fed()

    async def _fed(self) -> AsyncGenerator[Any, None]:
        # imported here: the adapter needs autogen-core only
        from autogen_agentchat.messages import ToolCallRequestEvent

        try:
            async for item in self.stream:
                if isinstance(item, ToolCallRequestEvent):
                    adapter.planned((call.name, call.arguments) for call in item.content)
                yield item
        finally:  # closed early (an error, a cancelled run): the agent's stream is closed with it
            close = getattr(self.stream, "aclose", None)
            if close is not None:
                await close()


async def saga_run(
    runner: Any, *, options: SagaOptions | None = None, **run: Any,
) -> Any:
    """``await runner.run(**run)`` (e.g. ``task="..."``) as one transaction.

    ``runner`` is an agent (``AssistantAgent``) or a team (``RoundRobinGroupChat``, ...).
    AutoGen's workbench turns a tool exception into an ``is_error`` result and the
    model carries on; the failed step is UNKNOWN all the same, so when the run
    returns the helper fails it (``ToolFailed``) and every finished step is undone
    newest-first. Inside an open saga the run joins it. When a Speculator is attached to
    that saga and ``runner`` is one agent, the run is the agent's ``run_stream`` (AutoGen's
    streaming form of ``run``; its closing ``TaskResult`` is returned) read through
    :class:`PlannedCalls`, so the Speculator is told each model response's tool calls. A
    team runs with ``run`` either way (see :class:`PlannedCalls`).
    """
    saga, run = split_saga_options(run)
    async with adapter.boundary(options=options, **saga):
        if not _planning(runner):
            return await runner.run(**run)
        from autogen_agentchat.base import TaskResult

        result = None
        async with contextlib.aclosing(aiter(PlannedCalls(runner.run_stream(**run)))) as items:
            async for item in items:
                if isinstance(item, TaskResult):
                    result = item
        return result


def _planning(runner: Any) -> bool:
    """Whether this run names its planned calls: an agent, in a saga with a Speculator attached."""
    if not adapter.speculating():
        return False
    try:
        from autogen_agentchat.agents import BaseChatAgent  # the adapter needs autogen-core only
    except ImportError:
        return False  # then the runner is not an AgentChat agent
    return isinstance(runner, BaseChatAgent)
