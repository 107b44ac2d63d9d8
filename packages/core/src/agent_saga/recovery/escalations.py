"""The human queue: what neither the daemon nor the agent's own rollback will decide.

One JSON-lines file (``<log>.recovery/escalations.jsonl``, see ``recovery.jsonl``)
of ``opened`` and ``resolved`` events under ``flock``. An escalation's id is a
pure function of (saga, step, kind), so whoever opens it again — the daemon on
its next sweep, the agent's rollback called twice, another process — finds it
already there: each problem is queued once, however often anyone looks.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from agent_saga.engine.report import RollbackReport, StepOutcome
from agent_saga.inert import inert
from agent_saga.log.base import WAL
from agent_saga.log.records import RecordType
from agent_saga.recovery.jsonl import append_entry, entries, open_locked
from agent_saga.recovery.paths import file_log_path, recovery_dir
from agent_saga.semantics import ActionSemantics, Outcome, StepState

__all__ = [
    "KINDS", "Escalation", "EscalationQueue", "escalate", "escalate_late", "escalate_rollback", "escalation_id",
    "queue_of",
]

#: Why a step can land in the queue.
KINDS = {
    "irreversible": "an IRREVERSIBLE step committed; nothing can undo it",
    "unknown-outcome": "the step's outcome is unknown and no inverse was recorded before the call",
    "not-recoverable": "the undo is a closure (or has unserializable arguments) that died with the process",
    "no-undo": "a committed step has no undo recorded",
    "handler-missing": "the undo names a handler this daemon has not imported",
    "compensation-failing": "the undo kept failing; the saga is dead-lettered",
    "undo-halted": "a kill-switch halt names the undo's tool: it was not attempted, and runs once the halt is lifted",
    "undo-refused": "the handler refused the recorded undo (it names something the reader does not trust); "
                    "the saga is dead-lettered",
    "compensation-unproven": "the undo's system answered that it was done, without a receipt this reader "
                             "trusts: not counted as done; the saga is dead-lettered",
    "unreadable": "the saga's records cannot be read (encrypted or redacted bodies)",
    "unverified-records": "records of the saga fail their own hash check (edited or forged) and were not acted on",
    "rollback-abandoned": "the in-process rollback could not finish; recovery takes the saga over after its lease",
    "rollback-not-clean": "the in-process rollback ended NOT clean for a reason no single step carries",
    "in-flight": "the step was still running when its saga's rollback ended; it is undone if it commits, "
                 "or escalated again if it cannot be",
    "repair-stale": "an operator's signed repair session is still open, but its claim is free (its process is "
                    "gone) or it is older than the daemon's limit; recovery keeps off the saga until it ends",
    "repair-unsigned": "an unsigned REPAIR_RESUMED says the saga was continued elsewhere: not believed, not undone "
                       "blindly; an operator's signed repair resumes or abandons it",
    "late-commit": "a call whose step was settled as UNKNOWN (it timed out, or was cancelled) returned "
                   "afterwards: its effect landed, possibly after its undo ran",
    "mesh-recovered-elsewhere": "another merged mesh log of the same devices recovers this saga; recover that one",
    "resume-unknown": "a durable run's step was in flight when its process died and nobody can tell whether "
                      "it landed; the run is not resumed on a guess",
    "resume-unavailable": "a durable run asks to be resumed, but its @durable entry point is not registered in "
                          "the recovering process; it is left open, never unwound behind its owner's back",
}


def escalation_id(saga: str, step: int | None, kind: str) -> str:
    material = f"{saga}\x1f{'' if step is None else step}\x1f{kind}".encode()
    return hashlib.sha256(material).hexdigest()[:16]


@dataclass(slots=True)
class Escalation:
    id: str
    saga: str
    step: int | None
    kind: str
    detail: str
    opened_at: float
    resolved: bool = False
    note: str = ""

    def line(self, *, stale: bool = False) -> str:
        """One line for a person; ``stale``: the saga is not in the log any more (see ``cli.stale``)."""
        where = f"step {self.step}" if self.step is not None else "saga"
        state = "resolved" if self.resolved else "STALE" if stale else "OPEN"
        return f"{inert(self.id)}  {state:8}  saga {inert(self.saga)} {where}  [{inert(self.kind)}] {inert(self.detail)}"


class EscalationQueue:
    """A file-backed queue of escalations, shared by every daemon (and agent) of one log.

    Reading a queue that holds a line that is not an entry raises JournalCorrupt:
    "0 open" must never stand for "could not read".
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _read(self, fd: int) -> dict[str, Escalation]:
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0) if size else b""
        found: dict[str, Escalation] = {}
        for entry in entries(self.path, data):
            eid = entry.get("id")
            if entry.get("event") == "opened" and isinstance(eid, str) and eid not in found:
                step = entry.get("step")
                found[eid] = Escalation(
                    eid, str(entry.get("saga", "")),
                    step if isinstance(step, int) else None, str(entry.get("kind", "")),
                    str(entry.get("detail", "")), float(entry.get("ts", 0)),
                )
            elif entry.get("event") == "resolved" and isinstance(eid, str) and eid in found:
                found[eid].resolved = True
                found[eid].note = str(entry.get("note", ""))
        return found

    def add(self, saga: str, step: int | None, kind: str, detail: str) -> tuple[Escalation, bool]:
        """Queue an escalation unless it is already queued: (the escalation, newly added)."""
        if kind not in KINDS:
            raise ValueError(f"unknown escalation kind {kind!r}; expected one of {sorted(KINDS)}")
        eid = escalation_id(saga, step, kind)
        fd = open_locked(self.path, fcntl.LOCK_EX)
        try:
            existing = self._read(fd).get(eid)
            if existing is not None:
                return existing, False
            now = time.time()
            append_entry(fd, {
                "event": "opened", "id": eid, "saga": saga, "step": step, "kind": kind,
                "detail": detail, "ts": now,
            })
            return Escalation(eid, saga, step, kind, detail, now), True
        finally:
            os.close(fd)

    def resolve(self, eid: str, note: str = "") -> Escalation:
        """Mark an escalation handled by a human; KeyError naming the known ids otherwise."""
        fd = open_locked(self.path, fcntl.LOCK_EX)
        try:
            known = self._read(fd)
            found = known.get(eid)
            if found is None:
                ids = ", ".join(sorted(known)) or "none"
                raise KeyError(f"no escalation {eid!r} in {self.path} (known: {ids})")
            if not found.resolved:
                append_entry(fd, {"event": "resolved", "id": eid, "note": note, "ts": time.time()})
                found.resolved, found.note = True, note
            return found
        finally:
            os.close(fd)

    def all(self) -> list[Escalation]:
        try:
            fd = open_locked(self.path, fcntl.LOCK_SH, create=False)
        except FileNotFoundError:
            return []
        try:
            return sorted(self._read(fd).values(), key=lambda e: e.opened_at)
        finally:
            os.close(fd)

    def pending(self) -> list[Escalation]:
        return [e for e in self.all() if not e.resolved]


