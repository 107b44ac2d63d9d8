"""``saga_run``: one AutoGen agent (or team) run, one saga."""

from __future__ import annotations

from typing import Any

from agent_saga.log.base import WAL
from agent_saga.plugins.support import run_boundary

__all__ = ["saga_run"]


async def saga_run(runner: Any, *, wal: WAL | None = None, name: str = "autogen", **run: Any) -> Any:
    """``await runner.run(**run)`` (e.g. ``task="..."``) as one transaction.

    ``runner`` is an agent (``AssistantAgent``) or a team (``RoundRobinGroupChat``, ...).
    AutoGen's workbench turns a tool exception into an ``is_error`` result and the
    model carries on; the failed step is UNKNOWN all the same, so when the run
    returns the helper fails it (``ToolFailed``) and every finished step is undone
    newest-first. Inside an open saga the run joins it.
    """
    async with run_boundary(wal, name=name):
        return await runner.run(**run)
