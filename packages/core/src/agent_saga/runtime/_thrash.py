"""Stop the thrash: the Nth identical call in a saga, or a step, its undo and the step again.

``ThrashPolicy(max_identical=3, oscillation=True, inverses={"charge": "refund"})`` is
given to the gate (``PreFlightGate(thrash=...)``). It remembers the calls each saga
made (tool and canonical arguments) and refuses with :class:`SagaStopped`:

* ``identical``: the ``max_identical``-th call of one tool with the same canonical
  arguments in one saga (the default 3: two are allowed, the third stops the saga);
* ``oscillation``: a call of ``A``, later a call of its inverse ``B`` (``inverses``
  pairs tools, both ways), then ``A`` again with the same canonical arguments as the
  first: charge -> refund -> charge (other calls in between do not hide it).

The engine records the refusal and a THRASH_STOPPED record naming the pattern and the
calls, and the saga is rolled back. A call refused here is still a call the model
made: it is remembered, so a model that keeps asking stays stopped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from agent_saga.engine.ports import StepRequest
from agent_saga.errors import ConfigurationError, SagaStopped
from agent_saga.runtime._sagas import PerSaga

__all__ = ["ThrashPolicy", "canonical_args"]

#: One call as remembered: (step, tool, canonical arguments, arguments).
_Call = tuple[int, str, str, dict[str, Any]]


def canonical_args(args: Mapping[str, Any]) -> str:
    """One string per call's meaning: key order ignored, ``5 == 5.0``, ``True`` is not ``1``.

    Numbers compare by value (an integral float or Decimal is written as the integer);
    tuples are lists; any other object is its ``repr``.
    """
    return json.dumps(_canonical(args), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _canonical(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float, Decimal)):
        if isinstance(value, int):
            return value
        if isinstance(value, float) and not math.isfinite(value):
            return repr(value)
        if value == int(value):
            return int(value)
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return repr(value)


class ThrashPolicy:
    """Refuse a repeated or oscillating call and end the saga (see the module docstring)."""

    rule = "thrash"

    def __init__(
        self,
        max_identical: int = 3,
        *,
        oscillation: bool = True,
        inverses: Mapping[str, str] | None = None,
        keep: int = 4096,
    ) -> None:
        if isinstance(max_identical, bool) or not isinstance(max_identical, int) or max_identical < 2:
            raise ConfigurationError(
                f"ThrashPolicy(max_identical=...) is the identical call that is refused (2 or more), got {max_identical!r}"
            )
        pairs: dict[str, str] = {}
        for tool, undo in (inverses or {}).items():
            if not (isinstance(tool, str) and tool and isinstance(undo, str) and undo):
                raise ConfigurationError(
                    f"ThrashPolicy(inverses=...) maps a tool to the tool that undoes it, e.g. {{'charge': 'refund'}}, "
                    f"got {tool!r}: {undo!r}"
                )
            pairs[tool], pairs[undo] = undo, tool
        self.max_identical = max_identical
        self.oscillation = bool(oscillation)
        self.inverses = pairs
        self._calls: PerSaga[list[_Call]] = PerSaga(list, keep)

    def check(self, request: StepRequest) -> None:
        key = canonical_args(request.args)
        this = (request.step, request.tool, key, dict(request.args))
        with self._calls.lock:
            calls = self._calls.get(request.saga_id)
            same = [c for c in calls if c[1] == request.tool and c[2] == key]
            undo = self.inverses.get(request.tool) if self.oscillation else None
            swing = _swing(calls, same[-1], undo) if same and undo is not None else None
            calls.append(this)
        if len(same) + 1 >= self.max_identical:
            pattern = [*same[-(self.max_identical - 1):], this]
            raise SagaStopped(
                request.tool,
                f"call {self.max_identical} of {request.tool!r} with the same arguments in this saga "
                f"(steps {', '.join(str(c[0]) for c in pattern)}): the agent is repeating itself",
                self.rule, "identical", tuple(_shown(c) for c in pattern),
            )
        if swing is not None:
            first, between = swing
            raise SagaStopped(
                request.tool,
                f"{request.tool!r} -> {between[1]!r} -> {request.tool!r} with the same arguments "
                f"(steps {first[0]}, {between[0]}, {request.step}): the agent is undoing and redoing one step",
                self.rule, "oscillation", (_shown(first), _shown(between), _shown(this)),
            )

    def __repr__(self) -> str:
        return f"ThrashPolicy(max_identical={self.max_identical}, oscillation={self.oscillation}, inverses={self.inverses})"


def _swing(calls: list[_Call], first: _Call, undo: str) -> tuple[_Call, _Call] | None:
    """``(first, the undo after it)`` when a call of ``undo`` came after ``first``, else None."""
    after = calls[calls.index(first) + 1:]
    between = next((c for c in after if c[1] == undo), None)
    return (first, between) if between is not None else None


def _shown(call: _Call) -> dict[str, Any]:
    return {"step": call[0], "tool": call[1], "args": call[3]}
