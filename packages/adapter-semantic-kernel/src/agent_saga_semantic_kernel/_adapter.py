"""Kernel functions as saga steps, an agent response or a kernel call as one saga.

``wrap_tool`` copies a method-backed kernel function (``function_copy``: same type, name,
description, parameters, plugin) with its ``method`` made a step, so every call inside a
saga is a step, whichever kernel makes it. ``saga_filter``, a function-invocation filter,
is an optimisation on top: on a kernel that has it, the filter takes the step on the
kernel's own async pipeline (a sync function runs on the event loop; the filter awaits
the log where the method's step would block the loop on it) and the method then calls
straight through. ``saga_run``, ``saga_invoke`` and ``install`` add
the filter; ``patch_all()`` puts it innermost in every kernel, where it also classifies
unwrapped functions by the tool policy. When a Speculator is attached to the saga a run
helper starts in, an auto-function-invocation filter names each model response's function
calls to it (:func:`planned_filter`) before the first of them runs.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import wrapt
from semantic_kernel.contents import AuthorRole, ChatMessageContent, FunctionCallContent
from semantic_kernel.filters.auto_function_invocation.auto_function_invocation_context import (
    AutoFunctionInvocationContext,
)
from semantic_kernel.filters.filter_types import FilterTypes
from semantic_kernel.filters.functions.function_invocation_context import FunctionInvocationContext
from semantic_kernel.functions import KernelFunction, KernelPlugin
from semantic_kernel.functions.kernel_function_from_method import KernelFunctionFromMethod
from semantic_kernel.kernel import Kernel

from agent_saga import SagaOptions
from agent_saga.adapter import Adapter, ToolSpec, signature_of, split_saga_options
from agent_saga_semantic_kernel import _compat

__all__ = [
    "SemanticKernel", "adapter", "install", "planned_filter", "saga_filter", "saga_invoke", "saga_run", "wrap_plugin",
]

NextFilter = Callable[[FunctionInvocationContext], Awaitable[None]]
NextAutoFilter = Callable[[AutoFunctionInvocationContext], Awaitable[None]]

# The spec whose step saga_filter is running: the method under it calls straight through,
# and a second saga filter on the same call passes it on.
_filtered: contextvars.ContextVar[ToolSpec | None] = contextvars.ContextVar("agent_saga_sk_filtered", default=None)


class SemanticKernel(Adapter):
    framework = "semantic_kernel"
    distribution = "agent-saga-semantic-kernel"
    tool_types = (KernelFunctionFromMethod,)
    hint = "make one with @kernel_function and KernelFunction.from_method, or take it from a KernelPlugin"
    saga_name = "semantic-kernel"  # the run helpers' saga name (the entry point's key differs)

    def function_of(self, tool: Any) -> Callable[..., Any]:
        return tool.method  # type: ignore[no-any-return]

    def framework_params(self, fn: Callable[..., Any]) -> Collection[str]:
        signature = signature_of(fn)
        return () if signature is None else _compat.FILLED & set(signature.parameters)

    def wrap_with_spec(self, tool: Any, spec: ToolSpec) -> Any:
        copy = tool.function_copy()
        copy.method = self.step(spec, tool.method)
        return copy

    def step(self, spec: ToolSpec, fn: Callable[..., Any]) -> Callable[..., Any]:
        stepped = super().step(spec, fn)

        async def method_async(*args: Any, **kwargs: Any) -> Any:
            return await (fn if _filtered.get() is spec else stepped)(*args, **kwargs)

        def method_sync(*args: Any, **kwargs: Any) -> Any:
            return (fn if _filtered.get() is spec else stepped)(*args, **kwargs)

        return functools.update_wrapper(method_async if inspect.iscoroutinefunction(fn) else method_sync, stepped)

    def patch(self) -> None:
        self.patches.apply(Kernel, "construct_call_stack", lambda original: wrapt.FunctionWrapper(original, _construct))

    async def invocation_filter(self, context: FunctionInvocationContext, next: NextFilter) -> None:
        """The step of one invocation: a wrapped function's own, else what the tool policy says."""
        function, arguments = context.function, _compat.arguments(context)
        spec = self.spec_of(function)
        if spec is None:

            async def call() -> Any:
                await next(context)
                return context.result

            await self.patched_async(function, call, arguments, raw=lambda result: result.value)
            return
        if _filtered.get() is spec:
            await next(context)
            return
        takes_key = "idempotency_key" in {p.name for p in function.parameters}

        async def forward(idempotency_key: str | None = None, **_logged: Any) -> Any:
            if takes_key and idempotency_key is not None:  # the step's key replaces the model's
                context.arguments["idempotency_key"] = idempotency_key
            await next(context)
            return None if context.result is None else context.result.value

        token = _filtered.set(spec)
        try:
            await spec.call_async(forward, (), arguments)
        finally:
            _filtered.reset(token)


adapter = SemanticKernel()


async def saga_filter(context: FunctionInvocationContext, next: NextFilter) -> None:
    """A function-invocation filter: inside a saga, the invocation is a step."""
    await adapter.invocation_filter(context, next)


def _installed(kernel: Kernel) -> bool:
    return any(f is saga_filter for _, f in kernel.function_invocation_filters)


