"""What a step is: its semantics, its states, and the description of its undo.

Pure data, no I/O. Everything above this layer talks in these terms.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from math import isfinite
from typing import TYPE_CHECKING, Any

from agent_saga._migrating import gone_names
from agent_saga.credentials import assert_no_secrets, plain_and_clean
from agent_saga.errors import CompensationError, ConfigurationError

__all__ = [
    "ActionSemantics",
    "Compensation",
    "Observation",
    "Outcome",
    "StepState",
    "json_roundtrips",
]


class ActionSemantics(enum.StrEnum):
    """How (and whether) a step's effect can be taken back.

    * ``REVERSIBLE`` — the effect is local or trivially undone in-process (or there
      is nothing to undo, like a read). It never waits on the disk; after a crash
      there is nothing left to repair.
    * ``COMPENSABLE`` — the effect is real and outside the process, and a semantic
      inverse exists (refund a charge, terminate an instance). Its intent is made
      durable before it runs so that another process can finish the undo.
    * ``IRREVERSIBLE`` — once done it stays done (a sent email, a wire). It is
      gated before it runs; a rollback can only report it as orphaned.
    """

    REVERSIBLE = "REVERSIBLE"
    COMPENSABLE = "COMPENSABLE"
    IRREVERSIBLE = "IRREVERSIBLE"

    @classmethod
    def parse(cls, value: ActionSemantics | str) -> ActionSemantics:
        """Accept a member or its name in any case; refuse anything else clearly."""
        if isinstance(value, cls):
            return value
        exact = cls._value2member_map_.get(value)  # the usual spelling, without string work
        if exact is not None:
            return exact  # type: ignore[return-value]
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                pass
        choices = ", ".join(m.value for m in cls)
        raise ConfigurationError(
            f"unknown semantics {value!r}: use one of {choices} "
            "(agent-saga never guesses whether an effect can be undone)"
        )

    @property
    def durable(self) -> bool:
        """Whether the step's intent must reach the disk before its effect starts."""
        return self is not ActionSemantics.REVERSIBLE


class StepState(enum.StrEnum):
    """Where a step is in its forward life."""

    PENDING = "PENDING"  # intent recorded, effect not finished
    COMMITTED = "COMMITTED"  # the forward call returned: the effect is real
    UNKNOWN = "UNKNOWN"  # the call raised or timed out: it may have landed
    NOT_APPLIED = "NOT_APPLIED"  # refused, or the tool said it certainly did nothing


class Outcome(enum.StrEnum):
    """What a rollback did with one step. Every step gets exactly one."""

    COMPENSATED = "compensated"  # its undo ran and returned
    FAILED = "failed"  # its undo kept failing: a human must look
    ORPHANED = "orphaned"  # a committed effect with no undo (IRREVERSIBLE, or none given)
    UNRESOLVED = "unresolved"  # not attempted: halted earlier, or UNKNOWN with no known undo
    KEPT = "kept"  # REVERSIBLE with nothing to undo


_SCALARS = (str, int, bool, type(None))