def queue_of(wal_path: str | os.PathLike[str]) -> EscalationQueue:
    """The escalation queue of the log at ``wal_path``."""
    return EscalationQueue(recovery_dir(wal_path) / "escalations.jsonl")


def _kind(outcome: StepOutcome) -> str | None:
    """The kind the daemon would give this step (so it finds it already queued); None: nothing to file.

    A step the rollback did not reach (halted behind a failed undo, or interrupted)
    is not filed: the daemon holds or finishes it, exactly as it would have.
    """
    if outcome.outcome is Outcome.FAILED:
        return "compensation-failing"
    if outcome.outcome is Outcome.ORPHANED:
        return "irreversible" if outcome.semantics is ActionSemantics.IRREVERSIBLE else "no-undo"
    if outcome.outcome is Outcome.UNRESOLVED and outcome.state is StepState.UNKNOWN and outcome.compensation is None:
        return "unknown-outcome"
    if outcome.outcome is Outcome.UNRESOLVED and outcome.state is StepState.PENDING:
        return "in-flight"
    return None


def escalate_rollback(
    wal: WAL, saga_id: str, report: RollbackReport | None, *, abandoned: bool = False
) -> list[Escalation]:
    """File what an in-process rollback left for a human, once; return what was newly filed.

    Every step the rollback left standing is queued under the kind the recovery
    daemon would give it, and an ESCALATED record is appended to ``wal`` for each
    one newly queued. Ids are a function of (saga, step, kind) and the queue is
    locked, so calling this again, from any process, files nothing twice, and a
    daemon that later takes the saga over finds the same steps already queued and
    logged. ``abandoned`` (the rollback could not finish) adds one saga-level
    escalation, which the daemon closes once it has finished the saga. A report
    that is not clean for a reason no step carries (say, tools that ran unprotected)
    is filed once for the saga.

    Only a file log has a queue; for any other log nothing is filed.
    """
    path = file_log_path(wal)
    if path is None:
        return []
    wanted: list[tuple[int | None, str, str]] = []
    for outcome in report.steps if report is not None else ():
        kind = _kind(outcome)
        if kind is not None:
            detail = f"{outcome.tool!r} [{outcome.semantics.value}] {outcome.outcome.value} in-process"
            wanted.append((outcome.step, kind, f"{detail}: {outcome.detail}" if outcome.detail else detail))
    if abandoned:
        why = getattr(report, "interrupted", None) or (report.cause if report is not None else "no report")
        wanted.append((None, "rollback-abandoned", (
            f"the in-process rollback could not finish ({why}); the recovery daemon takes the saga "
            "over once its lease runs out"
        )))
    elif report is not None and not report.clean and not wanted:
        wanted.append((None, "rollback-not-clean", report.format_text().replace("\n", "; ")))
    filed: list[Escalation] = []
    for step, kind, detail in wanted:
        filed.extend(escalate(wal, saga_id, step, kind, detail))
    return filed


