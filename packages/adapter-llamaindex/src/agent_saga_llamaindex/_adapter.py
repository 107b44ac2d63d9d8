"""LlamaIndex ``FunctionTool``s as saga steps, an agent run as one saga.

``wrap_tool`` builds a new ``FunctionTool`` over the step made of the tool's own
function, with the original metadata (name, description, ``fn_schema``), callbacks and
partial parameters. The step sits inside the tool, so it sees the raw exception that
LlamaIndex's agents turn into an ``is_error`` output for the model. ``patch_all()``
patches ``FunctionTool.call`` / ``acall``, where agents call a tool; the undo reads the
function's own result from ``ToolOutput.raw_output``. ``acall`` of a sync function runs it on
the loop's executor: there the step is the function itself, on that thread, so a cancelled
run leaves it in flight until the function returns. When a Speculator is attached to the
saga a run helper starts in, an instrumentation span handler names each model response's
tool calls to it (:class:`PlannedCalls`) before the agent sends them to its tools.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import Any

import wrapt
from llama_index.core.agent.workflow.workflow_events import AgentOutput
from llama_index.core.instrumentation.span_handlers import NullSpanHandler
from llama_index.core.tools import FunctionTool
from llama_index_instrumentation import get_dispatcher  # what llama_index.core.instrumentation re-exports

from agent_saga import SagaOptions
from agent_saga.adapter import Adapter, ToolSpec, split_saga_options
from agent_saga_llamaindex import _compat

__all__ = ["LlamaIndex", "PlannedCalls", "adapter", "saga_run"]


class LlamaIndex(Adapter):
    framework = "llamaindex"
    distribution = "agent-saga-llamaindex"
    tool_types = (FunctionTool,)
    hint = "make one with FunctionTool.from_defaults(fn)"

    def function_of(self, tool: Any) -> Callable[..., Any]:
        return tool.real_fn  # type: ignore[no-any-return]

    def framework_params(self, fn: Callable[..., Any]) -> Collection[str]:
        return _compat.context_params(fn)

    def tool_name(self, tool: Any) -> str:
        return str(tool.metadata.name or getattr(tool.real_fn, "__name__", "tool"))

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        # LlamaIndex derives the other face (sync or async) from the one it is given.
        fn = tool.real_fn
        face = "async_fn" if inspect.iscoroutinefunction(fn) else "fn"
        return type(tool)(
            metadata=tool.metadata, partial_params=dict(tool.partial_params),
            **{face: self.step(spec, fn)}, **_compat.callbacks(tool),
        )

    def patch(self) -> None:
        self.patches.apply(FunctionTool, "call", lambda original: wrapt.FunctionWrapper(original, self._call))
        self.patches.apply(FunctionTool, "acall", lambda original: wrapt.FunctionWrapper(original, self._acall))

    def _call(self, wrapped: Any, tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if tool is None:
            return wrapped(*args, **kwargs)
        return self.patched_sync(tool, lambda: wrapped(*args, **kwargs), _logged(tool, args, kwargs), raw=_raw)

    async def _acall(self, wrapped: Any, tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if tool is None:
            return await wrapped(*args, **kwargs)
        logged = _logged(tool, args, kwargs)
        fn = _compat.thread_function(tool)
        if fn is None:  # an async function: a cancelled coroutine does not run on
            return await self.patched_async(tool, lambda: wrapped(*args, **kwargs), logged, raw=_raw)

        # A sync function runs on the loop's executor, which a cancelled run does not stop: the
        # step is the function itself, there (as under wrap_tool), instead of ending UNKNOWN.
        def step(*fn_args: Any, **fn_kwargs: Any) -> Any:
            return self.patched_sync(tool, functools.partial(fn, *fn_args, **fn_kwargs), logged)

        return await wrapped.__func__(_compat.calling(tool, step), *args, **kwargs)


def _logged(tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    logged = {k: v for k, v in kwargs.items() if k != tool.ctx_param_name}
    logged.update({f"arg{i}": a for i, a in enumerate(args)})
    return logged


def _raw(output: Any) -> Any:
    """The function's own result inside the ``ToolOutput`` that ``call`` / ``acall`` return."""
    return getattr(output, "raw_output", output)


adapter = LlamaIndex()


class PlannedCalls(NullSpanHandler):
    """An instrumentation span handler that names each model response's tool calls to the saga's Speculator.

    A workflow agent (``FunctionAgent``, ``ReActAgent``, ``AgentWorkflow``) turns the
    model's response into an ``AgentOutput`` whose ``tool_calls`` its next step
    (``parse_agent_output``) sends to its tools. Workflow steps are instrumentation spans,
    entered before the step's body runs: the one entered with an ``AgentOutput`` hands
    its calls to :meth:`Adapter.planned <agent_saga.adapter.Adapter.planned>`, so the
    REVERSIBLE ones run ahead. The run helper adds it to the root dispatcher for the run
    when a Speculator is attached; an agent run another way can be given it with
    ``llama_index.core.instrumentation.get_dispatcher().add_span_handler(PlannedCalls())``.
    """

    @classmethod
    def class_name(cls) -> str:
        return "AgentSagaPlannedCalls"

    def span_enter(self, id_: str, bound_args: inspect.BoundArguments, instance: Any = None,
                   parent_id: str | None = None, tags: dict[str, Any] | None = None, **kwargs: Any) -> None:
        for value in bound_args.arguments.values():
            if isinstance(value, AgentOutput) and value.tool_calls:
                adapter.planned((call.tool_name, call.tool_kwargs) for call in value.tool_calls)


# One handler on the root dispatcher while any run that speculates is open: it sees every
# run's spans, and each names its calls in its own saga (the context its step runs in).
_PLANNED = PlannedCalls()
_planning_runs = 0
_planning_lock = threading.Lock()


@contextmanager
def _planning() -> Iterator[None]:
    """:class:`PlannedCalls` on the root dispatcher while the block runs, when the saga has a Speculator."""
    global _planning_runs
    if not adapter.speculating():
        yield
        return
    root = get_dispatcher()
    with _planning_lock:
        if _planning_runs == 0:
            root.add_span_handler(_PLANNED)
        _planning_runs += 1
    try:
        yield
    finally:
        with _planning_lock:
            _planning_runs -= 1
            if _planning_runs == 0:  # a new list: a dispatcher walking the old one is not disturbed
                root.span_handlers = [h for h in root.span_handlers if h is not _PLANNED]


async def saga_run(
    agent: Any, *, options: SagaOptions | None = None, **run: Any,
) -> Any:
    """``await agent.run(**run)`` (e.g. ``user_msg=...``) as one transaction.

    LlamaIndex's agents turn a tool exception into an ``is_error`` result and let the
    model carry on; the failed step is UNKNOWN all the same, so when the run returns
    the helper fails it (``ToolFailed``) and everything is undone newest-first. Inside
    an open saga the run joins it; a Speculator attached to that saga is told each model
    response's tool calls (:class:`PlannedCalls`).
    """
    saga, run = split_saga_options(run)
    async with adapter.boundary(options=options, **saga):
        with _planning():
            return await agent.run(**run)
