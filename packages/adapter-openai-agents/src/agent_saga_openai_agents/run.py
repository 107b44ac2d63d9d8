"""``saga_run``: one ``Runner.run``, one saga."""

from __future__ import annotations

from typing import Any

from agents import Runner

from agent_saga.log.base import WAL
from agent_saga.plugins.support import run_boundary

__all__ = ["saga_run", "saga_run_sync"]


async def saga_run(
    agent: Any, input: Any, *, wal: WAL | None = None, name: str = "openai-agents", **runner: Any
) -> Any:
    """``await Runner.run(agent, input, **runner)`` as one transaction.

    The SDK turns a tool exception into a message for the model by default and the
    run goes on; the failed step is UNKNOWN all the same, so when the run returns the
    helper fails it (``ToolFailed``) and everything is undone newest-first.
    """
    async with run_boundary(wal, name=name):
        return await Runner.run(agent, input, **runner)


def saga_run_sync(
    agent: Any, input: Any, *, wal: WAL | None = None, name: str = "openai-agents", **runner: Any
) -> Any:
    """The blocking form (``Runner.run_sync``)."""
    with run_boundary(wal, name=name):
        return Runner.run_sync(agent, input, **runner)
