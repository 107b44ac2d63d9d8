"""verify_rollback_invariants: bounded model checking of the rollback, on the real engine.

Every failure shape up to ``max_steps`` steps (see ``shapes.py``) is run through
``saga_scope`` and judged on three sources that must agree: the calls the tools
saw (the ledger), the engine's RollbackReport, and the log it wrote. The rules
are the ones docs/CONCEPTS.md states. The bound is stated with the result: every
shape up to N steps, one saga at a time, one step after another; nothing is
claimed for longer sagas. Calls in flight at once are ``verify_concurrent_invariants``'s.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from agent_saga.context import saga_scope
from agent_saga.errors import ConfigurationError
from agent_saga.proving._shapes import (
    ATTEMPTS,
    Failing,
    Run,
    Scope,
    Shape,
    Undo,
    count,
    flaky,
    run_shape,
    shapes,
)
from agent_saga.semantics import Outcome

__all__ = ["INVARIANTS", "Counterexample", "InvariantReport", "check", "verify_rollback_invariants"]

LIFO = "LIFO order"
ONCE = "no double compensation"
BOUNDED = "bounded retries"
ONE_OUTCOME = "exactly one outcome per step"
HONEST_CLEAN = "clean never claimed over an incomplete rollback"
HALT = "halt strands only earlier steps"
ORPHANS = "orphans reported"
INVARIANTS = (LIFO, ONCE, BOUNDED, ONE_OUTCOME, HONEST_CLEAN, HALT, ORPHANS)

MAX_STEPS = 10  # shapes grow about 2.2x per step: N = 10 is 63,488 of them

# The records that settle a step in a rollback: exactly one per step that may have had an effect.
_SETTLING = frozenset({"STEP_COMPENSATED", "COMPENSATION_FAILED", "STEP_ORPHANED", "STEP_UNRESOLVED", "STEP_KEPT"})


@dataclass(frozen=True, slots=True)
class Expected:
    """What the rules say a shape's rollback must do."""

    outcomes: dict[int, Outcome]  # step -> outcome, for every step that may have had an effect
    attempts: dict[int, int]  # step -> undo attempts
    halted_at: int | None

    @property
    def clean(self) -> bool:
        return self.halted_at is None and all(
            o in (Outcome.COMPENSATED, Outcome.KEPT) for o in self.outcomes.values()
        )

    def owner(self, step: int) -> str:
        """The invariant that judges this step's outcome."""
        if self.halted_at is not None and step < self.halted_at:
            return HALT
        if self.outcomes[step] in (Outcome.ORPHANED, Outcome.UNRESOLVED):
            return ORPHANS
        return ONE_OUTCOME


def expected(shape: Shape) -> Expected:
    """The rules of docs/CONCEPTS.md applied to one shape, newest step first."""
    ran = len(shape.committed) + (shape.failing not in (Failing.NONE, Failing.NOT_APPLIED))
    outcomes: dict[int, Outcome] = {}
    attempts: dict[int, int] = {}
    halted_at: int | None = None
    for step in range(ran, 0, -1):
        works = shape.undo_works(step)
        if halted_at is not None:
            outcomes[step] = Outcome.UNRESOLVED
        elif works is None:  # committed without undo: orphaned; unknown without one: unresolved
            outcomes[step] = Outcome.ORPHANED if step <= len(shape.committed) else Outcome.UNRESOLVED
        elif works:
            outcomes[step] = Outcome.COMPENSATED
            attempts[step] = 2 if flaky(step) else 1
        else:
            outcomes[step] = Outcome.FAILED
            attempts[step] = ATTEMPTS
            if shape.halt:
                halted_at = step
    return Expected(outcomes, attempts, halted_at)


def dishonest_clean(clean: bool, standing: Collection[int], want_clean: bool) -> str | None:
    """What is wrong with a report's ``clean`` (None: nothing), for the sequential and the concurrent
    checker alike: it must be false while an effect stands, and true when the rules leave nothing."""
    if clean and standing:
        return f"the report says clean while the effects of step(s) {sorted(standing)} still stand"
    if clean and not want_clean:
        return "the report says clean over an incomplete rollback (a step not undone, or left in flight)"
    if not clean and want_clean:
        return "the report says NOT clean although every effect was undone in time"
    return None


