"""Spend and rate limits: caps over a sliding window, not over one call.

``arg_exceeds("amount", 1000)`` passes a thousand charges of $999 one by one; a
:class:`BudgetLimit` of $50,000 a day stops the 51st. Each limit turns a step
request into a :class:`~agent_saga.gate._stores.Charge`; the gate hands all of a
call's charges to the limit store at once, which debits all or none.

What a limit refuses (each raises ``StepRefused`` naming the limit):

* the call would take its window past ``max_total``;
* the policed argument is missing, not a number, negative or not finite -- a
  limit that cannot read the amount it polices does not guess;
* the scope cannot be computed (``by_arg("customer_id")`` without that argument).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from agent_saga.engine.ports import StepRequest
from agent_saga.errors import ConfigurationError, StepRefused
from agent_saga.gate._rules import Condition, Predicate, _number, condition
from agent_saga.gate._scopes import MissingScope, Scope, everything
from agent_saga.gate._stores import Charge, Mode

__all__ = ["BudgetLimit", "Limit", "RateLimit", "check_limits"]


def _positive(owner: str, label: str, value: Any) -> float:
    number = _number(value)
    if number is None or number <= 0:
        raise ConfigurationError(f"{owner}: {label} must be a positive number, got {value!r}")
    return number


@dataclass(frozen=True)
class Limit:
    """What every limit shares: a name, a cap, a sliding window (seconds), a scope."""

    name: str
    max_total: float
    window: float
    scope: Scope = everything
    escalate_to_human: bool = False
    when: Condition | Predicate | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or ":" in self.name:
            raise ConfigurationError(
                f"a limit needs a non-empty name without ':' (it keys the window), got {self.name!r}"
            )
        owner = f"{type(self).__name__}({self.name!r})"
        object.__setattr__(self, "max_total", _positive(owner, "max_total", self.max_total))
        object.__setattr__(self, "window", _positive(owner, "window", self.window))
        if not callable(self.scope):
            raise ConfigurationError(f"{owner}: scope= must be by_tool, by_arg(...), combine(...) or a function")
        if self.when is not None:
            object.__setattr__(self, "when", condition(self.when))

    @property
    def rule(self) -> str:
        """The name refusals and approvals carry."""
        return f"limit:{self.name}"

    def amount(self, request: StepRequest) -> float:
        raise NotImplementedError

    def charge(self, request: StepRequest) -> Charge | None:
        """This limit's share of ``request``, or None when the limit does not police it."""
        when = self.when
        if when is not None and not when(request):
            return None
        amount = self.amount(request)
        try:
            key = self.scope(request)
        except MissingScope as err:
            raise StepRefused(request.tool, f"{err}; refusing rather than skip the limit", self.rule) from None
        mode: Mode = "escalate" if self.escalate_to_human else "check"
        return Charge(f"{self.name}:{key}", self.max_total, self.window, amount, mode)


@dataclass(frozen=True)
class BudgetLimit(Limit):
    """At most ``max_total`` of argument ``arg`` summed over any ``window`` seconds.

    ``BudgetLimit("daily-spend", arg="amount", max_total=50_000, window=86_400)``.
    With ``escalate_to_human=True`` an over-budget call goes to the approval
    provider instead of being refused (refused if there is none).
    """

    arg: str = ""
    max_total: float = field(default=0.0)
    window: float = field(default=0.0)

    def __post_init__(self) -> None:
        if not isinstance(self.arg, str) or not self.arg:
            raise ConfigurationError(
                f"BudgetLimit({self.name!r}) needs arg=, the argument it sums (e.g. arg='amount')"
            )
        super().__post_init__()

    def amount(self, request: StepRequest) -> float:
        if self.arg not in request.args:
            raise StepRefused(
                request.tool,
                f"the call has no argument {self.arg!r}, so its spend cannot be checked; pass it in args=, "
                f"or narrow the limit with when=",
                self.rule,
            )
        raw = request.args[self.arg]
        value = _number(raw)
        if value is None or value < 0 or not math.isfinite(value):
            raise StepRefused(
                request.tool,
                f"argument {self.arg!r}={raw!r} is not a non-negative finite number, so its spend cannot be checked",
                self.rule,
            )
        return value


@dataclass(frozen=True)
class RateLimit(Limit):
    """At most ``max_calls`` calls in any ``window`` seconds."""

    max_calls: int = 0
    max_total: float = field(default=0.0)
    window: float = field(default=0.0)

    def __post_init__(self) -> None:
        if isinstance(self.max_calls, bool) or not isinstance(self.max_calls, int) or self.max_calls <= 0:
            raise ConfigurationError(
                f"RateLimit({self.name!r}) needs max_calls=, a positive whole number, got {self.max_calls!r}"
            )
        object.__setattr__(self, "max_total", float(self.max_calls))
        super().__post_init__()

    def amount(self, request: StepRequest) -> float:
        return 1.0


def check_limits(limits: tuple[Limit, ...]) -> None:
    """Refuse a limit list the gate could not apply unambiguously."""
    seen: set[str] = set()
    for limit in limits:
        if not isinstance(limit, Limit):
            raise ConfigurationError(f"limits= takes BudgetLimit/RateLimit objects, got {limit!r}")
        if limit.name in seen:
            raise ConfigurationError(f"two limits are named {limit.name!r}; names key the windows, so make them unique")
        seen.add(limit.name)

