"""Argument provenance: where a tool's argument came from, checked before the tool runs.

A charge of 4200 can be budgeted, gated and logged while the model invented the
number. Here an argument carries a claim of where it came from, and a
:class:`ProvenancePolicy` checks the claim at the gate, before the effect:

* ``SOURCED`` -- read from a document the broker holds: :func:`sourced` carries
  the span's receipt. Verified, never accepted: the receipt is resolved *now*
  (the span must still hash the same) and the value must appear in the span's
  text (numbers by value, see :mod:`agent_saga.runtime._matching`).
* ``USER`` -- the person's own words: :func:`user_value` names a request
  registered with ``broker.add_request``, and the value must appear in it.
* ``DERIVED`` -- computed from other values: :func:`derived` states the inputs
  and the operation; the check recomputes it and checks each input in turn.
* ``MODEL`` -- everything else. **An untagged value is MODEL**, and so is a tag
  whose check fails (it is downgraded, and the reason says why).

The levels are ordered SOURCED > USER > DERIVED > MODEL; ``require(tool, arg,
level)`` accepts that level or a higher one. ``prohibit(tool, reason)`` refuses a
tool outright. :meth:`ProvenancePolicy.as_gate_rule` turns the policy into a gate
rule: a refusal is a ``StepRefused`` naming rule ``provenance`` and the reason,
which the engine writes as a STEP_REFUSED record before anything runs.
"""

from __future__ import annotations

import enum
import fnmatch
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from agent_saga.engine.ports import StepRequest
from agent_saga.engine.tagged import Tagged
from agent_saga.errors import ConfigurationError, StepRefused
from agent_saga.gate import Action, Condition, Rule
from agent_saga.inert import clip
from agent_saga.runtime._broker import ContextBroker, Receipt, ReceiptBroken, Span
from agent_saga.runtime._matching import as_number, value_in_text

__all__ = [
    "BUILT_IN_DERIVATIONS",
    "RULE_NAME",
    "ArgumentProvenance",
    "Derived",
    "Provenance",
    "ProvenancePolicy",
    "ProvenanceVerdict",
    "Sourced",
    "UserValue",
    "derived",
    "sourced",
    "user_value",
]

#: The rule name a provenance refusal carries (in StepRefused and the STEP_REFUSED record).
RULE_NAME = "provenance"
#: The operations :func:`derived` can name by string; the check recomputes each.
BUILT_IN_DERIVATIONS = ("sum", "difference", "product", "ratio", "round")


class Provenance(enum.IntEnum):
    """Where a value came from, ordered: SOURCED > USER > DERIVED > MODEL."""

    MODEL = 0
    DERIVED = 1
    USER = 2
    SOURCED = 3

    @classmethod
    def parse(cls, value: Provenance | str) -> Provenance:
        if isinstance(value, Provenance):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        raise ConfigurationError(
            f"not a provenance level: {value!r}; use Provenance.SOURCED, USER, DERIVED or MODEL"
        )


# -- the tags ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sourced(Tagged):
    """A value read from a document span; ``receipt`` says which."""

    value: Any
    receipt: Receipt

    @property
    def plain(self) -> Any:
        return self.value

    @property
    def level(self) -> Provenance:
        return Provenance.SOURCED

    def claim(self) -> dict[str, Any]:
        return {"level": "SOURCED", "receipt": self.receipt.as_dict()}


@dataclass(frozen=True, slots=True)
class UserValue(Tagged):
    """A value the person asked for, in request ``request_id``."""

    value: Any
    request_id: str

    @property
    def plain(self) -> Any:
        return self.value

    @property
    def level(self) -> Provenance:
        return Provenance.USER

    def claim(self) -> dict[str, Any]:
        return {"level": "USER", "request": self.request_id}