def escalate_late(wal: WAL, saga_id: str, step: int, outcome: StepOutcome | None) -> list[Escalation]:
    """A step the rollback left in flight landed and was settled: answer its ``in-flight`` escalation.

    Its ``in-flight`` escalation is resolved (ESCALATION_RESOLVED in ``wal``), and whatever the
    settlement left for a human (an undo that failed, a commit with no undo) is filed under the
    kind the daemon would give it. Returns what was newly filed. Only a file log has a queue.
    """
    path = file_log_path(wal)
    if path is None:
        return []
    queue = queue_of(path)
    kind = _kind(outcome) if outcome is not None else None
    how = "it never ran" if outcome is None else f"{outcome.outcome.value} when it landed"
    eid = escalation_id(saga_id, step, "in-flight")
    try:
        queue.resolve(eid, f"landed after the rollback: {how}")
    except KeyError:
        pass  # never filed (the queue was unwritable then): the log still says what happened
    else:
        wal.append(RecordType.ESCALATION_RESOLVED, saga_id, {
            "escalation": eid, "kind": "in-flight", "by": "in-process rollback",
        }, step)
    if kind is None or outcome is None:
        return []
    detail = f"{outcome.tool!r} [{outcome.semantics.value}] {outcome.outcome.value} when it landed after the rollback"
    return escalate(wal, saga_id, step, kind, f"{detail}: {outcome.detail}" if outcome.detail else detail)


def escalate(wal: WAL, saga_id: str, step: int | None, kind: str, detail: str) -> list[Escalation]:
    """File one escalation for the in-process engine, once, with its ESCALATED record; [] if it was there.

    Only a file log has a queue; for any other log nothing is filed.
    """
    path = file_log_path(wal)
    if path is None:
        return []
    escalation, created = queue_of(path).add(saga_id, step, kind, detail)
    if not created:
        return []
    wal.append(RecordType.ESCALATED, saga_id, {
        "kind": kind, "detail": detail, "escalation": escalation.id, "by": "in-process rollback",
    }, step)
    return [escalation]
