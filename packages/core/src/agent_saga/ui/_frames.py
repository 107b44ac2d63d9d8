"""A run as it stood after each of its records, computed in one pass.

The model of a saga after its first n records is the recovery fold of those records
(``ui._model``); folding every prefix again costs the square of the run's length
(a 1,000-step run took seconds per replay). Here one fold is fed a record at a time,
and after each record only the steps whose drawing may have changed are built again:
the record's own step, or every step when the saga's status or unwinding changed
(a rollback beginning gives each applied step an outcome; an end record turns "in
flight" into "committed"). Each frame carries the steps that changed, and the verdict
comes from counts kept as steps change, so a frame costs what changed, not the run.

The last frame's steps (all changes applied) are exactly ``reconstruct`` of the whole
run; the tests compare the two after every record.

``budget`` bounds the work: a log can flip a saga's status record after record, each
flip redrawing every step, so once ``budget`` step redraws are spent the replay stops
with ``Replay.truncated`` saying where.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

from agent_saga.log.records import Record
from agent_saga.recovery.fold import Folder
from agent_saga.ui._model import (
    PENDING_STATES,
    FinalOutcome,
    GraphStep,
    Status,
    graph_step,
    saga_status,
    verdict_kind_of,
    verdict_of,
)

__all__ = ["DEFAULT_BUDGET", "Frame", "Replay"]

#: Step redraws one replay may spend: a million is far beyond an honest run's (each step is
#: redrawn about once per record of its own plus twice when the saga unwinds and ends).
DEFAULT_BUDGET = 1_000_000


class Frame(NamedTuple):
    """The saga after ``record``: its status and verdict, and each step whose drawing changed."""

    record: Record
    status: Status
    verdict: str
    verdict_kind: str
    tally: dict[str, int]
    changed: tuple[tuple[GraphStep, FinalOutcome], ...]  # (step, where it ended up), in step order


class Replay:
    """The frames of one saga's records (oldest first), one per record from its start record on.

    Records before the saga's start record yield no frame (there is nothing to draw
    yet); the steps they named appear in the first frame.
    """

    def __init__(self, saga_id: str, records: Sequence[Record], budget: int = DEFAULT_BUDGET) -> None:
        self.saga_id = saga_id
        self.records = records
        self.budget = budget
        self.spent = 0  # step redraws so far (what the budget counts)
        self.truncated: str | None = None  # why the frames stop before the last record, if they do
        starts = (n for n, r in enumerate(records) if r.get("type") == "SAGA_STARTED" and r.get("saga") == saga_id)
        first = next(starts, None)
        #: How many frames the run has: one per record from the start record on.
        self.total = 0 if first is None else len(records) - first

    def __iter__(self) -> Iterator[Frame]:
        folder = Folder()
        sagas = folder.sagas
        saga_id = self.saga_id
        shown: dict[int, tuple[GraphStep, FinalOutcome]] = {}
        tally: dict[str, int] = {}
        pending = 0
        dirty: set[int] = set()
        was: tuple[Status, bool] | None = None
        counts: dict[str, int] = {}
        verdict, kind = "", ""
        for n, record in enumerate(self.records):
            folder.feed(record)
            step = record.get("step")
            if isinstance(step, int):
                dirty.add(step)
            view = sagas.get(saga_id)
            if view is None or not view.started:
                continue
            now = saga_status(view)
            moved = now != was
            if moved:  # every step's outcome or final state may have moved
                dirty = set(view.steps)
                was = now
            status, unwinding = now
            if self.spent + len(dirty) > self.budget:
                self.truncated = (
                    f"the replay stops at record {n + 1} of {len(self.records)}: this run would redraw its "
                    f"steps more than {self.budget:,} times (its end is shown by the run's own view)"
                )
                return
            self.spent += len(dirty)
            changed = []
            steps = view.steps
            for index in sorted(dirty) if len(dirty) > 1 else dirty:
                if index not in steps:  # an approval record's step, which has not started
                    continue
                new = graph_step(steps[index], unwinding)
                entry = (new, new.final(status))
                old = shown.get(index)
                if old == entry:
                    continue
                if old is not None:
                    pending -= old[0].state in PENDING_STATES
                    if old[0].outcome:
                        tally[old[0].outcome] -= 1
                pending += new.state in PENDING_STATES
                if new.outcome:
                    tally[new.outcome] = tally.get(new.outcome, 0) + 1
                shown[index] = entry
                changed.append(entry)
            dirty = set()
            if changed or moved:  # else the verdict stands as it was
                counts = {what: k for what, k in tally.items() if k}
                verdict, kind = verdict_of(status, pending, counts), verdict_kind_of(status, counts)
            yield Frame(record, status, verdict, kind, counts, tuple(changed))
