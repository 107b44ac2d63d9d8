"""``saga_run``: one graph run, one saga."""

from __future__ import annotations

from typing import Any

from agent_saga.log.base import WAL
from agent_saga.plugins.support import run_boundary

__all__ = ["saga_run", "saga_run_sync"]


async def saga_run(
    graph: Any, input: Any, config: Any = None, *, wal: WAL | None = None, name: str = "langgraph", **scope: Any
) -> Any:
    """``await graph.ainvoke(input, config)`` as one transaction.

    If the graph raises, every tool that already ran is undone newest-first and
    ``SagaAborted`` is raised. If a tool failed but the graph carried on (a ToolNode
    with ``handle_tool_errors``), the run is unwound too (cause ``ToolFailed``): a
    failed step is UNKNOWN, and a run standing on one is never committed. Inside an
    open saga the run joins it.
    """
    async with run_boundary(wal, name=name, **scope):
        return await graph.ainvoke(input, config)


def saga_run_sync(
    graph: Any, input: Any, config: Any = None, *, wal: WAL | None = None, name: str = "langgraph", **scope: Any
) -> Any:
    """The blocking form of :func:`saga_run` (``graph.invoke``)."""
    with run_boundary(wal, name=name, **scope):
        return graph.invoke(input, config)