def check(run: Run) -> list[tuple[str, str]]:
    """Every (invariant, what went wrong) that ``run`` breaks, in the order of INVARIANTS."""
    if run.report is None:
        what = f"raised {type(run.error).__name__}: {run.error}" if run.error else "committed"
        return [(ONE_OUTCOME, f"the saga failed but no rollback report came back (the scope {what})")]
    report, ledger, want = run.report, run.ledger, expected(run.shape)
    found: list[tuple[str, str]] = []
    listed = [o.step for o in report.steps]
    outcome = {o.step: o for o in report.steps}
    order = [step for step, _ in ledger.undo_calls]
    attempts = Counter(order)

    # LIFO: undos start newest first, a step's attempts are not interleaved with another's,
    # and the report lists the steps newest first.
    starts = [s for i, s in enumerate(order) if i == 0 or order[i - 1] != s]
    if starts != sorted(set(order), reverse=True):
        found.append((LIFO, f"undos ran in the order {starts}, not newest first"))
    if listed != sorted(set(listed), reverse=True):
        found.append((LIFO, f"the report lists steps {listed}, not newest first"))

    # Each effect happens once, each undo takes effect at most once, and only for a step that ran.
    twice = sorted(s for s, n in Counter(ledger.undone).items() if n > 1)
    if twice:
        found.append((ONCE, f"the undo of step(s) {twice} took effect more than once"))
    forwards = Counter(step for step, _ in ledger.forwards)
    if any(n > 1 for n in forwards.values()):
        found.append((ONCE, f"a forward call ran more than once: {dict(forwards)}"))
    strays = sorted(set(attempts) - set(forwards))
    if strays:
        found.append((ONCE, f"undo called for step(s) {strays}, whose effect never happened"))

    # Bounded retries, one key: a refusing undo gets exactly the policy's attempts, all with
    # the key the report names; a flaky one exactly as many as it needs.
    for step in sorted(set(attempts) | set(want.attempts)):
        n, allowed = attempts[step], want.attempts.get(step, 0)
        if n != allowed:
            found.append((BOUNDED, f"step {step}'s undo was attempted {n} time(s), expected {allowed} "
                                   f"(the policy allows {ATTEMPTS})"))
        keys = {key for s, key in ledger.undo_calls if s == step}
        reported = outcome[step].idempotency_key if step in outcome else None
        if n and (None in keys or keys != {reported}):
            found.append((BOUNDED, f"step {step}'s undo attempts used keys {sorted(map(str, keys))}; "
                                   f"every attempt must use the reported key {reported!r}"))
        if step in outcome and outcome[step].attempts != n:
            found.append((BOUNDED, f"step {step}: the report says {outcome[step].attempts} attempt(s), "
                                   f"the undo saw {n}"))

    # Exactly one outcome for each step that may have had an effect (none for the others),
    # in the report and in the log.
    if sorted(listed) != sorted(want.outcomes):
        found.append((ONE_OUTCOME, f"the report settles steps {sorted(listed)}, expected each of "
                                   f"{sorted(want.outcomes)} exactly once"))
    logged = sorted(r.get("step") or 0 for r in run.records if r["type"] in _SETTLING)
    if logged != sorted(want.outcomes):
        found.append((ONE_OUTCOME, f"the log settles steps {logged}, expected each of "
                                   f"{sorted(want.outcomes)} exactly once"))
    wrong = {step: (outcome[step].outcome, should) for step, should in sorted(want.outcomes.items())
             if step in outcome and outcome[step].outcome is not should}
    for step, (was, should) in wrong.items():
        found.append((want.owner(step), f"step {step} reported {was.value}, expected {should.value}"))

    # Clean only when nothing the saga did still stands; the log states the report's verdict.
    unclean = dishonest_clean(report.clean, ledger.standing, want.clean)
    if unclean is not None:
        found.append((HONEST_CLEAN, unclean))
    ended = [r for r in run.records if r["type"] == "SAGA_ROLLED_BACK"]
    if len(ended) != 1 or ended[0]["body"].get("clean") is not report.clean:
        found.append((HONEST_CLEAN, "the log's SAGA_ROLLED_BACK record does not state the report's verdict"))

    # Halt: a refused undo stops the unwind; only older steps are left, untouched, and it says so.
    if report.halted is not (want.halted_at is not None):
        found.append((HALT, f"report.halted is {report.halted}, expected {want.halted_at is not None}"))
    if want.halted_at is not None:
        touched = sorted(s for s in attempts if s < want.halted_at)
        if touched:
            found.append((HALT, f"halted at step {want.halted_at} but ran the undo of older step(s) {touched}"))

    # Orphans: every effect still standing in the world is reported as such, never dropped
    # and never called compensated.
    for step in sorted(ledger.standing):
        said = outcome.get(step)
        if said is None or said.outcome in (Outcome.COMPENSATED, Outcome.KEPT):
            found.append((ORPHANS, f"step {step}'s effect still stands but the report says "
                                   f"{said.outcome.value if said else 'nothing about it'}"))
    found.sort(key=lambda item: INVARIANTS.index(item[0]))
    return found