@dataclass(frozen=True, slots=True)
class Derived(Tagged):
    """A value computed by ``how`` from the values in ``from_`` (tagged or not)."""

    value: Any
    from_: tuple[Any, ...]
    how: str | Callable[..., Any]

    @property
    def plain(self) -> Any:
        return self.value

    @property
    def level(self) -> Provenance:
        return Provenance.DERIVED

    def claim(self) -> dict[str, Any]:
        how = self.how if isinstance(self.how, str) else _callable_name(self.how)
        inputs = [x.claim() if isinstance(x, Tagged) else {"level": "MODEL"} for x in self.from_]
        return {"level": "DERIVED", "how": how, "from": inputs}


def sourced(value: Any, span_or_receipt: Span | Receipt) -> Sourced:
    """Tag ``value`` as read from a document span (give the Span or its Receipt)."""
    _check_plain(value, "sourced")
    if isinstance(span_or_receipt, Span):
        receipt = span_or_receipt.receipt
    elif isinstance(span_or_receipt, Receipt):
        receipt = span_or_receipt
    else:
        raise TypeError(
            f"sourced(value, span): the second argument must be a Span from broker.add_document() "
            f"or its Receipt, got {type(span_or_receipt).__name__}"
        )
    return Sourced(value, receipt)


def user_value(value: Any, request_id: str) -> UserValue:
    """Tag ``value`` as the person's own, from the request ``broker.add_request()`` registered."""
    _check_plain(value, "user_value")
    if not isinstance(request_id, str) or not request_id:
        raise TypeError(f"user_value(value, request_id): request_id is the str add_request() returned, got {request_id!r}")
    return UserValue(value, request_id)


def derived(value: Any, from_: Iterable[Any], how: str | Callable[..., Any]) -> Derived:
    """Tag ``value`` as computed by ``how`` from ``from_``.

    ``how`` is one of ``sum``, ``difference`` (the first minus the rest), ``product``,
    ``ratio`` (the first over the second) and ``round`` (to the places ``value`` is
    written with), or a function of the inputs' plain values that the check calls.
    """
    _check_plain(value, "derived")
    if isinstance(from_, (str, bytes)) or not isinstance(from_, Iterable):
        raise TypeError(f"derived(value, from_=[...], how=...): from_ is a list of the inputs, got {from_!r}")
    inputs = tuple(from_)
    if not inputs:
        raise ValueError("derived(value, from_=[...], how=...): from_ needs at least one input")
    if isinstance(how, str):
        if how not in BUILT_IN_DERIVATIONS:
            raise ValueError(
                f"derived(..., how={how!r}): not a built-in operation; use one of "
                f"{', '.join(BUILT_IN_DERIVATIONS)} or pass a function of the inputs"
            )
    elif not callable(how):
        raise TypeError(f"derived(..., how=...): how is an operation's name or a function, got {how!r}")
    return Derived(value, inputs, how)


def _check_plain(value: Any, fn: str) -> None:
    if isinstance(value, Tagged):
        raise TypeError(f"{fn}(value, ...): value is already tagged; tag the plain value once")


def _callable_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__)


# -- the verdict ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArgumentProvenance:
    """One argument as checked: the level its tag claimed, the level verified, and why."""

    name: str
    claimed: Provenance
    verified: Provenance
    required: Provenance | None = None
    reason: str = ""  # why ``verified`` is below ``claimed`` ("" when the claim held)

    @property
    def ok(self) -> bool:
        return self.required is None or self.verified >= self.required


@dataclass(frozen=True, slots=True)
class ProvenanceVerdict:
    """Whether ``tool`` may run with these arguments, each argument's levels, and the reasons."""

    tool: str
    allowed: bool
    arguments: Mapping[str, ArgumentProvenance] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        """The reasons as one line (what a refusal says)."""
        return "; ".join(self.reasons)

    def __bool__(self) -> bool:
        return self.allowed


# -- the policy -----------------------------------------------------------------------------


