"""Concurrent failure shapes: sibling calls in flight when their saga fails, and when each lands.

A shape is a saga that first runs a few steps one after another (each committed, with an undo
that works; refusing and missing undos are the siblings' fates), then starts several calls at
once (siblings), then fails. Each
sibling has a *fate* (how its call ends) and a *slot* (when it lands, measured against the
rollback: before the saga fails, while the rollback waits for it, just as the grace runs out,
during the rollback's first undo, after the end record is written, after the rollback returned).
Siblings in the same slot land in a chosen order. Every combination within a bound is enumerated;
a few are not orderings the engine can meet, and are left out by rule (see :func:`possible`).

Two faces: ``threads`` (each sibling a thread calling the blocking face, the rollback on the
saga's own thread) and ``tasks`` (each sibling an asyncio task, the tools on the engine's tool
threads). On one event loop nothing runs between a record and the next await of the same task,
so a task face shape has no EDGE slot, and its rollback waits for its siblings either until all
have landed or not at all (its grace cannot be made to run out at a chosen moment: see
docs/PROVING.md).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from agent_saga.errors import ConfigurationError

__all__ = [
    "MAX_BEFORE",
    "MAX_SIBLINGS",
    "ConcurrentShape",
    "Face",
    "Fate",
    "Sibling",
    "Slot",
    "concurrent_shapes",
    "possible",
]

#: The largest bounds :func:`concurrent_shapes` accepts (the count grows about 25x per sibling).
MAX_SIBLINGS = 3
MAX_BEFORE = 2


class Face(enum.StrEnum):
    THREADS = "threads"
    TASKS = "tasks"


class Fate(enum.StrEnum):
    """How a sibling's call ends."""

    COMMITS = "commits"  # its undo, built from the result, works
    COMMITS_UNDO_REFUSES = "commits, its undo refuses"
    IRREVERSIBLE = "commits, no undo exists"
    NOT_APPLIED = "raises NotApplied"  # certainly nothing happened
    UNKNOWN_UNDO_KNOWN = "lands, then raises; undo known before the call"
    UNKNOWN_NO_UNDO = "lands, then raises; no undo known before the call"
    FENCED = "its call had not begun when the fence went up"  # so it must never begin

    @property
    def effect(self) -> bool:
        """Whether the call lands (an effect exists) when it runs."""
        return self not in (Fate.NOT_APPLIED, Fate.FENCED)

    @property
    def undo_works(self) -> bool | None:
        """Whether its undo works (None: the engine has no undo to run for it)."""
        return {Fate.COMMITS: True, Fate.COMMITS_UNDO_REFUSES: False, Fate.UNKNOWN_UNDO_KNOWN: True}.get(self)


class Slot(enum.IntEnum):
    """When a sibling lands, against the rollback (in this order)."""

    BEFORE = 0  # before the saga fails
    WAITED = 1  # after ROLLBACK_STARTED, while the rollback waits (inside the grace)
    EDGE = 2  # its outcome is recorded inside the grace; it leaves flight just after the grace ran out
    UNDOING = 3  # left in flight; lands while the rollback runs its first undo
    ENDING = 4  # left in flight; lands after SAGA_ROLLED_BACK is written, before the end is told
    AFTER = 5  # left in flight; lands after the rollback returned its report (it hung until then)

    @property
    def left(self) -> bool:
        """Whether the rollback stops waiting for it (its grace runs out with it in flight)."""
        return self >= Slot.EDGE


@dataclass(frozen=True, slots=True)
class Sibling:
    fate: Fate
    slot: Slot


