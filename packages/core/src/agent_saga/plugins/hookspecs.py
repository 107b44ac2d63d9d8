"""The hooks an agent-saga plugin may implement (pluggy project ``agent_saga``).

Three families, every name prefixed ``agent_saga_``:

* **tools** — framework adapters recognise and wrap their framework's tools
  (``agent_saga_wrap_tool``) and patch its runtime (``agent_saga_patch`` /
  ``agent_saga_unpatch``); :class:`agent_saga.adapter.Adapter` implements all three;
* **propagation** — ``agent_saga_capture`` runs where work is handed to another
  thread, executor or task (see :func:`agent_saga.adapter.carry`); each plugin
  captures what it needs carried (the core carries the current saga) and returns how
  to attach it on the other side;
* **observers** — fired by the engine for every saga, step and rollback step,
  whatever front door started them (telemetry, logging, a UI).

Import this module only when plugins are used: it is what pulls in pluggy.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from agent_saga.engine.observe import RollbackEvent, SagaEnd, SagaEvent, StepEnd, StepEvent
    from agent_saga.engine.report import StepOutcome
    from agent_saga.engine.step_options import StepOptions
    from agent_saga.plugins.config import PatchConfig

__all__ = ["OBSERVER_HOOKS", "PROJECT", "AgentSagaHooks", "hookimpl", "hookspec"]

PROJECT = "agent_saga"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: The observer hooks: the engine's interceptor chain calls them only when a plugin implements one.
OBSERVER_HOOKS = (
    "agent_saga_saga_started",
    "agent_saga_saga_finished",
    "agent_saga_step_started",
    "agent_saga_step_finished",
    "agent_saga_rollback_step",
)


class AgentSagaHooks:
    """Hook specifications."""

    # -- tools ------------------------------------------------------------------------

    @hookspec(firstresult=True)
    def agent_saga_wrap_tool(self, tool: Any, options: StepOptions, name: str | None) -> Any | None:
        """Wrap a framework's tool so that every call of it is a saga step.

        Called by :func:`agent_saga.wrap_tool` with whatever its caller passed. Only the
        adapter knows how to read a tool's name and signature, so it builds the
        :class:`~agent_saga.toolspec.ToolSpec` (:class:`agent_saga.adapter.Adapter` does).

        :param tool: the object to wrap, of any type.
        :param options: the step's options, already validated (semantics included).
        :param name: the step's name in the log and the tool policy; None to use the tool's own.
        :return: a tool of the same type with the same name, description and argument
            schema; or None if the type is not this plugin's. Stops at the first non-None
            result. Raises when the type is this plugin's but the tool cannot be wrapped
            (already wrapped, or a form the adapter does not support), saying why.
        """

    @hookspec
    def agent_saga_patch(self, config: PatchConfig) -> list[str] | None:
        """Patch the framework so its runtime's tool calls become saga steps.

        :param config: the active tool policy (what an unwrapped tool is).
        :return: what was patched (dotted names), or None if not applicable. Idempotent.
        """

    @hookspec
    def agent_saga_unpatch(self) -> list[str] | None:
        """Remove exactly what ``agent_saga_patch`` installed; return what was removed."""

    # -- propagation ------------------------------------------------------------------

    @hookspec
    def agent_saga_capture(self) -> Callable[[], AbstractContextManager[Any]] | None:
        """Capture, on the handing thread, what must be carried to where the work will run.

        Called by :func:`agent_saga.adapter.carry` at a hand-off (a framework's executor,
        a job queue, a task). Runs on the thread that hands the work over.

        :return: a zero-argument factory of a context manager that re-establishes the
            captured state on the thread that runs the work (entered around the call,
            exited after it); or None when there is nothing to carry.
        """

    # -- observers ----------------------------------------------------------------------

    @hookspec
    def agent_saga_saga_started(self, event: SagaEvent) -> None:
        """A saga started (its start record was appended)."""

    @hookspec
    def agent_saga_saga_finished(self, event: SagaEvent, end: SagaEnd) -> None:
        """A saga ended: committed, rolled back, frozen or abandoned (``end.status``, ``end.report``)."""

    @hookspec
    def agent_saga_step_started(self, event: StepEvent) -> None:
        """A step passed the gate and is about to run (its intent not yet written)."""

    @hookspec
    def agent_saga_step_finished(self, event: StepEvent, end: StepEnd) -> None:
        """A step's forward call ended: ``end.state`` COMMITTED, UNKNOWN or NOT_APPLIED."""

    @hookspec
    def agent_saga_rollback_step(self, event: RollbackEvent, outcome: StepOutcome) -> None:
        """A rollback settled one step (compensated, failed, orphaned, unresolved, kept)."""
