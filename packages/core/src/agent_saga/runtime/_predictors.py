"""Predictors: which calls the agent is likely to make next, so they can run while it thinks.

A :class:`Predictor` is told every call the agent made (``observe``) and asked for
the calls it expects next (``predict``). A prediction is a guess, never a command:
the speculator runs one only if the tool is known to it, declared REVERSIBLE, and
the gate allows speculating it; a wrong guess costs one wasted call.

:class:`PatternPredictor`, the shipped one, reads the last calls of a tool: when
the last ``run`` calls differ only in one number advancing by the same step
(``page=1``, ``page=2``; ``"part-07.txt"``, ``"part-08.txt"``), it predicts the
next ``lookahead`` calls of that progression.
"""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["PatternPredictor", "Prediction", "Predictor"]


@dataclass(frozen=True, slots=True)
class Prediction:
    """One call the agent is expected to make: the tool's name and its arguments."""

    tool: str
    args: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Predictor(Protocol):
    """Told each call the agent made; asked which calls come next (most likely first)."""

    def observe(self, tool: str, args: Mapping[str, Any]) -> None: ...

    def predict(self) -> Sequence[Prediction]: ...


# The last run of digits in a string: "page-07.txt" -> ("page-", "07", ".txt").
_LAST_NUMBER = re.compile(r"^(.*?)(\d+)(\D*)$", re.DOTALL)


def _number(value: Any) -> tuple[str, int, str, int] | None:
    """``(prefix, n, suffix, width)`` for an int or a string with a number in it; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return ("", value, "", 0)
    if isinstance(value, str):
        found = _LAST_NUMBER.match(value)
        if found is not None and len(found.group(2)) <= 18:
            digits = found.group(2)
            width = len(digits) if digits.startswith("0") else 0  # keep "07" -> "08" zero-padded
            return (found.group(1), int(digits), found.group(3), width)
    return None


def _shift(value: Any, step: int) -> Any:
    parsed = _number(value)
    assert parsed is not None
    prefix, n, suffix, width = parsed
    if isinstance(value, int):
        return n + step
    if n + step < 0:
        return None
    return f"{prefix}{str(n + step).zfill(width)}{suffix}"


class PatternPredictor:
    """Predict the next calls of a tool whose last ``run`` calls advance one number by a fixed step."""

    def __init__(self, *, run: int = 2, lookahead: int = 1, history: int = 32) -> None:
        for label, value, least in (("run", run, 2), ("lookahead", lookahead, 1), ("history", history, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"PatternPredictor({label}=...) must be an int of at least {least}, got {value!r}")
        self.run = run
        self.lookahead = lookahead
        self._calls: deque[tuple[str, dict[str, Any]]] = deque(maxlen=history)

    def observe(self, tool: str, args: Mapping[str, Any]) -> None:
        self._calls.append((tool, dict(args)))

    def predict(self) -> list[Prediction]:
        if not self._calls:
            return []
        tool = self._calls[-1][0]
        same = [args for name, args in self._calls if name == tool][-self.run:]
        if len(same) < self.run:
            return []
        moving = _moving_argument(same)
        if moving is None:
            return []
        name, step = moving
        predictions: list[Prediction] = []
        value = same[-1][name]
        for _ in range(self.lookahead):
            value = _shift(value, step)
            if value is None:
                break
            predictions.append(Prediction(tool, {**same[-1], name: value}))
        return predictions

    def __repr__(self) -> str:
        return f"PatternPredictor(run={self.run}, lookahead={self.lookahead})"


def _moving_argument(calls: list[dict[str, Any]]) -> tuple[str, int] | None:
    """The one argument that advances by one non-zero step across ``calls`` (the rest equal)."""
    first = calls[0]
    if any(set(c) != set(first) for c in calls):
        return None
    changed = [k for k in first if any(c[k] != first[k] for c in calls)]
    if len(changed) != 1:
        return None
    name = changed[0]
    parsed = [_number(c[name]) for c in calls]
    if any(p is None for p in parsed):
        return None
    shapes = {(p[0], p[2], type(c[name])) for p, c in zip(parsed, calls, strict=True) if p is not None}
    if len(shapes) != 1:
        return None  # the text around the number changed too: not one progression
    numbers = [p[1] for p in parsed if p is not None]
    steps = {b - a for a, b in itertools.pairwise(numbers)}
    if len(steps) != 1 or 0 in steps:
        return None
    return name, steps.pop()