def json_roundtrips(value: Any, *, values: bool = True) -> bool:
    """True when ``value`` survives ``json.dumps``/``json.loads`` unchanged.

    Checked structurally (every step builds a compensation, so this is on the hot
    path): str/int/bool/None, finite floats, lists, and dicts with str keys.
    Tuples, sets, NaN and objects do not come back as they went in. With
    ``values=False`` only the shape is checked (a NaN or infinite float passes):
    whether each value fits the log is asked where it is recorded.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind in _SCALARS:
            continue
        if kind is float:
            if values and not isfinite(item):
                return False
        elif kind is dict:
            if not all(type(k) is str for k in item):
                return False
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        else:
            return False
    return True


@dataclass(frozen=True, slots=True)
class Compensation:
    """How to undo one committed step, derived from that step's actual result.

    ``fn`` runs in-process. ``handler`` names a function registered with
    ``@compensator``: only a named handler with JSON kwargs can be run by the
    recovery daemon after the process is gone (``agent_saga.registry.recoverable``). Give ``handler``
    alone and ``fn`` is looked up in the registry when the undo runs.
    ``idempotency_key`` defaults to the step's deterministic operation id.
    """

    fn: Callable[..., Any] | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    handler: str | None = None
    idempotency_key: str | None = None

    def __post_init__(self) -> None:
        if self.fn is None and self.handler is None:
            raise CompensationError(
                "Compensation needs fn= (a callable) or handler= (a name registered with "
                "@compensator); it has neither"
            )
        if self.fn is not None and not callable(self.fn):
            raise CompensationError(f"Compensation fn must be callable, got {self.fn!r}")
        kwargs = self.kwargs
        if type(kwargs) is not dict:  # a plain dict (the usual case) needs no ABC check or copy
            if not isinstance(kwargs, Mapping):
                raise CompensationError(
                    f"Compensation kwargs must be a mapping of argument names, got {self.kwargs!r}"
                )
            kwargs = dict(kwargs)
        if self.handler is not None:
            if not isinstance(self.handler, str) or not self.handler:
                raise CompensationError(f"handler must be a non-empty name, got {self.handler!r}")
            if plain_and_clean(kwargs):  # the usual flat kwargs: both checks below would pass
                return
            # These kwargs are written to the log: a secret belongs there only as a reference.
            assert_no_secrets(kwargs, where=f"kwargs of compensation handler {self.handler!r}")
            # The shape only: a value the log cannot hold (a NaN from a result) leaves the
            # undo runnable in this process; the engine marks it unrecordable (engine.saga).
            if not json_roundtrips(kwargs, values=False):
                raise CompensationError(
                    f"kwargs of compensation handler {self.handler!r} do not survive a JSON round "
                    f"trip ({dict(self.kwargs)!r}); a recovery daemon in another process could not "
                    "replay it. Pass plain str/int/float/bool/None/list/dict values, or a "
                    "credential reference instead of a client object"
                )

    def with_key(self, key: str) -> Compensation:
        """A copy carrying ``key`` as its idempotency key (fields already validated)."""
        twin = object.__new__(Compensation)
        setattr_ = object.__setattr__  # unrolled: this runs for every step with an undo
        setattr_(twin, "fn", self.fn)
        setattr_(twin, "kwargs", self.kwargs)
        setattr_(twin, "description", self.description)
        setattr_(twin, "handler", self.handler)
        setattr_(twin, "idempotency_key", key)
        return twin

    @property
    def label(self) -> str:
        """A short human description for reports and logs."""
        if self.description:
            return self.description
        name = self.handler or getattr(self.fn, "__qualname__", repr(self.fn))
        parts = []  # a loop, not a comprehension: on 3.11 that is one frame fewer per step
        for key, value in self.kwargs.items():
            parts.append(f"{key}={value!r}")
        return f"{name}({', '.join(parts)})"


@dataclass(frozen=True, slots=True)
class Observation:
    """What a reconciler saw when it asked the outside system, in three states.

    ``exists`` — did the forward effect land (True), certainly not (False), or
    could the system not tell (None)? ``reversed_`` — is the undo really in
    effect, same three states. ``None`` is "unverifiable" and is never read as
    either answer: an observation that cannot say is not a clean bill of health.
    ``result`` is what the forward call returned, as the provider reports it
    (it feeds the compensate factory of a step whose response was lost);
    ``amount`` and ``detail`` are for reports.
    """

    exists: bool | None = None
    reversed_: bool | None = None
    detail: str = ""
    amount: Any = None
    result: Any = None

    def __post_init__(self) -> None:
        for name in ("exists", "reversed_"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise ConfigurationError(
                    f"Observation.{name} must be True, False or None (could not tell), got {value!r}"
                )
        if not isinstance(self.detail, str):
            raise ConfigurationError(f"Observation.detail must be a string, got {type(self.detail).__name__}")


if not TYPE_CHECKING:  # at run time only: mypy still refuses a name this module lacks
    __getattr__ = gone_names(__name__)  # a 2.x name of this module says what 3.x has instead
