"""The replay seam: while a recording is current, a step is answered from it and nothing runs.

``agent_saga.learning._replay`` makes a recording current for the length of a
counterfactual replay; :meth:`Saga._step` asks this variable first and, when it is
set, hands the whole step (gate, log, forward, undo) to the recording instead. One
``ContextVar.get`` is all a step pays when no replay runs.

A context variable, like the current saga: a framework that copies contexts onto
worker threads or tasks carries the replay with the saga, so a tool called there is
served too.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any, Protocol

from agent_saga.engine.step_options import StepOptions

__all__ = ["Recording", "replaying", "use_recording"]


class Recording(Protocol):
    """What answers a step during a replay: its recorded result, its recorded failure, or a refusal."""

    def serve(self, tool: str, args: Mapping[str, Any] | None, opts: StepOptions) -> Any: ...


_recording: contextvars.ContextVar[Recording | None] = contextvars.ContextVar("agent_saga_replay", default=None)


def replaying() -> Recording | None:
    """The recording that answers steps in this context, or None (steps run)."""
    return _recording.get()


def use_recording(recording: Recording | None) -> contextvars.Token[Recording | None]:
    """Make ``recording`` answer every step in this context (reset with the token)."""
    return _recording.set(recording)
