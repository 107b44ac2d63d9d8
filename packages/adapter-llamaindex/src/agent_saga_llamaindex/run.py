"""``saga_run``: one LlamaIndex agent run, one saga."""

from __future__ import annotations

from typing import Any

from agent_saga.log.base import WAL
from agent_saga.plugins.support import run_boundary

__all__ = ["saga_run"]


async def saga_run(agent: Any, *, wal: WAL | None = None, name: str = "llamaindex", **run: Any) -> Any:
    """``await agent.run(**run)`` (e.g. ``user_msg=...``) as one transaction.

    LlamaIndex's agents turn a tool exception into an ``is_error`` result and let the
    model carry on; the failed step is UNKNOWN all the same, so when the run returns
    the helper fails it (``ToolFailed``) and everything is undone newest-first.
    """
    async with run_boundary(wal, name=name):
        return await agent.run(**run)
