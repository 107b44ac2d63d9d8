"""The plugin manager, behind a typed facade.

pluggy's hook calls are untyped (``pm.hook.agent_saga_patch(config=...)``); the rest
of agent-saga talks to :class:`Plugins`, whose methods say what goes in and comes out.
Adapters arrive through the entry-point group ``agent_saga_adapters``, loaded only
after :mod:`agent_saga.plugins.discovery` found their framework installed in range.

Observer hooks are called from the engine's interceptor chain by one bridge
interceptor, installed only while some plugin implements an observer hook, so a
process without observers pays nothing per step.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from agent_saga._once import FirstUse
from agent_saga.context import current_saga, use_saga
from agent_saga.engine.observe import (
    Interceptor,
    RollbackEvent,
    SagaEvent,
    StepEvent,
    Wrapper,
    add_interceptor,
    remove_interceptor,
)
from agent_saga.plugins.hookspecs import OBSERVER_HOOKS, PROJECT, AgentSagaHooks, hookimpl

if TYPE_CHECKING:
    from agent_saga.engine.saga import Saga
    from agent_saga.engine.step_options import StepOptions
    from agent_saga.plugins.config import PatchConfig

__all__ = ["CORE_PLUGIN", "Plugins", "active", "plugins", "reset_plugins"]

CORE_PLUGIN = "agent_saga.core"


class _CorePlugin:
    """What the core itself carries across a hand-off: the current saga."""

    @hookimpl
    def agent_saga_capture(self) -> Callable[[], AbstractContextManager[Any]] | None:
        saga = current_saga()
        if saga is None:
            return None
        return lambda: _attached(saga)


@contextlib.contextmanager
def _attached(saga: Saga) -> Iterator[None]:
    token = use_saga(saga)
    try:
        yield
    finally:
        # A worker thread's context must not keep the saga after the work is done.
        token.var.reset(token)


class _HookBridge(Interceptor):
    """Calls the observer hooks from the engine's interceptor chain."""

    def __init__(self, hook: Any) -> None:
        self._hook = hook

    def saga(self, event: SagaEvent) -> Wrapper:
        self._hook.agent_saga_saga_started(event=event)
        end = yield
        self._hook.agent_saga_saga_finished(event=event, end=end)

    def step(self, event: StepEvent) -> Wrapper:
        self._hook.agent_saga_step_started(event=event)
        end = yield
        self._hook.agent_saga_step_finished(event=event, end=end)

    def rollback_step(self, event: RollbackEvent) -> Wrapper:
        outcome = yield
        self._hook.agent_saga_rollback_step(event=event, outcome=outcome)


class Plugins:
    """Typed access to the ``agent_saga`` hooks."""

    def __init__(self) -> None:
        self._pm = pluggy.PluginManager(PROJECT)
        self._pm.add_hookspecs(AgentSagaHooks)
        self._lock = threading.Lock()
        self._bridge = _HookBridge(self._pm.hook)
        self._pm.register(_CorePlugin(), name=CORE_PLUGIN)

    @property
    def manager(self) -> pluggy.PluginManager:
        return self._pm

    def register(self, plugin: ModuleType | object, name: str) -> bool:
        """Register ``plugin`` under ``name`` once; True if it was new."""
        with self._lock:
            if self._pm.get_plugin(name) is not None:
                return False
            self._pm.register(plugin, name=name)
            self._pm.check_pending()  # a misspelt hook name fails here, not silently
            self._refresh_bridge()
            return True

    def unregister(self, name: str) -> None:
        with self._lock:
            if name != CORE_PLUGIN and self._pm.get_plugin(name) is not None:
                self._pm.unregister(name=name)
                self._refresh_bridge()

    def _refresh_bridge(self) -> None:
        observed = any(getattr(self._pm.hook, hook).get_hookimpls() for hook in OBSERVER_HOOKS)
        (add_interceptor if observed else remove_interceptor)(self._bridge)

    def names(self) -> list[str]:
        return sorted(name for name, _ in self._pm.list_name_plugin() if name != CORE_PLUGIN)

    def _only(self, name: str, hook: str) -> Any:
        others = [p for n, p in self._pm.list_name_plugin() if n != name]
        return self._pm.subset_hook_caller(hook, remove_plugins=others)

    def wrap_tool(self, tool: Any, options: StepOptions, name: str | None = None) -> Any | None:
        """The first adapter that recognises ``tool``'s type wraps it; None if none does."""
        return self._pm.hook.agent_saga_wrap_tool(tool=tool, options=options, name=name)

    def plugin(self, name: str) -> object | None:
        """The plugin registered as ``name``, if any."""
        return self._pm.get_plugin(name)

    def patch(self, name: str, config: PatchConfig) -> list[str]:
        """Ask the plugin ``name`` (only) to patch its framework."""
        results: list[list[str] | None] = self._only(name, "agent_saga_patch")(config=config)
        return [target for result in results if result for target in result]

    def unpatch(self, name: str) -> list[str]:
        results: list[list[str] | None] = self._only(name, "agent_saga_unpatch")()
        return [target for result in results if result for target in result]

    def capture(self) -> list[Callable[[], AbstractContextManager[Any]]]:
        """Every plugin's capture at a hand-off (see ``agent_saga_capture``)."""
        return [c for c in self._pm.hook.agent_saga_capture() if c is not None]


_instance = FirstUse(Plugins)


def plugins() -> Plugins:
    """The process-wide plugin manager (created on first use)."""
    return _instance.get()


def active() -> Plugins | None:
    """The manager if something already created it (observers never force pluggy in)."""
    return _instance.made


def reset_plugins() -> None:
    """Forget every registered plugin and its observers (tests start from a clean manager)."""
    old = _instance.replace(None)
    if old is not None:
        remove_interceptor(old._bridge)