class ProvenancePolicy:
    """Which arguments of which tools must come from where, and which tools may not run."""

    def __init__(self) -> None:
        self._required: dict[tuple[str, str], Provenance] = {}
        self._origins: dict[tuple[str, str], frozenset[str]] = {}
        self._prohibited: dict[str, str] = {}

    def require(
        self, tool: str, arg: str, level: Provenance | str, *, from_origins: Iterable[str] | None = None,
    ) -> ProvenancePolicy:
        """``tool``'s argument ``arg`` must verify at ``level`` or higher (``tool`` may be a glob).

        ``from_origins`` names the document origins (``broker.add_document(..., origin=)``)
        a SOURCED value, or one a DERIVED value is computed from, may be read from; a
        document of another origin, or of none, does not source it. Several requirements
        for one argument all hold: the origins they name are intersected.
        """
        _check_name(tool, "require", "tool")
        _check_name(arg, "require", "arg")
        wanted = Provenance.parse(level)
        key = (tool, arg)
        self._required[key] = max(wanted, self._required.get(key, Provenance.MODEL))
        if from_origins is not None:
            origins = _origins_of(from_origins)
            self._origins[key] = self._origins.get(key, origins) & origins
        return self

    def prohibit(self, tool: str, reason: str) -> ProvenancePolicy:
        """Refuse ``tool`` (a name or a glob) always, saying ``reason``."""
        _check_name(tool, "prohibit", "tool")
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigurationError(f"prohibit({tool!r}, reason): the reason must be a non-empty str, got {reason!r}")
        self._prohibited[tool] = reason
        return self

    def check(self, tool: str, args: Mapping[str, Any], broker: ContextBroker | None = None) -> ProvenanceVerdict:
        """Check ``args`` for a call of ``tool``; tagged values are verified against ``broker``."""
        if not isinstance(tool, str):
            raise TypeError(f"check(tool, args): tool is the tool's name, got {tool!r}")
        if not isinstance(args, Mapping):
            raise TypeError(f"check({tool!r}, args): args is a mapping of argument names to values, got {args!r}")
        if broker is not None and not isinstance(broker, ContextBroker):
            raise TypeError(f"check(..., broker=): a ContextBroker, got {type(broker).__name__}")
        reasons: list[str] = []
        for pattern, why in self._prohibited.items():
            if _matches(pattern, tool):
                reasons.append(f"{tool} is prohibited: {why}")
        required: dict[str, Provenance] = {}
        origins: dict[str, frozenset[str]] = {}
        for (pattern, arg), level in self._required.items():
            if _matches(pattern, tool):
                required[arg] = max(level, required.get(arg, Provenance.MODEL))
                trusted = self._origins.get((pattern, arg))
                if trusted is not None:
                    origins[arg] = origins.get(arg, trusted) & trusted
        arguments: dict[str, ArgumentProvenance] = {}
        for name, value in args.items():
            claimed = value.level if isinstance(value, (Sourced, UserValue, Derived)) else Provenance.MODEL
            verified, why = _verify(value, broker, origins.get(name))
            arguments[name] = ArgumentProvenance(name, claimed, verified, required.get(name), why)
        for name, level in required.items():
            if name not in arguments:
                reasons.append(f"argument {name!r} is missing; it must be {level.name} or higher")
                continue
            got = arguments[name]
            if got.verified < level:
                reasons.append(
                    f"argument {name!r} must be {level.name} or higher, verified {got.verified.name}: {got.reason}"
                )
        return ProvenanceVerdict(tool, not reasons, arguments, tuple(reasons))

    def as_gate_rule(self, broker: ContextBroker | None = None) -> Rule:
        """This policy as a rule for ``PreFlightGate(rules=[...])``.

        The rule refuses by raising ``StepRefused(tool, reason, "provenance")`` from its
        check, so the refusal carries the reason for this call (a rule's own reason is
        fixed). It never asks for approval and never allows by itself: a call it lets
        through is decided by the other rules as if it were not there.
        """
        if broker is not None and not isinstance(broker, ContextBroker):
            raise ConfigurationError(f"as_gate_rule(broker): a ContextBroker, got {type(broker).__name__}")

        def refuses(request: StepRequest) -> bool:
            verdict = self.check(request.tool, _arguments_of(request), broker=broker)
            if not verdict.allowed:
                raise StepRefused(request.tool, verdict.reason, RULE_NAME)
            return False

        return Rule(RULE_NAME, Condition(refuses, "argument provenance"), Action.BLOCK,
                    "an argument's provenance does not meet the policy")

    def __repr__(self) -> str:
        required = {f"{t}.{a}": lvl.name for (t, a), lvl in self._required.items()}
        return f"ProvenancePolicy(required={required}, prohibited={sorted(self._prohibited)})"


