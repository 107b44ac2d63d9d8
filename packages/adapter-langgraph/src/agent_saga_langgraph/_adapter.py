"""LangChain tools as saga steps, a graph run as one saga.

``wrap_tool`` copies a function-backed tool (``@tool``, ``StructuredTool``, ``Tool``)
with its ``func`` / ``coroutine`` made a step, so the copy is the same class with the
same name, description and ``args_schema``, and the step sees the function's own
exception even when a ToolNode turns it into an error message. ``patch_all()``
patches ``_run`` / ``_arun`` of those classes; ``_arun`` of a tool with no ``coroutine``
runs ``_run`` on an executor thread, whose step is then the one (a cancelled ``arun``
leaves it in flight until the function returns). When a Speculator is attached to the saga a
run helper starts in, the run's callbacks name each model response's tool calls to it
(:class:`PlannedCalls`) before a ToolNode runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

import wrapt
from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.messages import AIMessage
from langchain_core.outputs import LLMResult

from agent_saga import SagaOptions
from agent_saga.adapter import Adapter, ToolSpec, split_saga_options
from agent_saga_langgraph import _compat

__all__ = ["LangGraph", "PlannedCalls", "adapter", "saga_run", "saga_run_sync"]


class LangGraph(Adapter):
    framework = "langgraph"
    distribution = "agent-saga-langgraph"
    tool_types = _compat.FUNCTION_TOOLS
    hint = (
        "a BaseTool subclass that overrides _run itself is not function-backed: build it with "
        "StructuredTool.from_function, or classify it in a tool policy and use agent_saga.patch_all()"
    )

    def function_of(self, tool: Any) -> Callable[..., Any] | None:
        return tool.func if tool.func is not None else tool.coroutine  # type: ignore[no-any-return]

    def framework_params(self, fn: Callable[..., Any]) -> frozenset[str]:
        return _compat.framework_params(fn)

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        update = {attr: self.step(spec, fn) for attr in ("func", "coroutine") if (fn := getattr(tool, attr)) is not None}
        return tool.model_copy(update=update)

    def patch(self) -> None:
        for cls in _compat.FUNCTION_TOOLS:
            self.patches.apply(cls, "_run", lambda original: wrapt.FunctionWrapper(original, self._run))
            self.patches.apply(cls, "_arun", lambda original: wrapt.FunctionWrapper(original, self._arun))

    def _run(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if instance is None:
            return wrapped(*args, **kwargs)
        return self.patched_sync(instance, lambda: wrapped(*args, **kwargs), _logged(args, kwargs))

    async def _arun(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if instance is None or not instance.coroutine:
            # A sync function: LangChain runs _run on an executor thread, which a cancellation
            # does not stop; the patched _run is the step there, and stays in flight until it returns.
            return await wrapped(*args, **kwargs)
        return await self.patched_async(instance, lambda: wrapped(*args, **kwargs), _logged(args, kwargs))


def _logged(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    logged = {k: v for k, v in kwargs.items() if k not in _compat.RUN_KEYWORDS}
    logged.update({f"arg{i}": a for i, a in enumerate(args)})
    return logged


adapter = LangGraph()


class PlannedCalls(BaseCallbackHandler):
    """A LangChain callback that names each model response's tool calls to the saga's Speculator.

    A chat model's ``on_llm_end`` carries the AIMessage whose ``tool_calls`` a ToolNode is
    about to run: they go to :meth:`Adapter.planned <agent_saga.adapter.Adapter.planned>`,
    so the REVERSIBLE ones run ahead. The run helpers add it when a Speculator is attached;
    a graph run another way can be given it in ``config={"callbacks": [PlannedCalls()]}``.
    """

    # Inline, on the model's own thread and context: the calls are named before the graph
    # moves on to its ToolNode, and the saga (a context variable) is the model's.
    run_inline = True
    # Only the model's end is read: LangChain skips this handler for every other event.
    ignore_chain = ignore_agent = ignore_retriever = ignore_retry = ignore_custom_event = True

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> Any:
        for generations in response.generations:
            for generation in generations:
                message = getattr(generation, "message", None)
                if isinstance(message, AIMessage) and message.tool_calls:
                    adapter.planned((call["name"], call["args"]) for call in message.tool_calls)


def _planning(config: Any) -> Any:
    """``config`` with :class:`PlannedCalls` among its callbacks when the saga has a Speculator; else as is."""
    if not adapter.speculating():
        return config
    config = dict(config or {})
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        callbacks = callbacks.copy()
        callbacks.add_handler(PlannedCalls(), inherit=True)
    else:
        callbacks = [*(callbacks or ()), PlannedCalls()]
    config["callbacks"] = callbacks
    return config


async def saga_run(
    graph: Any, input: Any, config: Any = None, *, options: SagaOptions | None = None, **invoke: Any,
) -> Any:
    """``await graph.ainvoke(input, config, **invoke)`` as one transaction.

    If the graph raises, every tool that already ran is undone newest-first and
    ``SagaAborted`` is raised. If a tool failed but the graph carried on (a ToolNode
    with ``handle_tool_errors``), the run is unwound too (cause ``ToolFailed``): a
    failed step is UNKNOWN, and a run standing on one is never committed. Inside an
    open saga the run joins it; a Speculator attached to that saga is told each model
    response's tool calls (:class:`PlannedCalls`).
    """
    saga, invoke = split_saga_options(invoke)
    async with adapter.boundary(options=options, **saga):
        return await graph.ainvoke(input, _planning(config), **invoke)


def saga_run_sync(
    graph: Any, input: Any, config: Any = None, *, options: SagaOptions | None = None, **invoke: Any,
) -> Any:
    """The blocking form of :func:`saga_run` (``graph.invoke``)."""
    saga, invoke = split_saga_options(invoke)
    with adapter.boundary(options=options, **saga):
        return graph.invoke(input, _planning(config), **invoke)
