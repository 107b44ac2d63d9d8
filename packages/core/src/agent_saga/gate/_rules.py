"""Policy rules: conditions over a step request, and what to do when one matches.

Conditions compose with ``&``, ``|`` and ``~``; any ``(StepRequest) -> bool``
callable is a condition too. A :class:`Rule` pairs a condition with an action.

How a rule set decides (order does not matter): any matching BLOCK rule refuses;
otherwise any matching APPROVE rule asks a human; otherwise a matching ALLOW rule
lets the step through; otherwise the built-in default applies -- an IRREVERSIBLE
step needs approval (rule ``irreversible``). The most restrictive match wins, so
adding an ALLOW rule can waive the default but can never undo someone's BLOCK.

An ADVISE rule takes no part in that decision: when it matches, the gate records its
note (``note(request)``, else its reason) in the log as the step's STEP_ADVISORY
record, and the verdict is what it would have been without the rule. A learned
estimate (``agent_saga.learning._failures``) is grounds to look, not to refuse.
"""

from __future__ import annotations

import enum
import fnmatch
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from agent_saga.engine.ports import StepRequest
from agent_saga.errors import ConfigurationError
from agent_saga.semantics import ActionSemantics

__all__ = [
    "DEFAULT_RULE",
    "Action",
    "Condition",
    "Rule",
    "RuleOutcome",
    "arg_exceeds",
    "condition",
    "evaluate_rules",
    "semantics_is",
    "tool_is",
]

Predicate = Callable[[StepRequest], bool]


class Condition:
    """A named predicate over a step request."""

    __slots__ = ("description", "predicate")

    def __init__(self, predicate: Predicate, description: str) -> None:
        self.predicate = predicate
        self.description = description

    def __call__(self, request: StepRequest) -> bool:
        return bool(self.predicate(request))

    def __and__(self, other: Condition | Predicate) -> Condition:
        right = condition(other)
        return Condition(lambda r: self(r) and right(r), f"({self.description} and {right.description})")

    def __or__(self, other: Condition | Predicate) -> Condition:
        right = condition(other)
        return Condition(lambda r: self(r) or right(r), f"({self.description} or {right.description})")

    def __invert__(self) -> Condition:
        return Condition(lambda r: not self(r), f"not {self.description}")

    def __repr__(self) -> str:
        return f"Condition({self.description})"


def condition(value: Condition | Predicate) -> Condition:
    """Accept a Condition or any ``(StepRequest) -> bool`` callable."""
    if isinstance(value, Condition):
        return value
    if not callable(value):
        raise ConfigurationError(
            f"a rule condition must be callable as (StepRequest) -> bool, got {value!r}; "
            "use semantics_is(...), arg_exceeds(...), tool_is(...) or a function"
        )
    name = getattr(value, "__name__", type(value).__name__)
    return Condition(value, name)


def semantics_is(*semantics: ActionSemantics | str) -> Condition:
    """True when the step was declared with one of ``semantics``."""
    if not semantics:
        raise ConfigurationError("semantics_is() needs at least one semantics, e.g. semantics_is('IRREVERSIBLE')")
    wanted = frozenset(ActionSemantics.parse(s) for s in semantics)
    names = "|".join(sorted(s.value for s in wanted))
    return Condition(lambda r: r.semantics in wanted, f"semantics is {names}")


def tool_is(*patterns: str) -> Condition:
    """True when the tool name matches one of ``patterns`` (exact, or a glob such as ``stripe.*``)."""
    if not patterns or not all(isinstance(p, str) and p for p in patterns):
        raise ConfigurationError(f"tool_is() needs tool names or globs such as 'stripe.*', got {patterns!r}")
    exact = frozenset(p for p in patterns if not _is_glob(p))
    globs = tuple(p for p in patterns if _is_glob(p))

    def match(request: StepRequest) -> bool:
        return request.tool in exact or any(fnmatch.fnmatchcase(request.tool, g) for g in globs)

    return Condition(match, f"tool is {'|'.join(patterns)}")