@dataclass(frozen=True, slots=True)
class Counterexample:
    """The first shape that broke an invariant, minimised."""

    shape: Shape
    found: Shape  # as first met, before minimising
    violations: tuple[tuple[str, str], ...]
    undo_calls: tuple[tuple[int, str | None], ...]
    report_text: str

    def format_text(self) -> str:
        lines = [f"  VIOLATION of {self.violations[0][0]}"]
        lines.append(f"    shape (minimised): {self.shape.describe()}")
        if self.found != self.shape:
            lines.append(f"    first met as: {self.found.describe()}")
        lines.extend(f"    - {name}: {what}" for name, what in self.violations)
        calls = ", ".join(str(step) for step, _ in self.undo_calls) or "none"
        lines.append(f"    undo attempts, by step, in order: {calls}")
        lines.extend(f"    | {line}" for line in self.report_text.splitlines())
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class InvariantReport:
    """The result of :func:`verify_rollback_invariants`."""

    max_steps: int
    shapes: int  # shapes explored (all of them, unless a counterexample stopped the search)
    total: int  # shapes within the bound
    seconds: float
    counterexample: Counterexample | None = None
    invariants: tuple[str, ...] = INVARIANTS

    @property
    def ok(self) -> bool:
        return self.counterexample is None

    def format_text(self) -> str:
        lines = [
            f"rollback invariants: bounded model check up to {self.max_steps} step(s), on the real engine",
            f"  {self.shapes} of {self.total} failure shape(s) explored in {self.seconds:.1f}s: which step's "
            "call fails, and how x which undos refuse x whether a committed step has no undo x halt",
            f"  {len(self.invariants)} invariants: {', '.join(self.invariants)}",
        ]
        if self.counterexample is None:
            lines.append("  result: no violation")
        else:
            lines.append(self.counterexample.format_text())
        lines.append(f"  bound: every shape of at most {self.max_steps} step(s), one saga at a time, one step after "
                     "another; not a proof for longer sagas (calls in flight at once: verify_concurrent_invariants)")
        return "\n".join(lines)


async def verify_rollback_invariants(max_steps: int = 6, *, scope: Scope = saga_scope) -> InvariantReport:
    """Run every failure shape of at most ``max_steps`` steps through the engine and check it.

    Stops at the first shape that breaks an invariant and minimises it. ``scope``
    is what each shape's saga is opened with (``saga_scope``); tests pass a
    deliberately broken engine there to show that the check catches it.
    """
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or not 1 <= max_steps <= MAX_STEPS:
        raise ConfigurationError(f"max_steps must be an int from 1 to {MAX_STEPS}, got {max_steps!r}")
    began = time.perf_counter()
    explored = 0
    for shape in shapes(max_steps):
        explored += 1
        run = await run_shape(shape, scope)
        violations = check(run)
        if violations:
            example = await _minimise(run, violations, scope)
            return InvariantReport(max_steps, explored, count(max_steps), time.perf_counter() - began, example)
    return InvariantReport(max_steps, explored, count(max_steps), time.perf_counter() - began)


def _simpler(shape: Shape) -> list[Shape]:
    """Shapes one edit simpler than ``shape``: fewer steps first, then milder kinds."""
    committed = shape.committed
    out = [Shape(committed[:i] + committed[i + 1:], shape.failing, shape.halt) for i in range(len(committed))]
    if shape.failing is not Failing.NONE:
        out.append(Shape(committed, Failing.NONE, shape.halt))
    out.extend(Shape((*committed[:i], Undo.WORKS, *committed[i + 1:]), shape.failing, shape.halt)
               for i, kind in enumerate(committed) if kind is not Undo.WORKS)
    if shape.failing not in (Failing.NONE, Failing.UNKNOWN_UNDO_WORKS):
        out.append(Shape(committed, Failing.UNKNOWN_UNDO_WORKS, shape.halt))
    if shape.halt:
        out.append(Shape(committed, shape.failing, False))
    return out


async def _minimise(run: Run, violations: list[tuple[str, str]], scope: Scope) -> Counterexample:
    """Simplify the shape while the same invariant still breaks (greedy, to a fixed point)."""
    first = run.shape
    target = violations[0][0]
    progress = True
    while progress:
        progress = False
        for candidate in _simpler(run.shape):
            attempt = await run_shape(candidate, scope)
            found = check(attempt)
            if any(name == target for name, _ in found):
                run, violations, progress = attempt, found, True
                break
    text = run.report.format_text() if run.report is not None else "(no rollback report)"
    return Counterexample(run.shape, first, tuple(violations), tuple(run.ledger.undo_calls), text)
