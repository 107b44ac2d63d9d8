"""Catch a resumed run that asks for different steps than the log recorded.

Resuming or repairing a saga replays its recorded steps by position. If the
code now asks for another tool at a recorded position, replaying would attach
the recorded outcome (and its undo) to the wrong effect, so it stops instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_saga.errors import NonDeterminismError
from agent_saga.recovery.fold import SagaView

__all__ = ["check_replay", "check_step"]


def check_step(view: SagaView, index: int, tool: str) -> None:
    """Raise NonDeterminismError if step ``index`` was recorded under another tool name.

    A position the log has not reached yet is new work and passes.
    """
    recorded = view.steps.get(index)
    if recorded is None or recorded.tool is None or recorded.tool == tool:
        return
    raise NonDeterminismError(
        f"saga {view.saga_id} step {index} was recorded as {recorded.tool!r} "
        f"({recorded.state}) but the resumed run now asks for {tool!r}. The code no longer "
        "takes the path the log recorded; resuming would pair the recorded effect with the "
        "wrong tool. Roll the saga back (agent-saga recover) or start a new one"
    )


def check_replay(view: SagaView, tools: Sequence[str]) -> None:
    """Check a resumed run's tool names, in order from step 1, against the log."""
    for index, tool in enumerate(tools, start=1):
        check_step(view, index, tool)
