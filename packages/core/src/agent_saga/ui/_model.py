"""The one reconstruction every picture is drawn from.

``graph``, ``animate``, ``viz`` and the web debugger all draw this model, and it is
built on ``recovery.fold`` (what the recovery daemon acts on), so no two pictures of
one log can disagree with each other or with what recovery would do.

Each step that a rollback dealt with has exactly one outcome: compensated, failed
(the undo kept failing: a human must act), orphaned (no undo exists), unresolved (the
unwind reached no verdict on it) or kept (nothing to undo). A rollback is *clean*
only when every one of them was compensated or kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agent_saga.inert import clip
from agent_saga.log.records import Record
from agent_saga.log.records import RecordType as R
from agent_saga.recovery.fold import SagaView, StepView, fold, repair_operator
from agent_saga.ui._verdicts import GraphVerdict, verdict_line

__all__ = [
    "LABELS",
    "PENDING_STATES",
    "FinalOutcome",
    "GraphSaga",
    "GraphStep",
    "Outcome",
    "build",
    "graph_step",
    "reconstruct",
    "saga_status",
    "short",
    "verdict_kind_of",
    "verdict_of",
]

Outcome = Literal["compensated", "failed", "orphaned", "unresolved", "kept"]
Status = Literal["completed", "rolled back", "open"]
#: Where a step ended up, whether or not its saga unwound (the ``outcomes`` picture's columns).
FinalOutcome = Literal[
    "committed", "compensated", "kept", "failed", "orphaned", "unresolved", "refused", "not applied",
    "in flight",
]

LABELS: Mapping[str, str] = {
    "compensated": "compensated",
    "failed": "COMPENSATION FAILED - needs a human",
    "orphaned": "ORPHANED - no undo exists",
    "unresolved": "UNRESOLVED - not undone",
    "kept": "kept - nothing to undo",
}


def short(text: str, limit: int = 72) -> str:
    """``text`` cut to ``limit`` characters, marked with '...' when cut."""
    return clip(text, limit)


@dataclass(frozen=True, slots=True)
class GraphStep:
    index: int
    tool: str
    semantics: str
    state: str  # committed | unknown | in-flight | not-applied | refused
    outcome: Outcome | None  # None: the saga did not unwind this step (or did not unwind)
    undo: str = ""  # the compensation the log names for this step ("" if none)
    refusal: str = ""  # "<rule>: <reason>" when the gate refused it (agent-written: render inert)
    note: str = ""  # a runtime verdict on the call (repair requested, thrash stopped), one line
    served: bool = False  # a resumed run took it from the log (STEP_SERVED) instead of running it

    @property
    def state_line(self) -> str:
        """Its semantics and state, and "served from the log" when a resumed run took it from there."""
        return f"{self.semantics} - {self.state}" + (" - served from the log" if self.served else "")

    def final(self, status: Status) -> FinalOutcome:
        """Where this step ended up in a saga that ended with ``status``."""
        if self.outcome is not None:
            return self.outcome
        if self.state == "refused":
            return "refused"
        if self.state == "not-applied":
            return "not applied"
        return "committed" if status == "completed" else "in flight"


@dataclass(frozen=True, slots=True)
class GraphSaga:
    saga_id: str
    name: str
    status: Status
    cause: str
    steps: tuple[GraphStep, ...]
    started_us: int = 0  # timestamps of the saga's first and last records, microseconds
    ended_us: int = 0
    rollback_us: int | None = None  # when its rollback started, if it did
    recovered: bool = False  # a recovery daemon took it over
    verdicts: tuple[GraphVerdict, ...] = ()  # the runtime's verdict records about it (_verdicts)
    continued_as: str = ""  # the saga a resumed repair moved its kept steps to (recovery.repair)

    @property
    def unwound(self) -> tuple[GraphStep, ...]:
        """The steps the rollback dealt with, newest first."""
        return tuple(s for s in sorted(self.steps, key=lambda s: -s.index) if s.outcome is not None)

    @property
    def clean(self) -> bool:
        return self.status == "rolled back" and all(s.outcome in ("compensated", "kept") for s in self.unwound)

    def tally(self) -> dict[str, int]:
        """How many unwound steps ended in each outcome (outcomes that occurred only)."""
        counts: dict[str, int] = {}
        for s in self.unwound:
            counts[str(s.outcome)] = counts.get(str(s.outcome), 0) + 1
        return counts

    @property
    def verdict(self) -> str:
        if self.status == "open" and self.continued_as:
            return f"REPAIRED - continued as saga {self.continued_as[:8]}"
        pending = sum(1 for s in self.steps if s.state in PENDING_STATES) if self.status == "open" else 0
        return verdict_of(self.status, pending, self.tally())

    @property
    def verdict_kind(self) -> Literal["completed", "clean", "dirty", "open"]:
        """The verdict as a style: a partial rollback is never styled as clean."""
        return verdict_kind_of(self.status, self.tally())


#: The states of a step whose effect may be standing while its saga is open.
PENDING_STATES = frozenset({"committed", "unknown", "in-flight"})


def verdict_of(status: Status, pending: int, tally: Mapping[str, int]) -> str:
    """A saga's verdict in words, from its status, how many effects may stand, and its outcome counts.

    Taken apart from ``GraphSaga`` so that a replay, which keeps these counts as it goes,
    says exactly what the model says without rebuilding every step after every record.
    """
    if status == "completed":
        return "completed"
    if status == "open":
        return f"OPEN - no end record ({pending} effect(s) may be standing)"
    bad = {what: n for what, n in tally.items() if n and what not in ("compensated", "kept")}
    if not bad:
        return "rollback clean"
    detail = ", ".join(f"{n} {what}" for what, n in sorted(bad.items()))
    return f"rollback NOT CLEAN: {detail}"


def verdict_kind_of(status: Status, tally: Mapping[str, int]) -> Literal["completed", "clean", "dirty", "open"]:
    """The verdict as a style (see ``verdict_of``): clean only when every unwound step was undone or kept."""
    if status == "completed":
        return "completed"
    if status == "open":
        return "open"
    return "clean" if all(what in ("compensated", "kept") for what, n in tally.items() if n) else "dirty"


def _outcome(step: StepView, unwinding: bool) -> Outcome | None:
    if not step.applied or not unwinding:
        return None
    if step.settled in ("compensated", "orphaned", "unresolved", "kept"):
        return step.settled  # type: ignore[return-value]
    if step.compensation_failed:
        return "failed"
    return "unresolved"  # the unwind reached no verdict on it (yet)


def _undo(step: StepView) -> str:
    comp = step.compensation
    if not comp:
        return ""
    return str(comp.get("description") or comp.get("handler") or "")


def graph_step(step: StepView, unwinding: bool) -> GraphStep:
    """The drawable model of one step of a saga that is (or is not) unwinding."""
    return GraphStep(step.index, step.tool or "?", step.semantics or "?", step.state, _outcome(step, unwinding),
                     _undo(step), step.refusal, short(step.note) if step.note else "", step.served)


def saga_status(view: SagaView) -> tuple[Status, bool]:
    """A saga's status, and whether its rollback has begun (which gives its applied steps an outcome)."""
    status: Status = (
        "completed" if view.ended == "SAGA_COMPLETED"
        else "rolled back" if view.ended == "SAGA_ROLLED_BACK" else "open"
    )
    return status, view.rollback_started or view.ended == "SAGA_ROLLED_BACK"


