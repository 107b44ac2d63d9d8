"""The hooks an agent-saga plugin may implement (pluggy project ``agent_saga``).

Framework adapters implement ``agent_saga_wrap_tool`` and ``agent_saga_patch`` /
``agent_saga_unpatch``; observers (telemetry, logging, a UI) implement the
``agent_saga_step_*`` / ``agent_saga_saga_finished`` hooks. Import this module only
when plugins are used: it is what pulls in pluggy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from agent_saga.engine.report import RollbackReport
    from agent_saga.engine.saga import Saga
    from agent_saga.plugins.patching import PatchConfig
    from agent_saga.toolspec import ToolSpec

__all__ = ["PROJECT", "AdapterHooks", "hookimpl", "hookspec"]

PROJECT = "agent_saga"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class AdapterHooks:
    """Hook specifications. Every hook name starts with ``agent_saga_``."""

    @hookspec(firstresult=True)
    def agent_saga_wrap_tool(self, tool: Any, spec: ToolSpec) -> Any | None:
        """Return ``tool`` wrapped as a saga step, of the same type; None if the type is not yours."""

    @hookspec
    def agent_saga_patch(self, config: PatchConfig) -> list[str] | None:
        """Patch the framework so its runtime's tool calls become saga steps.

        Idempotent. Return what was patched (dotted names), or None if not applicable.
        """

    @hookspec
    def agent_saga_unpatch(self) -> list[str] | None:
        """Remove exactly what ``agent_saga_patch`` installed; return what was removed."""

    @hookspec
    def agent_saga_step_started(self, saga: Saga, tool: str, framework: str) -> None:
        """A tool call is about to run as a step of ``saga``."""

    @hookspec
    def agent_saga_step_finished(
        self, saga: Saga, tool: str, framework: str, error: BaseException | None
    ) -> None:
        """A tool call that ran as a step of ``saga`` returned (``error`` None) or raised."""

    @hookspec
    def agent_saga_saga_finished(self, saga: Saga, report: RollbackReport | None) -> None:
        """A saga opened by a run helper or a fleet ended; ``report`` is None when it committed."""
