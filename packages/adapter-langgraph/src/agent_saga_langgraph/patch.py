"""What ``patch_all()`` installs for LangChain tools, and how it is removed.

``StructuredTool._run/_arun`` and ``Tool._run/_arun`` are where a function-backed
tool calls its function with the parsed arguments, so the step sees the function's
raw result (for the policy's JSON paths) and raw exception. Tools that came out of
``wrap_tool`` are left alone: they are steps already.
"""

from __future__ import annotations

from typing import Any

import wrapt
from langchain_core.tools import StructuredTool, Tool

from agent_saga.plugins.patching import Patches
from agent_saga.plugins.support import patched_async, patched_sync
from agent_saga_langgraph.wrapping import FRAMEWORK, is_wrapped

__all__ = ["patch", "unpatch"]

_patches = Patches()
_NOT_ARGS = frozenset({"config", "run_manager", "callbacks"})


def _tool_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    logged = {k: v for k, v in kwargs.items() if k not in _NOT_ARGS}
    logged.update({f"arg{i}": a for i, a in enumerate(args)})
    return logged


def _run(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if instance is None or is_wrapped(instance):
        return wrapped(*args, **kwargs)
    return patched_sync(
        instance.name, FRAMEWORK, id(instance), lambda: wrapped(*args, **kwargs), _tool_args(args, kwargs)
    )


async def _arun(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if instance is None or is_wrapped(instance):
        return await wrapped(*args, **kwargs)
    return await patched_async(
        instance.name, FRAMEWORK, id(instance), lambda: wrapped(*args, **kwargs), _tool_args(args, kwargs)
    )


def patch() -> list[str]:
    for cls in (StructuredTool, Tool):
        _patches.apply(cls, "_run", lambda original: wrapt.FunctionWrapper(original, _run))
        _patches.apply(cls, "_arun", lambda original: wrapt.FunctionWrapper(original, _arun))
    return _patches.targets()


def unpatch() -> list[str]:
    return _patches.revert()