def _arguments_of(request: StepRequest) -> dict[str, Any]:
    """The request's arguments with each tagged one as it came (the gate checks the tag)."""
    args = dict(request.args)
    if request.provenance:
        args.update(request.provenance)
    return args


def _origins_of(value: Any) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigurationError(f"require(..., from_origins=): a set of origins like {{'erp'}}, got {value!r}")
    origins = frozenset(value)
    if not origins or not all(isinstance(o, str) and o.strip() for o in origins):
        raise ConfigurationError(
            f"require(..., from_origins=): non-empty str origins, at least one, got {sorted(map(repr, origins))}"
        )
    return origins


def _check_name(value: Any, verb: str, what: str) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{verb}(): {what} must be a non-empty str, got {value!r}")


def _matches(pattern: str, tool: str) -> bool:
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(tool, pattern)
    return pattern == tool


# -- verification ---------------------------------------------------------------------------


def _verify(value: Any, broker: ContextBroker | None, origins: frozenset[str] | None = None) -> tuple[Provenance, str]:
    """The level ``value`` verifies at now, and (when below its claim) why.

    ``origins``: the document origins a sourced value (or an input of a derived one) may come from.
    """
    plain = value.plain if isinstance(value, Tagged) else value
    exponent = plain.as_tuple().exponent if isinstance(plain, Decimal) else 0
    if isinstance(exponent, int) and exponent > 0:
        # Decimal('1E+4') passes as round(5000) and reaches the tool as 10000.
        return Provenance.MODEL, (
            f"{plain!r} is written with a positive exponent: it stands for {_plain_decimal(plain)}; "
            "write the value out"
        )
    if isinstance(value, Sourced):
        return _verify_sourced(value, broker, origins)
    if isinstance(value, UserValue):
        return _verify_user(value, broker)
    if isinstance(value, Derived):
        return _verify_derived(value, broker, origins)
    if isinstance(value, Tagged):
        return Provenance.MODEL, f"a {type(value).__name__} tag is not one this policy can check"
    return Provenance.MODEL, "untagged (a value nobody tagged is the model's)"


def _shown(value: Any) -> str:
    return clip(repr(value), 60)


def _verify_sourced(
    tag: Sourced, broker: ContextBroker | None, origins: frozenset[str] | None,
) -> tuple[Provenance, str]:
    if broker is None:
        return Provenance.MODEL, f"no broker to resolve receipt {tag.receipt} against"
    try:
        span = broker.resolve(tag.receipt)
        origin = broker.origin(tag.receipt.doc_id)
    except ReceiptBroken as err:
        return Provenance.MODEL, f"receipt {tag.receipt} does not resolve: {err.reason}"
    if origins is not None and origin not in origins:
        said = "no origin" if origin is None else f"origin {origin!r}"
        return Provenance.MODEL, (
            f"document {tag.receipt.doc_id!r} is from {said}, not from {', '.join(sorted(origins))}"
        )
    try:
        found = value_in_text(tag.value, span.text)
    except TypeError as err:
        return Provenance.MODEL, str(err)
    if not found:
        return Provenance.MODEL, f"{_shown(tag.value)} is not in the span {tag.receipt}"
    return Provenance.SOURCED, ""


def _verify_user(tag: UserValue, broker: ContextBroker | None) -> tuple[Provenance, str]:
    if broker is None:
        return Provenance.MODEL, f"no broker to read request {tag.request_id!r} from"
    try:
        text = broker.request(tag.request_id)
    except LookupError:
        return Provenance.MODEL, f"request {tag.request_id!r} was never registered"
    try:
        found = value_in_text(tag.value, text)
    except TypeError as err:
        return Provenance.MODEL, str(err)
    if not found:
        return Provenance.MODEL, f"{_shown(tag.value)} is not in request {tag.request_id!r}"
    return Provenance.USER, ""


