"""verify_concurrent_invariants: bounded model checking of a rollback with sibling calls in flight.

Every concurrent shape within the bound (``concurrent_shapes.py``) is run through
``saga_scope`` with its ordering forced by the scheduler (``concurrent_run.py``) and judged
(``concurrent_invariants.py``). The search stops at the first shape that breaks an invariant and
minimises it. The bound is stated with the result.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace

from agent_saga.errors import ConfigurationError
from agent_saga.proving._concurrent_invariants import CONCURRENT_INVARIANTS, check_concurrent
from agent_saga.proving._concurrent_run import ConcurrentRun, run_concurrent
from agent_saga.proving._concurrent_shapes import (
    ConcurrentShape,
    Face,
    Fate,
    Sibling,
    Slot,
    concurrent_shapes,
    possible,
)

__all__ = ["ConcurrentCounterexample", "ConcurrentReport", "verify_concurrent_invariants"]


@dataclass(frozen=True, slots=True)
class ConcurrentCounterexample:
    """The first concurrent shape that broke an invariant, minimised."""

    shape: ConcurrentShape
    found: ConcurrentShape  # as first met, before minimising
    violations: tuple[tuple[str, str], ...]
    log: tuple[str, ...]  # the run's records, "TYPE step", in order
    report_text: str

    def format_text(self) -> str:
        lines = [f"  VIOLATION of {self.violations[0][0]}", f"    shape (minimised): {self.shape.describe()}"]
        if self.found != self.shape:
            lines.append(f"    first met as: {self.found.describe()}")
        lines.extend(f"    - {name}: {what}" for name, what in self.violations)
        lines.append(f"    log: {' · '.join(self.log)}")
        lines.extend(f"    | {line}" for line in self.report_text.splitlines())
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class ConcurrentReport:
    """The result of :func:`verify_concurrent_invariants`."""

    siblings: int
    before: int
    faces: tuple[Face, ...]
    shapes: int  # shapes explored (all of them, unless a counterexample stopped the search)
    total: int  # shapes within the bound
    seconds: float
    counterexample: ConcurrentCounterexample | None = None
    invariants: tuple[str, ...] = CONCURRENT_INVARIANTS

    @property
    def ok(self) -> bool:
        return self.counterexample is None

    def format_text(self) -> str:
        faces = " and ".join(f.value for f in self.faces)
        lines = [
            "rollback invariants, siblings in flight: bounded model check on the real engine, orderings forced",
            f"  {self.shapes} of {self.total} concurrent shape(s) explored in {self.seconds:.1f}s: 1..{self.siblings} "
            f"sibling(s) x {len(Fate)} fates x {len(Slot)} landing moments x every landing order within one, "
            f"after 0..{self.before} step(s) before them, halt or not, {faces}",
            f"  {len(self.invariants)} invariants: {', '.join(self.invariants)}",
        ]
        lines.append("  result: no violation" if self.counterexample is None else self.counterexample.format_text())
        lines.append(f"  bound: every such shape of at most {self.siblings} sibling(s) after at most {self.before} "
                     "step(s), one saga at a time, each ordering forced once; not a claim for more siblings, for "
                     "other interleavings than these moments, nor for crashes (see docs/PROVING.md)")
        return "\n".join(lines)


async def verify_concurrent_invariants(
    siblings: int = 2, *, before: int = 1, faces: Iterable[Face | str] = (Face.THREADS, Face.TASKS)
) -> ConcurrentReport:
    """Run every concurrent shape within the bound through the engine, each ordering forced, and check it.

    ``siblings`` (1..3): calls in flight at once when the saga fails; ``before`` (0..2): steps run
    one after another before them; ``faces``: ``"threads"`` (siblings on threads, the blocking
    face) and/or ``"tasks"`` (asyncio tasks). Stops at the first shape that breaks an invariant
    and minimises it. The runs block, so they run on a worker thread.
    """
    chosen = _faces(faces)
    total = sum(1 for _ in concurrent_shapes(siblings, before, chosen))  # validates the bounds too
    return await asyncio.to_thread(_search, siblings, before, chosen, total)


def _faces(faces: Iterable[Face | str]) -> tuple[Face, ...]:
    if isinstance(faces, str):
        faces = (faces,)
    chosen: list[Face] = []
    for face in faces:
        try:
            chosen.append(Face(face))
        except ValueError:
            raise ConfigurationError(f"unknown face {face!r}: use 'threads', 'tasks' or both") from None
    if not chosen:
        raise ConfigurationError("faces= is empty: pass 'threads', 'tasks' or both")
    return tuple(dict.fromkeys(chosen))


def _search(siblings: int, before: int, faces: tuple[Face, ...], total: int) -> ConcurrentReport:
    began = time.perf_counter()
    explored = 0
    for shape in concurrent_shapes(siblings, before, faces):
        explored += 1
        run = run_concurrent(shape)
        violations = check_concurrent(run)
        if violations:
            example = _minimise(run, violations)
            return ConcurrentReport(siblings, before, faces, explored, total, time.perf_counter() - began, example)
    return ConcurrentReport(siblings, before, faces, explored, total, time.perf_counter() - began)


def _without(shape: ConcurrentShape, gone: int) -> ConcurrentShape:
    siblings = shape.siblings[:gone] + shape.siblings[gone + 1:]
    order = tuple(i - (i > gone) for i in shape.order if i != gone)
    return replace(shape, siblings=siblings, order=order)


def _simpler(shape: ConcurrentShape) -> list[ConcurrentShape]:
    """Shapes one edit simpler: fewer siblings, fewer steps before, plainer fates, threads, no halt."""
    out = [_without(shape, i) for i in range(len(shape.siblings))] if len(shape.siblings) > 1 else []
    if shape.before:
        out.append(replace(shape, before=shape.before - 1))
    for i, sibling in enumerate(shape.siblings):
        if sibling.fate is not Fate.COMMITS:
            siblings = (*shape.siblings[:i], Sibling(Fate.COMMITS, sibling.slot), *shape.siblings[i + 1:])
            out.append(replace(shape, siblings=siblings))
    if shape.face is not Face.THREADS:
        out.append(replace(shape, face=Face.THREADS))
    if shape.halt:
        out.append(replace(shape, halt=False))
    return [s for s in out if possible(s)]


def _minimise(run: ConcurrentRun, violations: list[tuple[str, str]]) -> ConcurrentCounterexample:
    """Simplify the shape while the same invariant still breaks (greedy, to a fixed point)."""
    first, target = run.shape, violations[0][0]
    progress = True
    while progress:
        progress = False
        for candidate in _simpler(run.shape):
            attempt = run_concurrent(candidate)
            found = check_concurrent(attempt)
            if any(name == target for name, _ in found):
                run, violations, progress = attempt, found, True
                break
    log = tuple(f"{r['type']} {r['step']}" if r.get("step") else str(r["type"]) for r in run.records)
    text = run.report.format_text() if run.report is not None else "(no rollback report)"
    return ConcurrentCounterexample(run.shape, first, tuple(violations), log, text)
