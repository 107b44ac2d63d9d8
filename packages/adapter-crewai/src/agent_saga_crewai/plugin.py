"""The pluggy plugin ``patch_all()`` loads (entry point ``agent_saga_adapters: crewai``)."""

from __future__ import annotations

from typing import Any

from crewai.tools import BaseTool

from agent_saga.engine.options import StepOptions
from agent_saga.plugins.hookspecs import hookimpl
from agent_saga.plugins.patching import PatchConfig
from agent_saga_crewai import patch as _patch
from agent_saga_crewai.wrapping import wrap_tool

__all__ = ["agent_saga_patch", "agent_saga_unpatch", "agent_saga_wrap_tool"]


@hookimpl
def agent_saga_wrap_tool(tool: Any, options: StepOptions, name: str | None) -> Any | None:
    return wrap_tool(tool, options=options, name=name) if isinstance(tool, BaseTool) else None


@hookimpl
def agent_saga_patch(config: PatchConfig) -> list[str]:
    return _patch.patch()


@hookimpl
def agent_saga_unpatch() -> list[str]:
    return _patch.unpatch()
