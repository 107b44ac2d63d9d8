"""``saga_run`` / ``saga_invoke``: one agent response or kernel call, one saga."""

from __future__ import annotations

from typing import Any

from semantic_kernel.kernel import Kernel

from agent_saga.log.base import WAL
from agent_saga.plugins.support import run_boundary
from agent_saga_semantic_kernel.filtering import install

__all__ = ["saga_invoke", "saga_run"]


async def saga_run(agent: Any, *, wal: WAL | None = None, name: str = "semantic-kernel", **run: Any) -> Any:
    """``await agent.get_response(**run)`` (e.g. ``messages="..."``) as one transaction.

    Installs ``saga_filter`` on the agent's kernel first. Semantic Kernel's auto
    function calling turns a function's exception into a result the model reads; the
    failed step is UNKNOWN all the same, so when the response comes back the run is
    failed (``ToolFailed``) and every finished step is undone newest-first. Inside an
    open saga the run joins it.
    """
    install(agent.kernel)
    async with run_boundary(wal, name=name):
        return await agent.get_response(**run)


async def saga_invoke(
    kernel: Kernel, function: Any = None, arguments: Any = None, *, wal: WAL | None = None,
    name: str = "semantic-kernel", **kwargs: Any,
) -> Any:
    """``await kernel.invoke(function, arguments, **kwargs)`` as one transaction."""
    install(kernel)
    async with run_boundary(wal, name=name):
        return await kernel.invoke(function, arguments, **kwargs)
