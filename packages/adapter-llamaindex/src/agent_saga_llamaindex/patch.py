"""What ``patch_all()`` installs for LlamaIndex: ``FunctionTool.call`` and ``acall``.

Agents call ``await tool.acall(**kwargs)`` and catch what it raises, so the step
wraps that call and sees the raw exception; the undo reads the function's own
result from ``ToolOutput.raw_output``. Tools from ``wrap_tool`` are left alone.
"""

from __future__ import annotations

from typing import Any

import wrapt
from llama_index.core.tools import FunctionTool

from agent_saga.plugins.patching import Patches
from agent_saga.plugins.support import patched_async, patched_sync
from agent_saga_llamaindex.wrapping import FRAMEWORK, is_wrapped

__all__ = ["patch", "unpatch"]

_patches = Patches()


def _args(tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    logged = {k: v for k, v in kwargs.items() if k != tool.ctx_param_name}
    logged.update({f"arg{i}": a for i, a in enumerate(args)})
    return logged


def _raw(output: Any) -> Any:
    return getattr(output, "raw_output", output)


def _call(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if instance is None or is_wrapped(instance):
        return wrapped(*args, **kwargs)
    return patched_sync(instance.metadata.name, FRAMEWORK, id(instance), lambda: wrapped(*args, **kwargs),
                        _args(instance, args, kwargs), _raw)


async def _acall(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if instance is None or is_wrapped(instance):
        return await wrapped(*args, **kwargs)
    return await patched_async(instance.metadata.name, FRAMEWORK, id(instance), lambda: wrapped(*args, **kwargs),
                               _args(instance, args, kwargs), _raw)


def patch() -> list[str]:
    _patches.apply(FunctionTool, "call", lambda original: wrapt.FunctionWrapper(original, _call))
    _patches.apply(FunctionTool, "acall", lambda original: wrapt.FunctionWrapper(original, _acall))
    return _patches.targets()


def unpatch() -> list[str]:
    return _patches.revert()
