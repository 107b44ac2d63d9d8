"""What a rollback must do with its siblings in flight, and the judgement of one concurrent run.

The rules are the engine's contract for steps in flight (docs/CONCEPTS.md, "Several calls at
once"): the rollback fences the saga, waits for the steps in flight within its grace, undoes
newest first what landed by then, and records each step still in flight as left (unresolved,
in flight), settling it when it lands: a commit (or an UNKNOWN outcome with an undo known
before the call) is undone at once, an effect without an undo is escalated, a call that never
ran needs nothing; nothing is undone once the rollback halted at a failed undo. A call that had
not begun when the fence went up never begins. Each run is judged on what the world saw, the
RollbackReport, the log, the escalation queue, the lease, and what each caller got.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from agent_saga.errors import NotApplied, SagaClosed, StepRefused
from agent_saga.log.records import RecordType as R
from agent_saga.proving._concurrent_run import ConcurrentRun, Lost
from agent_saga.proving._concurrent_shapes import ConcurrentShape, Fate, Slot
from agent_saga.proving._invariants import BOUNDED, HONEST_CLEAN, LIFO, ONCE, ONE_OUTCOME, dishonest_clean
from agent_saga.proving._shapes import ATTEMPTS, flaky
from agent_saga.recovery.fold import fold
from agent_saga.semantics import Outcome, StepState

__all__ = ["CONCURRENT_INVARIANTS", "ConcurrentExpected", "check_concurrent", "expected_concurrent"]

EVERY_EFFECT = "every effect compensated or escalated"
FENCE = "no call begins after the fence"
TOLD = "each caller told what became of its call"
NOTHING_LEFT = "nothing left open once every step landed"
FORCED = "the ordering was forced"
CONCURRENT_INVARIANTS = (FORCED, FENCE, EVERY_EFFECT, HONEST_CLEAN, ONCE, LIFO, ONE_OUTCOME, BOUNDED, TOLD, NOTHING_LEFT)

# The records that settle a step (one per step that may have had an effect); an in-flight
# STEP_UNRESOLVED is not one (its outcome is still to come).
_SETTLING = frozenset({R.STEP_COMPENSATED, R.COMPENSATION_FAILED, R.STEP_ORPHANED, R.STEP_UNRESOLVED, R.STEP_KEPT})
_OUTCOME_RECORD = {
    Fate.COMMITS: R.STEP_COMMITTED, Fate.COMMITS_UNDO_REFUSES: R.STEP_COMMITTED, Fate.IRREVERSIBLE: R.STEP_COMMITTED,
    Fate.NOT_APPLIED: R.STEP_NOT_APPLIED, Fate.FENCED: R.STEP_NOT_APPLIED,
    Fate.UNKNOWN_UNDO_KNOWN: R.STEP_UNKNOWN, Fate.UNKNOWN_NO_UNDO: R.STEP_UNKNOWN,
}


@dataclass(frozen=True, slots=True)
class ConcurrentExpected:
    """What the rules say one concurrent shape must do."""

    outcomes: dict[int, Outcome]  # step -> its outcome in the report (a step left in flight: UNRESOLVED)
    left: frozenset[int]  # steps the rollback stops waiting for
    late: dict[int, Outcome | None]  # step left in flight -> how it is settled when it lands (None: nothing ran)
    attempts: dict[int, int]  # step -> undo attempts (by the rollback, or when it landed)
    halted_at: int | None
    effects: frozenset[int]  # steps whose call lands
    stranded: frozenset[int]  # steps left standing behind a halt (the halted step's escalation covers them)
    callers: dict[int, type[BaseException] | None]  # sibling position -> what its caller gets (None: a result)

    @property
    def clean(self) -> bool:
        return not self.left and self.halted_at is None and all(
            o in (Outcome.COMPENSATED, Outcome.KEPT) for o in self.outcomes.values()
        )

    @property
    def undone(self) -> frozenset[int]:
        settled = {**self.outcomes, **{s: o for s, o in self.late.items() if o is not None}}
        return frozenset(s for s, o in settled.items() if o is Outcome.COMPENSATED)


def _settle(step: int, works: bool | None, committed: bool, halted: bool) -> tuple[Outcome, int]:
    """How a landed step is settled, and how many undo attempts that takes."""
    if halted:
        return Outcome.UNRESOLVED, 0
    if works is None:  # no undo: a commit is orphaned, an unknown outcome unresolved
        return (Outcome.ORPHANED if committed else Outcome.UNRESOLVED), 0
    if works:
        return Outcome.COMPENSATED, 2 if flaky(step) else 1
    return Outcome.FAILED, ATTEMPTS


def expected_concurrent(shape: ConcurrentShape) -> ConcurrentExpected:
    """The contract applied to one shape (see the module docstring)."""
    undo: dict[int, bool | None] = dict.fromkeys(range(1, shape.before + 1), True)
    committed = set(undo)
    stack = set(undo)
    left: set[int] = set()
    for position, sibling in enumerate(shape.siblings):
        step = shape.step(position)
        undo[step] = sibling.fate.undo_works
        if sibling.fate in (Fate.COMMITS, Fate.COMMITS_UNDO_REFUSES, Fate.IRREVERSIBLE):
            committed.add(step)
        if sibling.slot.left:
            left.add(step)
        elif sibling.fate.effect:
            stack.add(step)
    outcomes: dict[int, Outcome] = dict.fromkeys(left, Outcome.UNRESOLVED)
    attempts: dict[int, int] = {}
    stranded: set[int] = set()
    halted_at: int | None = None
    for step in sorted(stack, reverse=True):
        outcomes[step], n = _settle(step, undo[step], step in committed, halted_at is not None)
        if halted_at is not None:
            stranded.add(step)
        if n:
            attempts[step] = n
        if outcomes[step] is Outcome.FAILED and shape.halt:
            halted_at = step
    late: dict[int, Outcome | None] = {}
    effects = set(range(1, shape.before + 1))
    callers: dict[int, type[BaseException] | None] = {}
    for position, sibling in enumerate(shape.siblings):
        step, fate = shape.step(position), sibling.fate
        if fate.effect:
            effects.add(step)
        callers[position] = _caller(fate, sibling.slot)
        if not sibling.slot.left:
            continue
        if not fate.effect:
            late[step] = None
            continue
        # Only a landing after the rollback's undos (ENDING, AFTER) can meet its halt, which
        # strands only the steps older than the halted one (newest first).
        halted = halted_at is not None and sibling.slot >= Slot.ENDING and step < halted_at
        late[step], n = _settle(step, undo[step], step in committed, halted)
        if halted:
            stranded.add(step)
        if n:
            attempts[step] = n
    return ConcurrentExpected(outcomes, frozenset(left), late, attempts, halted_at, frozenset(effects),
                              frozenset(stranded), callers)


def _caller(fate: Fate, slot: Slot) -> type[BaseException] | None:
    """What a sibling's caller gets: its result, its own error, or (landing late) SagaClosed."""
    if fate is Fate.FENCED:
        return StepRefused
    if fate is Fate.NOT_APPLIED:
        return NotApplied
    if fate in (Fate.UNKNOWN_UNDO_KNOWN, Fate.UNKNOWN_NO_UNDO):
        return Lost
    return SagaClosed if slot.left else None


