"""The pluggy plugin ``patch_all()`` loads (entry point ``agent_saga_adapters: semantic_kernel``)."""

from __future__ import annotations

from typing import Any

from semantic_kernel.functions.kernel_function_from_method import KernelFunctionFromMethod

from agent_saga.engine.options import StepOptions
from agent_saga.plugins.hookspecs import hookimpl
from agent_saga.plugins.patching import PatchConfig
from agent_saga_semantic_kernel import patch as _patch
from agent_saga_semantic_kernel.wrapping import wrap_tool

__all__ = ["agent_saga_patch", "agent_saga_unpatch", "agent_saga_wrap_tool"]


@hookimpl
def agent_saga_wrap_tool(tool: Any, options: StepOptions, name: str | None) -> Any | None:
    return wrap_tool(tool, options=options, name=name) if isinstance(tool, KernelFunctionFromMethod) else None


@hookimpl
def agent_saga_patch(config: PatchConfig) -> list[str]:
    return _patch.patch()


@hookimpl
def agent_saga_unpatch() -> list[str]:
    return _patch.unpatch()