def _verify_derived(
    tag: Derived, broker: ContextBroker | None, origins: frozenset[str] | None,
) -> tuple[Provenance, str]:
    for i, item in enumerate(tag.from_):
        level, why = _verify(item, broker, origins)
        if level < Provenance.DERIVED:
            return Provenance.MODEL, f"input {i} of the {_how_name(tag.how)}: {why}"
    inputs = [item.plain if isinstance(item, Tagged) else item for item in tag.from_]
    ok, why = _recompute(tag.value, inputs, tag.how)
    if not ok:
        return Provenance.MODEL, why
    return Provenance.DERIVED, ""


def _how_name(how: str | Callable[..., Any]) -> str:
    return how if isinstance(how, str) else _callable_name(how)


def _recompute(value: Any, inputs: Sequence[Any], how: str | Callable[..., Any]) -> tuple[bool, str]:
    """Whether ``how`` over ``inputs`` gives ``value``."""
    name = _how_name(how)
    if callable(how) and not isinstance(how, str):
        try:
            got = how(*inputs)
        except Exception as err:  # noqa: BLE001 - a failing derivation is a failed check, said in one line
            return False, f"the {name} of the inputs failed: {type(err).__name__}: {err}"
        same = _same(value, got)
        return same, "" if same else f"the {name} of the inputs is {_shown(got)}, not {_shown(value)}"
    claimed = as_number(value)
    numbers = [as_number(x) for x in inputs]
    if claimed is None or any(n is None for n in numbers):
        return False, f"a {name} needs numbers, got {_shown(value)} from {_shown(inputs)}"
    xs = [n for n in numbers if n is not None]
    try:
        if how == "sum":
            return _result(claimed, sum(xs, Decimal(0)), name)
        if how == "product":
            return _result(claimed, math.prod(xs, start=Decimal(1)), name)
        if how == "difference":
            if len(xs) < 2:
                return False, "a difference needs at least two inputs"
            return _result(claimed, xs[0] - sum(xs[1:], Decimal(0)), name)
        if how == "ratio":
            if len(xs) != 2:
                return False, f"a ratio needs exactly two inputs, got {len(xs)}"
            if xs[1] == 0:
                return False, "a ratio over zero"
            # A ratio is compared at the precision the value is written with (1/3 -> 0.33).
            return _result(claimed, _at_places_of(xs[0] / xs[1], claimed), name)
        if len(xs) != 1:  # round
            return False, f"a round needs exactly one input, got {len(xs)}"
        places = claimed.as_tuple().exponent
        if not isinstance(places, int):
            return False, f"a round to {claimed} is not a number"
        exponent = Decimal(1).scaleb(places)
        # Half-even and half-up both count as honest rounding: 0.5 may go either way.
        candidates = {xs[0].quantize(exponent, rounding=mode) for mode in (ROUND_HALF_EVEN, ROUND_HALF_UP)}
        if claimed in candidates:
            return True, ""
        return False, f"{xs[0]} rounds to {min(candidates)}, not {claimed}"
    except (InvalidOperation, ArithmeticError) as err:
        return False, f"the {name} cannot be computed: {type(err).__name__}"


def _at_places_of(computed: Decimal, claimed: Decimal) -> Decimal:
    exponent = claimed.as_tuple().exponent
    if not isinstance(exponent, int):
        return computed
    return computed.quantize(Decimal(1).scaleb(exponent), rounding=ROUND_HALF_EVEN)


def _result(claimed: Decimal, computed: Decimal, name: str) -> tuple[bool, str]:
    if claimed == computed:
        return True, ""
    return False, f"the {name} of the inputs is {_plain_decimal(computed)}, not {claimed}"


def _plain_decimal(value: Decimal) -> str:
    """``4200`` for Decimal('4200.00'), never ``4.2E+3``."""
    return format(value.normalize(), "f") if value.is_finite() else str(value)


def _same(value: Any, got: Any) -> bool:
    a, b = as_number(value), as_number(got)
    if a is not None and b is not None:
        return a == b
    return bool(value == got)