def check_concurrent(run: ConcurrentRun) -> list[tuple[str, str]]:
    """Every (invariant, what went wrong) that ``run`` breaks, in the order of CONCURRENT_INVARIANTS."""
    found: list[tuple[str, str]] = []
    if run.unforced:
        found.append((FORCED, f"the ordering could not be forced: {run.unforced}"))
    if run.report is None:
        what = f"raised {type(run.error).__name__}: {run.error}" if run.error else "committed"
        found.append((ONE_OUTCOME, f"the saga failed but no rollback report came back (the scope {what})"))
        return found
    want = expected_concurrent(run.shape)
    _check_order(run, want, found)
    _check_world(run, want, found)
    _check_outcomes(run, want, found)
    _check_clean(run, want, found)
    _check_escalations(run, want, found)
    _check_callers(run, want, found)
    _check_closed(run, found)
    found.sort(key=lambda item: CONCURRENT_INVARIANTS.index(item[0]))
    return found


def _check_order(run: ConcurrentRun, want: ConcurrentExpected, found: list[tuple[str, str]]) -> None:
    """Newest first among the steps the rollback itself settles; the report lists every step newest first."""
    report = run.report
    assert report is not None
    started = [r["step"] for r in run.records if r["type"] == R.COMPENSATION_STARTED and r["step"] not in want.left]
    if started != sorted(started, reverse=True) or len(set(started)) != len(started):
        found.append((LIFO, f"the rollback began undos in the order {started}, not newest first, once each"))
    listed = [o.step for o in report.steps]
    if listed != sorted(set(listed), reverse=True):
        found.append((LIFO, f"the report lists steps {listed}, not newest first"))