def build(
    views: Iterable[SagaView],
    causes: Mapping[str, str] | None = None,
    rollbacks: Mapping[str, int] | None = None,
    verdicts: Mapping[str, tuple[GraphVerdict, ...]] | None = None,
) -> list[GraphSaga]:
    """The drawable model of each saga, in log order."""
    sagas = []
    for view in views:
        if not view.started:
            continue
        status, unwinding = saga_status(view)
        steps = tuple(graph_step(view.steps[i], unwinding) for i in sorted(view.steps))
        sagas.append(GraphSaga(
            view.saga_id, view.name, status, (causes or {}).get(view.saga_id, ""), steps,
            view.first_ts, view.last_ts, (rollbacks or {}).get(view.saga_id), bool(view.recovered_by),
            (verdicts or {}).get(view.saga_id, ()), view.continued_as,
        ))
    return sagas


def reconstruct(records: Iterable[Record]) -> list[GraphSaga]:
    """Fold ``records`` (oldest first) and build the model, with each rollback's cause and time."""
    records = list(records)
    causes: dict[str, str] = {}
    rollbacks: dict[str, int] = {}
    verdicts: dict[str, tuple[GraphVerdict, ...]] = {}
    last_step: dict[str, int] = {}  # the latest step each saga's records named so far
    for r in records:
        saga = r.get("saga")
        if isinstance(saga, str):
            if isinstance(r.get("step"), int):
                last_step[saga] = max(last_step.get(saga, 0), r["step"])
            verdict = verdict_line(r, last_step.get(saga, 0))
            if verdict is not None:
                verdicts[saga] = (*verdicts.get(saga, ()), verdict)
            body_of = r.get("body")
            if r.get("type") == R.REPAIR_RESUMED and isinstance(body_of, dict) and isinstance(
                body_of.get("continued_as"), str
            ):
                # The continuing saga says whose steps it holds, before its own.
                new, seq = body_of["continued_as"], r.get("seq")
                verdicts[new] = (*verdicts.get(new, ()), GraphVerdict(
                    seq if isinstance(seq, int) else 0, str(r["type"]),
                    f"continues saga {saga} (repair by {repair_operator(r)}): holds its kept step(s)",
                    "ok", 0,
                ))
        if r.get("type") != R.ROLLBACK_STARTED or not isinstance(r.get("saga"), str):
            continue
        body: Any = r.get("body")
        if isinstance(body, dict) and "cause" in body:
            causes[r["saga"]] = str(body["cause"])
        if isinstance(r.get("ts"), int):
            rollbacks.setdefault(r["saga"], r["ts"])
    return build(fold(records).values(), causes, rollbacks, verdicts)
