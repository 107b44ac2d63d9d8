"""A durable run (``@durable``) as the engine holds it, and the log's answers when it is resumed.

A durable run records its entry point and JSON inputs in its start record, and every step's
result in its commit record. Resumed after a crash, the entry point is called again under the
same saga id with a :class:`Replay` of what the log recorded: each call is matched against the
next recorded step, by position and by (tool, logged arguments). A committed step is served:
its recorded result is returned, nothing runs, and it joins the saga's stack with the undo
built from that result, so a later failure undoes it too. A recorded step that failed (refused,
or not applied) fails again the same way, from the log: the code takes the path it took then. Any
other call has diverged (``Saga`` records SAGA_DIVERGED and stops the saga).

The matching lives here; ``Saga._resumed`` (engine/saga.py) builds the served step, because it
is the same step ``_commit`` would build.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_saga.log.codec import canonical
from agent_saga.log.results import SHAPE_KEY
from agent_saga.redaction import REDACTED

__all__ = ["ON_CRASH", "DurableRun", "RecordedStep", "RecordedWait", "Replay", "WaitKey", "replayable"]

#: A durable wait's identity in its run: (kind, name, n), the n-th wait (from 1) of that kind and name.
WaitKey = tuple[str, str, int]

#: What a durable run may do when its process dies: continue forward, or be unwound.
ON_CRASH = ("resume", "unwind")


def replayable(value: Any) -> bool:
    """Whether a recorded result can be served as the value the call returned.

    Not when the log holds only its shape (too big, not JSON) or the redaction rules hid a
    part of it: serving that would hand the code something the tool never returned.
    """
    if isinstance(value, dict):
        return SHAPE_KEY not in value and all(replayable(v) for v in value.values())
    if isinstance(value, list):
        return all(replayable(v) for v in value)
    if isinstance(value, str):
        return REDACTED not in value
    return True


@dataclass(frozen=True, slots=True)
class RecordedStep:
    """One step the log recorded for a durable run, as a resume needs it.

    ``outcome`` is ``"committed"`` (served when ``result`` is replayable), ``"not-applied"`` or
    ``"refused"`` (nothing landed; ``error`` is what the log says went wrong, served again as
    ``NotApplied`` or ``StepRefused``), or ``"unseen"`` (in flight at the crash, and found after it
    not to have landed: the code never saw an outcome, so the call runs again live).
    ``compensation`` is the undo as
    the log describes it: what undoes a committed step no resumed call was matched with (the run
    diverged first), or whose result cannot be served.
    """

    index: int
    tool: str
    args: Mapping[str, Any]
    outcome: str
    semantics: str = "REVERSIBLE"
    result: Any = None
    replayable: bool = False
    compensation: Mapping[str, Any] | None = None
    error: str = ""

    def called(self) -> dict[str, Any]:
        """The call as SAGA_DIVERGED shows it."""
        return {"step": self.index, "tool": self.tool, "args": dict(self.args)}


@dataclass(frozen=True, slots=True)
class RecordedWait:
    """A durable wait (``agent_saga.durable_wait``) the log recorded for a run being resumed.

    ``until``: the wake-up time recorded when it began (None: no timeout). ``outcome``: how it ended
    (``"woke"``, ``"signalled"``, ``"timed_out"``), or None when the process died while it waited;
    ``data``: the event's data when it ended ``"signalled"``.
    """

    until: float | None
    outcome: str | None = None
    data: Any = None


class Replay:
    """The recorded steps of a run being resumed, consumed in order by the resumed calls.

    ``waits``: its recorded durable waits by key; a resumed wait with a key here is answered from it.
    """

    def __init__(self, steps: Iterable[RecordedStep], *, last_index: int, by: str,
                 waits: Mapping[WaitKey, RecordedWait] | None = None) -> None:
        self.waits: Mapping[WaitKey, RecordedWait] = dict(waits or {})
        self._steps = sorted(steps, key=lambda s: s.index)
        self._next = 0
        self._lock = threading.Lock()
        #: The highest step number the log holds for the saga: live steps are numbered after it.
        self.last_index = max([last_index, *(s.index for s in self._steps)])
        #: Who resumes it (a process, a daemon), as SAGA_RESUMED says.
        self.by = by
        self.served = 0  # steps answered from the log so far

    @property
    def recorded(self) -> int:
        return len(self._steps)

    def take(self) -> tuple[int, RecordedStep | None]:
        """The next recorded step (and its position, from 1), consumed; None once all are."""
        with self._lock:
            position = self._next + 1
            if self._next >= len(self._steps):
                return position, None
            step = self._steps[self._next]
            self._next += 1
            return position, step

    def remaining(self) -> list[RecordedStep]:
        """The recorded steps no resumed call has asked for yet."""
        with self._lock:
            return self._steps[self._next:]

    @staticmethod
    def matches(recorded: RecordedStep, tool: str, logged_args: Mapping[str, Any]) -> bool:
        """The same call: the same tool, and the same arguments as the log records them (canonical JSON)."""
        return recorded.tool == tool and canonical(dict(recorded.args)) == canonical(dict(logged_args))


@dataclass(slots=True)
class DurableRun:
    """A saga opened by a ``@durable`` entry point: what its start record says, and its replay if resumed."""

    entry: str
    args: list[Any]
    kwargs: dict[str, Any]
    on_crash: str
    replay: Replay | None = None
    #: What the entry point returned (recorded in SAGA_COMPLETED); ``returned`` says if it did.
    result: Any = None
    returned: bool = False
    #: How many durable waits of each (kind, name) the run began: the next one's ``n`` (engine/waits.py).
    _waits: dict[tuple[str, str], int] = field(default_factory=dict, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def next_wait(self, kind: str, name: str) -> tuple[WaitKey, RecordedWait | None]:
        """The key of the wait the run begins now, and what the log recorded for it when resumed."""
        with self._lock:
            n = self._waits[kind, name] = self._waits.get((kind, name), 0) + 1
        key = (kind, name, n)
        return key, (self.replay.waits.get(key) if self.replay is not None else None)

    def started(self) -> dict[str, Any]:
        """The ``durable`` field of the start record: enough to call the entry point again."""
        return {"entry": self.entry, "args": self.args, "kwargs": self.kwargs, "on_crash": self.on_crash}

    def done(self, value: Any) -> None:
        """The entry point returned ``value``."""
        self.result, self.returned = value, True
