"""The saga step as a Semantic Kernel function-invocation filter.

Semantic Kernel runs every function call (``kernel.invoke``, auto function calling
from a chat completion, an agent's tool call) through its function-invocation
filters, on the event loop, in the caller's context. ``saga_filter`` makes the call
a step there: the function's own result (``context.result.value``) feeds the undo,
and the function's raw exception fails the step before Semantic Kernel turns it
into a result the model reads.

Which calls are steps: a function that came out of ``wrap_tool`` (its spec rides on
its ``method``), else what the ``patch_all`` policy says about its name; anything
else passes straight through, as does every call outside a saga.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

from semantic_kernel.filters.filter_types import FilterTypes
from semantic_kernel.filters.functions.function_invocation_context import FunctionInvocationContext
from semantic_kernel.kernel import Kernel

from agent_saga.context import current_saga
from agent_saga.plugins.support import SPEC_ATTR, patched_async, step_async
from agent_saga.toolspec import ToolSpec

__all__ = ["FRAMEWORK", "NextFilter", "in_step", "install", "is_installed", "saga_filter", "spec_of"]

FRAMEWORK = "semantic_kernel"
NextFilter = Callable[[FunctionInvocationContext], Awaitable[None]]

# The invocation context whose step is running: a second saga filter on the same
# call (installed by hand *and* by patch_all) passes through, and a wrapped function
# can tell that a filter, not a bare kernel, called it.
_running: contextvars.ContextVar[int | None] = contextvars.ContextVar("agent_saga_sk_step", default=None)


def spec_of(function: Any) -> ToolSpec | None:
    """The ToolSpec ``wrap_tool`` attached to ``function``, if any."""
    spec = getattr(getattr(function, "method", None), SPEC_ATTR, None)
    return spec if isinstance(spec, ToolSpec) else None


def in_step() -> bool:
    """Whether the code runs inside a call that a saga filter made a step (or passed)."""
    return _running.get() is not None


def _arguments(context: FunctionInvocationContext) -> dict[str, Any]:
    names = [p.name for p in context.function.parameters if p.name]
    return {name: context.arguments[name] for name in names if name in context.arguments}


def _value(context: FunctionInvocationContext) -> Any:
    return context.result.value if context.result is not None else None


async def saga_filter(context: FunctionInvocationContext, next: NextFilter) -> None:
    """A function-invocation filter: inside a saga, this call is a step."""
    if _running.get() == id(context) or current_saga() is None:
        await next(context)
        return
    token = _running.set(id(context))
    try:
        spec = spec_of(context.function)
        if spec is not None:
            await _explicit(spec, context, next)
        else:
            async def call() -> Any:
                await next(context)
                return context.result  # a FunctionResult; the undo reads its value

            await patched_async(context.function.name, FRAMEWORK, id(context.function), call,
                                _arguments(context), raw=lambda result: result.value)
    finally:
        _running.reset(token)


async def _explicit(spec: ToolSpec, context: FunctionInvocationContext, next: NextFilter) -> None:
    takes_key = any(p.name == "idempotency_key" for p in context.function.parameters)

    async def forward(**_logged: Any) -> Any:
        await next(context)
        return _value(context)

    async def forward_with_key(idempotency_key: str | None = None, **_logged: Any) -> Any:
        # The step's deterministic key replaces whatever the model put there.
        context.arguments["idempotency_key"] = idempotency_key
        await next(context)
        return _value(context)

    await step_async(spec, forward_with_key if takes_key else forward, (), _arguments(context), FRAMEWORK)


def is_installed(kernel: Kernel) -> bool:
    return any(f is saga_filter for _, f in kernel.function_invocation_filters)


def install(kernel: Kernel) -> Kernel:
    """Add ``saga_filter`` to ``kernel``'s function-invocation filters (once); returns it."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"install() takes a semantic_kernel.Kernel, got {type(kernel).__name__}")
    if not is_installed(kernel):
        kernel.add_filter(FilterTypes.FUNCTION_INVOCATION, saga_filter)
    return kernel