def _check_world(run: ConcurrentRun, want: ConcurrentExpected, found: list[tuple[str, str]]) -> None:
    """Each effect happens at most once, each undo takes effect at most once, with bounded attempts."""
    ledger = run.world.ledger
    forwards = Counter(step for step, _ in ledger.forwards)
    if any(n > 1 for n in forwards.values()):
        found.append((ONCE, f"a forward call ran more than once: {dict(forwards)}"))
    shape = run.shape
    fenced = [shape.step(i) for i, s in enumerate(shape.siblings) if s.fate is Fate.FENCED and forwards[shape.step(i)]]
    if fenced:
        found.append((FENCE, f"the call of step(s) {fenced} ran although it had not begun when the fence went up"))
    twice = sorted(s for s, n in Counter(ledger.undone).items() if n > 1)
    if twice:
        found.append((ONCE, f"the undo of step(s) {twice} took effect more than once"))
    attempts = Counter(step for step, _ in ledger.undo_calls)
    strays = sorted(set(attempts) - set(forwards))
    if strays:
        found.append((ONCE, f"undo called for step(s) {strays}, whose effect never happened"))
    for step in sorted(set(attempts) | set(want.attempts)):
        if attempts[step] != want.attempts.get(step, 0):
            found.append((BOUNDED, f"step {step}'s undo was attempted {attempts[step]} time(s), expected "
                                   f"{want.attempts.get(step, 0)}"))
        keys = {key for s, key in ledger.undo_calls if s == step}
        if len(keys) > 1 or None in keys:
            found.append((BOUNDED, f"step {step}'s undo attempts used keys {sorted(map(str, keys))}: one key, always"))


def _check_outcomes(run: ConcurrentRun, want: ConcurrentExpected, found: list[tuple[str, str]]) -> None:
    """Exactly one outcome per step in the report, one settling record per effect in the log."""
    report = run.report
    assert report is not None
    said = {o.step: o for o in report.steps}
    if sorted(o.step for o in report.steps) != sorted(want.outcomes):
        found.append((ONE_OUTCOME, f"the report settles steps {sorted(said)}, expected each of "
                                   f"{sorted(want.outcomes)} exactly once"))
    for step, should in sorted(want.outcomes.items()):
        if step in said and said[step].outcome is not should:
            found.append((ONE_OUTCOME, f"step {step} reported {said[step].outcome.value}, expected {should.value}"))
    flying = sorted(o.step for o in report.in_flight)
    if flying != sorted(want.left) or any(said[s].state is not StepState.PENDING for s in flying):
        found.append((ONE_OUTCOME, f"the report lists steps {flying} as in flight, expected {sorted(want.left)}"))
    settling = Counter(r["step"] for r in run.records if r["type"] in _SETTLING and r["body"].get("in_flight") is not True)
    due = {s for s in want.outcomes if s not in want.left} | {s for s, o in want.late.items() if o is not None}
    for step in sorted(set(settling) | due):
        if settling[step] != (step in due):
            found.append((ONE_OUTCOME, f"the log settles step {step} {settling[step]} time(s), expected "
                                       f"{int(step in due)}"))
    marked = sorted(r["step"] for r in run.records if r["body"].get("in_flight") is True)
    if marked != sorted(want.left):
        found.append((ONE_OUTCOME, f"the log marks steps {marked} as left in flight, expected {sorted(want.left)}"))
    for position, sibling in enumerate(run.shape.siblings):
        step = run.shape.step(position)
        kinds = [r["type"] for r in run.records if r.get("step") == step and r["type"] in _OUTCOME_TYPES]
        if kinds != [_OUTCOME_RECORD[sibling.fate]]:
            found.append((ONE_OUTCOME, f"step {step}'s outcome records are {kinds}, expected "
                                       f"[{_OUTCOME_RECORD[sibling.fate]}]"))
    ends = [r for r in run.records if r["type"] == R.SAGA_ROLLED_BACK]
    if len(ends) != 1 or ends[0]["body"].get("clean") is not report.clean:
        found.append((HONEST_CLEAN, "the log holds no single SAGA_ROLLED_BACK stating the report's verdict"))