def install(kernel: Kernel) -> Kernel:
    """Add ``saga_filter`` to ``kernel``'s function-invocation filters (once); returns it."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"install() takes a semantic_kernel.Kernel, got {type(kernel).__name__}")
    if not _installed(kernel):
        kernel.add_filter(FilterTypes.FUNCTION_INVOCATION, saga_filter)
    return kernel


def _construct(wrapped: Any, kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    call = {**dict(zip(("filter_type", "inner_function"), args, strict=False)), **kwargs}
    if kernel is None or FilterTypes(call["filter_type"]) is not FilterTypes.FUNCTION_INVOCATION or _installed(kernel):
        return wrapped(*args, **kwargs)
    return wrapped(call["filter_type"], functools.partial(saga_filter, next=call["inner_function"]))


# The responses whose calls were named: one response's calls each pass the filter, and it
# names them once. By identity (a message's hash is its content: the same calls asked again
# are a new response), weakly: a response is forgotten with its chat history, and its id
# cannot be reused while it is held here.
_named: weakref.WeakValueDictionary[int, ChatMessageContent] = weakref.WeakValueDictionary()
_named_lock = threading.Lock()


async def planned_filter(context: AutoFunctionInvocationContext, next: NextAutoFilter) -> None:
    """An auto-function-invocation filter that names each model response's calls to the saga's Speculator.

    Auto function calling adds the model's response to the chat history, then runs its
    function calls concurrently, each through these filters. The first call to reach this
    filter hands every call of that response to :meth:`Adapter.planned
    <agent_saga.adapter.Adapter.planned>`, so the REVERSIBLE ones run ahead; outermost
    (:func:`_planning` puts it there), it runs before any call of the response reaches
    its function. With no Speculator attached it only passes the call on.
    """
    if adapter.speculating():
        response = _response_of(context)
        if response is not None:
            with _named_lock:
                first = _named.get(id(response)) is not response
                _named[id(response)] = response
            if first:
                adapter.planned(
                    (item.function_name, item.arguments) for item in response.items if isinstance(item, FunctionCallContent)
                )
    await next(context)


def _response_of(context: AutoFunctionInvocationContext) -> ChatMessageContent | None:
    """The newest model response in the chat history: the one whose calls are running."""
    history = context.chat_history
    for message in reversed(history.messages if history is not None else ()):
        if message.role == AuthorRole.TOOL:  # the results of calls already made
            continue
        return message if any(isinstance(item, FunctionCallContent) for item in message.items) else None
    return None


def _planning(kernel: Kernel) -> None:
    """Put :func:`planned_filter` outermost in ``kernel``'s auto-function-invocation filters (once),
    when the saga has a Speculator; else leave the kernel as it is.

    Semantic Kernel runs the last filter of the list outermost (``add_filter`` inserts
    at the front), so it is appended; the caller's filters keep their order, inside it.
    """
    if not adapter.speculating():
        return
    filters = kernel.auto_function_invocation_filters
    if not any(f is planned_filter for _, f in filters):
        filters.append((id(planned_filter), planned_filter))


def wrap_plugin(plugin: KernelPlugin, functions: Mapping[str, Mapping[str, Any]]) -> KernelPlugin:
    """A copy of ``plugin`` with the named functions wrapped (``{name: wrap_tool options}``)."""
    if not isinstance(plugin, KernelPlugin):
        raise TypeError(f"wrap_plugin takes a KernelPlugin, got {type(plugin).__name__}")
    missing = sorted(set(functions) - set(plugin.functions))
    if missing:
        raise KeyError(f"plugin {plugin.name!r} has no function named {missing}; it has {sorted(plugin.functions)}")
    copied: list[KernelFunction] = [
        adapter.wrap_tool(fn, **functions[name]) if name in functions else fn for name, fn in plugin.functions.items()
    ]
    return KernelPlugin(name=plugin.name, description=plugin.description, functions=copied)


async def saga_run(
    agent: Any, *, options: SagaOptions | None = None, **run: Any,
) -> Any:
    """``await agent.get_response(**run)`` (e.g. ``messages="..."``) as one transaction, the filter installed.

    Auto function calling hands a function's exception to the model and goes on; the
    failed step is UNKNOWN all the same, so when the response comes back the run is failed
    (``ToolFailed``) and every finished step is undone newest-first. Inside an open saga
    the run joins it; a Speculator attached to that saga is told each model response's
    function calls (:func:`planned_filter`, added to the kernel once and left there).
    """
    install(agent.kernel)
    saga, run = split_saga_options(run)
    async with adapter.boundary(options=options, **saga):
        _planning(agent.kernel)
        return await agent.get_response(**run)


async def saga_invoke(
    kernel: Kernel, function: Any = None, arguments: Any = None, *, options: SagaOptions | None = None, **kwargs: Any,
) -> Any:
    """``await kernel.invoke(function, arguments, **kwargs)`` as one transaction, the filter installed.

    As in :func:`saga_run`, an attached Speculator is told the function calls of each
    model response that auto function calling runs under it.
    """
    install(kernel)
    saga, kwargs = split_saga_options(kwargs)
    async with adapter.boundary(options=options, **saga):
        _planning(kernel)
        return await kernel.invoke(function, arguments, **kwargs)
