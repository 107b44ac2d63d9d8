"""What ``patch_all()`` installs for CrewAI, and how it is removed.

CrewAI reaches a tool two ways: the native function-calling path calls the tool's
``run`` (``Tool.run`` calls ``func``; ``BaseTool.run`` calls ``_run``), the ReAct
text path calls ``CrewStructuredTool.invoke``, whose ``func`` is the tool's ``_run``.
All six entry points are patched; one call is one step because the engine's
per-call guard (keyed on the original tool) lets only the outermost entry step.
Tools that came out of ``wrap_tool`` are left alone: they are steps already.
"""

from __future__ import annotations

from typing import Any

import wrapt
from crewai.tools import BaseTool
from crewai.tools.base_tool import Tool
from crewai.tools.structured_tool import CrewStructuredTool

from agent_saga.plugins.patching import Patches
from agent_saga.plugins.support import patched_async, patched_sync
from agent_saga_crewai.wrapping import FRAMEWORK, is_wrapped

__all__ = ["patch", "unpatch"]

_patches = Patches()
_NOT_ARGS = frozenset({"config", "callbacks"})


def _origin(instance: Any) -> Any:
    # A structured tool stands for the BaseTool it was made from.
    return getattr(instance, "_original_tool", None) or instance


def _tool_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    logged = {k: v for k, v in kwargs.items() if k not in _NOT_ARGS}
    if "input" in logged and isinstance(logged["input"], dict):
        logged = dict(logged.pop("input"))
    elif args and isinstance(args[0], dict):
        logged = dict(args[0])
    else:
        logged.update({f"arg{i}": a for i, a in enumerate(args)})
    return logged


def _run(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    origin = _origin(instance)
    if instance is None or is_wrapped(origin):
        return wrapped(*args, **kwargs)
    return patched_sync(origin.name, FRAMEWORK, id(origin), lambda: wrapped(*args, **kwargs),
                        _tool_args(args, kwargs))


async def _arun(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    origin = _origin(instance)
    if instance is None or is_wrapped(origin):
        return await wrapped(*args, **kwargs)
    return await patched_async(origin.name, FRAMEWORK, id(origin), lambda: wrapped(*args, **kwargs),
                               _tool_args(args, kwargs))


def patch() -> list[str]:
    for cls, sync_attr, async_attr in (
        (BaseTool, "run", "arun"), (Tool, "run", "arun"), (CrewStructuredTool, "invoke", "ainvoke"),
    ):
        _patches.apply(cls, sync_attr, lambda original: wrapt.FunctionWrapper(original, _run))
        _patches.apply(cls, async_attr, lambda original: wrapt.FunctionWrapper(original, _arun))
    return _patches.targets()


def unpatch() -> list[str]:
    return _patches.revert()