_OUTCOME_TYPES = frozenset(_OUTCOME_RECORD.values())


def _check_clean(run: ConcurrentRun, want: ConcurrentExpected, found: list[tuple[str, str]]) -> None:
    """``clean`` only when nothing the saga did stands, nor may still land; the world as the rules say."""
    report = run.report
    assert report is not None
    unclean = dishonest_clean(report.clean, run.standing_at_report, want.clean)
    if unclean is not None:
        found.append((HONEST_CLEAN, unclean))
    if report.halted is not (want.halted_at is not None):
        found.append((HONEST_CLEAN, f"report.halted is {report.halted}, expected {want.halted_at is not None}"))
    said = {o.step: o.outcome for o in report.steps}
    for step in sorted(run.standing_at_report):
        if said.get(step) in (Outcome.COMPENSATED, Outcome.KEPT):
            found.append((HONEST_CLEAN, f"step {step}'s effect stood when the report called it {said[step].value}"))
    standing = run.world.standing()
    if standing != want.effects - want.undone:
        found.append((EVERY_EFFECT, f"the world holds the effects of steps {sorted(standing)} once every step "
                                 f"landed, expected {sorted(want.effects - want.undone)}"))


def _check_escalations(run: ConcurrentRun, want: ConcurrentExpected, found: list[tuple[str, str]]) -> None:
    """Every effect left standing has a person told about it (its own escalation, or its halt's)."""
    pending: dict[int | None, set[str]] = {}
    for escalation in run.escalations:
        if not escalation.resolved:
            pending.setdefault(escalation.step, set()).add(escalation.kind)
    standing = run.world.standing()
    for step in sorted(standing):
        covered = step in pending or (step in want.stranded and want.halted_at in pending)
        if not covered:
            found.append((EVERY_EFFECT, f"step {step}'s effect stands and nobody was told (pending escalations: "
                                     f"{_kinds(pending)})"))
    for step in sorted(s for s in pending if s is not None and s not in standing):
        if step != want.halted_at:
            found.append((EVERY_EFFECT, f"step {step} is escalated ({sorted(pending[step])}) although its effect "
                                     "does not stand"))
    if any("in-flight" in kinds for kinds in pending.values()):
        found.append((NOTHING_LEFT, f"an in-flight escalation is still open once every step landed: {_kinds(pending)}"))


def _kinds(pending: dict[int | None, set[str]]) -> str:
    return ", ".join(f"step {s}: {sorted(k)}" for s, k in sorted(pending.items(), key=lambda x: x[0] or 0)) or "none"


def _check_callers(run: ConcurrentRun, want: ConcurrentExpected, found: list[tuple[str, str]]) -> None:
    for position, should in sorted(want.callers.items()):
        got = run.results.get(position)
        ok = isinstance(got, should) if should is not None else isinstance(got, dict)
        if not ok:
            what = type(got).__name__ if isinstance(got, BaseException) else f"the result {got!r}"
            invariant = FENCE if run.shape.siblings[position].fate is Fate.FENCED else TOLD
            found.append((invariant, f"step {run.shape.step(position)}'s caller got {what}, expected "
                                     f"{should.__name__ if should is not None else 'its result'}"))


def _check_closed(run: ConcurrentRun, found: list[tuple[str, str]]) -> None:
    """Once every step landed, recovery has nothing to do and the saga lets go of its lease."""
    views = list(fold(run.records).values())
    if len(views) == 1 and views[0].open:
        found.append((NOTHING_LEFT, "recovery reads the saga as open once every step landed"))
    if run.lease_held:
        found.append((NOTHING_LEFT, "the saga still holds its lease once every step landed"))