def arg_exceeds(name: str, value: float) -> Condition:
    """True when argument ``name`` is greater than ``value``.

    A missing argument does not match (this rule is about calls that carry it).
    A present argument that is not a number does match: a policy that cannot read
    what it polices treats the call as over the line rather than under it.
    """
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"arg_exceeds() needs an argument name, got {name!r}")
    threshold = _number(value)
    if threshold is None:
        raise ConfigurationError(f"arg_exceeds({name!r}, ...) needs a finite number as the threshold, got {value!r}")

    def match(request: StepRequest) -> bool:
        if name not in request.args:
            return False
        got = _number(request.args[name])
        return got is None or got > threshold

    return Condition(match, f"{name} > {value}")


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _number(value: Any) -> float | None:
    """A finite float from a number or numeric string, else None (bool is not a number)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, Decimal)):
        result = float(value)
    elif isinstance(value, str):
        try:
            result = float(Decimal(value.strip()))
        except (InvalidOperation, ValueError):
            return None
    else:
        return None
    return result if math.isfinite(result) else None


class Action(enum.StrEnum):
    """What a matching rule does."""

    BLOCK = "block"
    APPROVE = "approve"  # needs a human's approval
    ALLOW = "allow"
    ADVISE = "advise"  # records a note for the step; never changes the verdict


@dataclass(frozen=True, slots=True)
class Rule:
    """``when`` matches -> ``then`` (block, approve, allow or advise), with a reason a human can read.

    ``note`` (ADVISE rules only): what to record about a matching request, as a
    JSON-shaped mapping, or None to record nothing for it.
    """

    name: str
    when: Condition | Predicate
    then: Action | str = Action.APPROVE
    reason: str = ""
    note: Callable[[StepRequest], Mapping[str, Any] | None] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigurationError(f"a Rule needs a non-empty name, got {self.name!r}")
        object.__setattr__(self, "when", condition(self.when))
        try:
            object.__setattr__(self, "then", Action(str(self.then).lower()))
        except ValueError:
            raise ConfigurationError(
                f"Rule {self.name!r}: then={self.then!r} is not an action; use 'block', 'approve', 'allow' or 'advise'"
            ) from None
        if self.note is not None and (self.then is not Action.ADVISE or not callable(self.note)):
            raise ConfigurationError(
                f"Rule {self.name!r}: note= is for then='advise' rules and must be callable as "
                f"(StepRequest) -> mapping or None, got then={self.then!r}, note={self.note!r}"
            )

    def matches(self, request: StepRequest) -> bool:
        when = self.when
        assert isinstance(when, Condition)
        return when(request)

    def describe(self) -> str:
        if self.reason:
            return self.reason
        when = self.when
        return when.description if isinstance(when, Condition) else self.name


DEFAULT_RULE = Rule(
    "irreversible", semantics_is(ActionSemantics.IRREVERSIBLE), Action.APPROVE,
    "the action cannot be undone",
)


@dataclass(frozen=True, slots=True)
class RuleOutcome:
    """The verdict of a rule set: the action, each rule that asked for it, and the ADVISE rules that matched."""

    action: Action
    rules: tuple[Rule, ...] = ()
    advice: tuple[Rule, ...] = ()


_ALLOWED = RuleOutcome(Action.ALLOW)
_DEFAULT_APPROVAL = RuleOutcome(Action.APPROVE, (DEFAULT_RULE,))
_IRREVERSIBLE = ActionSemantics.IRREVERSIBLE


def evaluate_rules(rules: Sequence[Rule], request: StepRequest) -> RuleOutcome:
    """Apply the most-restrictive-match policy described in the module docstring."""
    if not rules:  # the common case, kept cheap: it runs before every step
        return _DEFAULT_APPROVAL if request.semantics is _IRREVERSIBLE else _ALLOWED
    block: list[Rule] = []
    approve: list[Rule] = []
    advise: list[Rule] = []
    allowed = False
    for rule in rules:
        if rule.matches(request):
            if rule.then is Action.BLOCK:
                block.append(rule)
            elif rule.then is Action.APPROVE:
                approve.append(rule)
            elif rule.then is Action.ADVISE:
                advise.append(rule)  # heard, never obeyed: the verdict below ignores it
            else:
                allowed = True
    advice = tuple(advise)
    if block:
        return RuleOutcome(Action.BLOCK, tuple(block), advice)
    if approve:
        return RuleOutcome(Action.APPROVE, tuple(approve), advice)
    if allowed or request.semantics is not _IRREVERSIBLE:
        return RuleOutcome(Action.ALLOW, (), advice) if advice else _ALLOWED
    return RuleOutcome(Action.APPROVE, (DEFAULT_RULE,), advice) if advice else _DEFAULT_APPROVAL