@dataclass(frozen=True, slots=True)
class ConcurrentShape:
    """``before`` steps one after another (each committed, its undo works), then ``siblings`` at once
    (steps numbered on from there).

    ``order`` is the order in which the siblings land (indexes into ``siblings``), by slot and,
    within one slot, as chosen.
    """

    before: int
    siblings: tuple[Sibling, ...]
    order: tuple[int, ...]
    halt: bool = True
    face: Face = Face.THREADS

    def step(self, sibling: int) -> int:
        """The engine's step number of sibling ``sibling`` (they start in order)."""
        return self.before + sibling + 1

    @property
    def left(self) -> tuple[int, ...]:
        """Sibling positions the rollback stops waiting for."""
        return tuple(i for i, s in enumerate(self.siblings) if s.slot.left)

    def landed(self, slot: Slot) -> tuple[int, ...]:
        """Sibling positions landing in ``slot``, in landing order."""
        return tuple(i for i in self.order if self.siblings[i].slot is slot)

    @property
    def stack_undos(self) -> bool:
        """Whether the rollback itself runs at least one undo (of a step landed before its grace ran out)."""
        return self.before > 0 or any(s.fate.undo_works is not None and not s.slot.left for s in self.siblings)

    @property
    def refusal(self) -> bool:
        return any(s.fate is Fate.COMMITS_UNDO_REFUSES for s in self.siblings)

    def describe(self) -> str:
        parts = [f"step {i} (before) undo works" for i in range(1, self.before + 1)]
        for position in self.order:
            sibling = self.siblings[position]
            parts.append(f"sibling step {self.step(position)} {sibling.fate.value}, lands {_SAID[sibling.slot]}")
        parts.append("halt on a failed undo" if self.halt else "no halt")
        parts.append(f"{self.face.value} face")
        return "; ".join(parts)


_SAID = {
    Slot.BEFORE: "before the saga fails",
    Slot.WAITED: "while the rollback waits for it",
    Slot.EDGE: "as the grace runs out (outcome recorded inside it)",
    Slot.UNDOING: "left, during the rollback's first undo",
    Slot.ENDING: "left, after SAGA_ROLLED_BACK is written",
    Slot.AFTER: "left, after the rollback returned",
}


def possible(shape: ConcurrentShape) -> bool:
    """Whether the engine can meet ``shape``, and the scheduler can force it.

    A fenced sibling has not begun its call when the saga fails, so it cannot land before that;
    the rollback's first undo is a moment only if it runs one; on the task face no EDGE, and no
    sibling landing inside the grace while another is left (the moment the grace runs out cannot
    be chosen there: the rollback waits for all, or for none).
    """
    sibs = shape.siblings
    if any(s.fate is Fate.FENCED and s.slot is Slot.BEFORE for s in sibs):
        return False
    if any(s.slot is Slot.UNDOING for s in sibs) and not shape.stack_undos:
        return False
    if not shape.halt and not shape.refusal:
        return False  # halt changes nothing when no undo refuses: one of the two is enough
    if shape.face is Face.TASKS:
        if any(s.slot is Slot.EDGE for s in sibs):
            return False
        if any(s.slot is Slot.WAITED for s in sibs) and shape.left:
            return False
    return True


def _orders(slots: tuple[Slot, ...]) -> Iterator[tuple[int, ...]]:
    """Every landing order: by slot, and every permutation within a slot."""
    groups = [[i for i, s in enumerate(slots) if s is slot] for slot in Slot]
    for chosen in itertools.product(*(itertools.permutations(g) for g in groups)):
        yield tuple(i for group in chosen for i in group)


def concurrent_shapes(
    siblings: int, before: int, faces: tuple[Face, ...] = (Face.THREADS, Face.TASKS)
) -> Iterator[ConcurrentShape]:
    """Every possible shape with 1..``siblings`` siblings and 0..``before`` steps before them, smallest first."""
    if isinstance(siblings, bool) or not isinstance(siblings, int) or not 1 <= siblings <= MAX_SIBLINGS:
        raise ConfigurationError(f"siblings must be an int from 1 to {MAX_SIBLINGS}, got {siblings!r}")
    if isinstance(before, bool) or not isinstance(before, int) or not 0 <= before <= MAX_BEFORE:
        raise ConfigurationError(f"before must be an int from 0 to {MAX_BEFORE}, got {before!r}")
    for n in range(1, siblings + 1):
        for steps in range(before + 1):
            for fates in itertools.product(Fate, repeat=n):
                for slots in itertools.product(Slot, repeat=n):
                    sibs = tuple(Sibling(f, s) for f, s in zip(fates, slots, strict=True))
                    for order in _orders(slots):
                        for face in faces:
                            for halt in (True, False):
                                shape = ConcurrentShape(steps, sibs, order, halt, face)
                                if possible(shape):
                                    yield shape
