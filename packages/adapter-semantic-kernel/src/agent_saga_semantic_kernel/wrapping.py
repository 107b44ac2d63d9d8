"""``wrap_tool`` / ``wrap_plugin``: kernel functions whose calls are saga steps.

The copy is a ``KernelFunctionFromMethod`` with the original metadata (name,
description, parameters, plugin), made with Semantic Kernel's own
``function_copy``; its ``method`` is a thin guard that carries the ToolSpec. The step
itself is taken by ``saga_filter`` on the kernel's invocation path. A wrapped
function called inside a saga by a kernel that has no saga filter refuses to run:
an effect the saga cannot see must not happen quietly.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Unpack

from semantic_kernel.functions import KernelFunction, KernelPlugin
from semantic_kernel.functions.kernel_function_from_method import KernelFunctionFromMethod

from agent_saga.context import current_saga
from agent_saga.engine.options import StepKwargs, StepOptions
from agent_saga.errors import BoundaryRequired
from agent_saga.plugins.support import SPEC_ATTR
from agent_saga.semantics import ActionSemantics
from agent_saga.toolspec import ToolSpec
from agent_saga_semantic_kernel.filtering import FRAMEWORK, in_step, spec_of

__all__ = ["FRAMEWORK", "is_wrapped", "wrap_plugin", "wrap_tool", "wrap_with_spec"]


def _refuse(spec: ToolSpec) -> None:
    if current_saga() is not None and not in_step():
        raise BoundaryRequired(
            f"kernel function {spec.name!r} is a saga step, but the kernel that called it has no saga "
            "filter, so the call would run unprotected; run the agent with saga_run(), call "
            "agent_saga.adapters.semantic_kernel.install(kernel), or use agent_saga.patch_all()"
        )


def _guard(spec: ToolSpec, method: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def async_guard(*args: Any, **kwargs: Any) -> Any:
            _refuse(spec)
            return await method(*args, **kwargs)

        guard: Callable[..., Any] = async_guard
    else:

        @functools.wraps(method)
        def sync_guard(*args: Any, **kwargs: Any) -> Any:
            _refuse(spec)
            return method(*args, **kwargs)

        guard = sync_guard
    setattr(guard, SPEC_ATTR, spec)
    return guard


def is_wrapped(function: Any) -> bool:
    """Whether ``function`` came out of ``wrap_tool``."""
    return spec_of(function) is not None


def wrap_with_spec(function: KernelFunctionFromMethod, spec: ToolSpec) -> KernelFunctionFromMethod:
    if not isinstance(function, KernelFunctionFromMethod):
        raise TypeError(
            f"wrap_tool takes a method-backed kernel function (@kernel_function, "
            f"KernelFunction.from_method, a KernelPlugin's function), got {type(function).__name__}"
        )
    if is_wrapped(function):
        raise ValueError(f"kernel function {function.name!r} is already wrapped; wrap the original once")
    copy = function.function_copy()
    assert isinstance(copy, KernelFunctionFromMethod)
    copy.method = _guard(spec, function.method)
    return copy


def wrap_tool(
    function: KernelFunctionFromMethod,
    *,
    semantics: ActionSemantics | str | None = None,
    name: str | None = None,
    options: StepOptions | None = None,
    **more: Unpack[StepKwargs],
) -> KernelFunctionFromMethod:
    """Make every call of ``function`` a saga step (outside a saga it calls straight through).

    ``compensate`` maps the function's own return value (``FunctionResult.value``) to a
    ``Compensation``.
    """
    if not isinstance(function, KernelFunctionFromMethod):
        raise TypeError(
            f"wrap_tool takes a method-backed kernel function (@kernel_function, "
            f"KernelFunction.from_method, a KernelPlugin's function), got {type(function).__name__}"
        )
    try:
        signature: inspect.Signature | None = inspect.signature(function.method)
    except (TypeError, ValueError):
        signature = None
    spec = ToolSpec.of(name or function.name, semantics=semantics, options=options, signature=signature, **more)
    return wrap_with_spec(function, spec)


def wrap_plugin(plugin: KernelPlugin, functions: Mapping[str, Mapping[str, Any]]) -> KernelPlugin:
    """A copy of ``plugin`` with the named functions wrapped (``{name: wrap_tool options}``).

    Functions not named are carried over unchanged (with ``patch_all`` they are still
    classified by the tool policy).
    """
    if not isinstance(plugin, KernelPlugin):
        raise TypeError(f"wrap_plugin takes a KernelPlugin, got {type(plugin).__name__}")
    missing = sorted(set(functions) - set(plugin.functions))
    if missing:
        raise KeyError(
            f"plugin {plugin.name!r} has no function named {missing}; it has {sorted(plugin.functions)}"
        )
    copied: list[KernelFunction] = [
        wrap_tool(fn, **functions[name]) if name in functions else fn  # type: ignore[arg-type]
        for name, fn in plugin.functions.items()
    ]
    return KernelPlugin(name=plugin.name, description=plugin.description, functions=copied)
