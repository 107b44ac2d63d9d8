"""The plugin manager, behind a typed facade.

pluggy's hook calls are untyped (``pm.hook.agent_saga_patch(config=...)``); the rest
of agent-saga talks to :class:`Plugins`, whose methods say what goes in and comes out.
Adapters arrive through the entry-point group ``agent_saga_adapters``, loaded only
after :mod:`agent_saga.plugins.discovery` found their framework installed in range.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from agent_saga.plugins.hookspecs import PROJECT, AdapterHooks

if TYPE_CHECKING:
    from agent_saga.engine.report import RollbackReport
    from agent_saga.engine.saga import Saga
    from agent_saga.plugins.patching import PatchConfig
    from agent_saga.toolspec import ToolSpec

__all__ = ["Plugins", "active", "plugins"]


class Plugins:
    """Typed access to the ``agent_saga`` hooks."""

    def __init__(self) -> None:
        self._pm = pluggy.PluginManager(PROJECT)
        self._pm.add_hookspecs(AdapterHooks)
        self._lock = threading.Lock()

    @property
    def manager(self) -> pluggy.PluginManager:
        return self._pm

    def register(self, plugin: ModuleType | object, name: str) -> bool:
        """Register ``plugin`` under ``name`` once; True if it was new."""
        with self._lock:
            if self._pm.get_plugin(name) is not None:
                return False
            self._pm.register(plugin, name=name)
            return True

    def unregister(self, name: str) -> None:
        with self._lock:
            if self._pm.get_plugin(name) is not None:
                self._pm.unregister(name=name)

    def names(self) -> list[str]:
        return sorted(name for name, _ in self._pm.list_name_plugin())

    def _only(self, name: str, hook: str) -> Any:
        others = [p for n, p in self._pm.list_name_plugin() if n != name]
        return self._pm.subset_hook_caller(hook, remove_plugins=others)

    def wrap_tool(self, tool: Any, spec: ToolSpec) -> Any | None:
        """The first adapter that recognises ``tool``'s type wraps it; None if none does."""
        return self._pm.hook.agent_saga_wrap_tool(tool=tool, spec=spec)

    def patch(self, name: str, config: PatchConfig) -> list[str]:
        """Ask the plugin ``name`` (only) to patch its framework."""
        results: list[list[str] | None] = self._only(name, "agent_saga_patch")(config=config)
        return [target for result in results if result for target in result]

    def unpatch(self, name: str) -> list[str]:
        results: list[list[str] | None] = self._only(name, "agent_saga_unpatch")()
        return [target for result in results if result for target in result]

    def step_started(self, saga: Saga, tool: str, framework: str) -> None:
        self._pm.hook.agent_saga_step_started(saga=saga, tool=tool, framework=framework)

    def step_finished(self, saga: Saga, tool: str, framework: str, error: BaseException | None) -> None:
        self._pm.hook.agent_saga_step_finished(saga=saga, tool=tool, framework=framework, error=error)

    def saga_finished(self, saga: Saga, report: RollbackReport | None) -> None:
        self._pm.hook.agent_saga_saga_finished(saga=saga, report=report)


_instance: Plugins | None = None
_instance_lock = threading.Lock()


def plugins() -> Plugins:
    """The process-wide plugin manager (created on first use)."""
    global _instance
    with _instance_lock:
        if _instance is None:
            _instance = Plugins()
        return _instance


def active() -> Plugins | None:
    """The manager if something already created it (observers never force pluggy in)."""
    return _instance
