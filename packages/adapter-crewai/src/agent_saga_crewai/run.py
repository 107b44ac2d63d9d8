"""``saga_kickoff``: one crew run, one saga."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from crewai.tools.tool_failure import ToolExecutionFailedError

from agent_saga.context import SyncSaga
from agent_saga.engine.saga import Saga
from agent_saga.log.base import WAL
from agent_saga.plugins.support import run_boundary

__all__ = ["saga_kickoff", "saga_kickoff_async"]


@contextmanager
def _chained(saga: Saga | SyncSaga) -> Iterator[None]:
    """Chain CrewAI's ``ToolExecutionFailedError`` to the tool's own exception.

    Under ``tool_failure_policy="raise"`` CrewAI raises a summary of the failure that
    does not carry the exception the tool raised; the step saw it, so the rollback's
    cause can name it.
    """
    seen = len(saga.failures)
    try:
        yield
    except ToolExecutionFailedError as err:
        failed = saga.failures[seen:]
        if failed and err.__cause__ is None:
            err.__cause__ = failed[-1][1]
        raise


def _inputs(inputs: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return dict(inputs) if inputs is not None else None


def saga_kickoff(
    crew: Any, inputs: Mapping[str, Any] | None = None, *, wal: WAL | None = None, name: str = "crewai",
    **scope: Any,
) -> Any:
    """``crew.kickoff(inputs)`` as one transaction.

    CrewAI runs tools on worker threads that copy the caller's context, so the
    saga opened here is the one every tool call joins. By default CrewAI hands a
    tool's exception to the model as text and the crew carries on; the failed step
    is UNKNOWN all the same, so when the crew returns the run is failed
    (``ToolFailed``) and every finished step is undone newest-first. With
    ``tool_failure_policy="raise"`` the crew's own exception does the same. Inside
    an open saga the run joins it.
    """
    with run_boundary(wal, name=name, **scope) as saga, _chained(saga):
        return crew.kickoff(inputs=_inputs(inputs))


async def saga_kickoff_async(
    crew: Any, inputs: Mapping[str, Any] | None = None, *, wal: WAL | None = None, name: str = "crewai",
    **scope: Any,
) -> Any:
    """The awaiting form of :func:`saga_kickoff` (``await crew.akickoff(inputs)``)."""
    async with run_boundary(wal, name=name, **scope) as saga:
        with _chained(saga):
            return await crew.akickoff(inputs=_inputs(inputs))
