"""What a job is, and everything that travels between the workflow and its activities.

Plain dataclasses and pure functions only. This module is imported inside Temporal's
workflow sandbox, so it does no I/O, reads no clock and imports nothing that does:
the rules that judge a proposal and build an undo run identically on every replay.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACTIVITY",
    "EVENT_KINDS",
    "FINISH",
    "NOT_APPLIED",
    "AdmitCall",
    "Answer",
    "EffectCall",
    "GateVerdict",
    "InvariantCall",
    "InvariantResult",
    "JobEvent",
    "JobReport",
    "JobSpec",
    "Limits",
    "Proposal",
    "ProposalRecord",
    "Resolution",
    "Situation",
    "Status",
    "StepOption",
    "StepReport",
    "StepSpec",
    "UndoCall",
    "UndoSpec",
    "Unresolvable",
    "allowed_options",
    "judge",
    "references",
    "resolve_refs",
]

#: The choice that says "the goal is reached": the workflow then checks the invariants.
#: A job may name it otherwise (``JobSpec.finish``, ``finish:`` in saga.yaml), e.g. ``verify_order``.
FINISH = "finish"

#: The failure type of an effect that certainly did not happen (``agent_saga.NotApplied``).
NOT_APPLIED = "NotApplied"


class ACTIVITY:
    """The activities' registered names: the workflow calls them by name, never by import."""

    DECIDE = "agent_saga.decide"
    ADMIT = "agent_saga.admit"
    GATE = "agent_saga.gate"
    EFFECT = "agent_saga.effect"
    RECONCILE = "agent_saga.reconcile"
    UNDO = "agent_saga.undo"
    CHECK_UNDO = "agent_saga.check_undo"
    INVARIANTS = "agent_saga.invariants"


class Status(enum.StrEnum):
    """Where a job is. Only the ``*_verified`` ones claim a proof."""

    RUNNING = "running"
    COMPENSATING = "compensating"
    #: An undo could not be proven (or an effect has no undo): a person must decide.
    WAITING_FOR_PERSON = "waiting_for_person"
    #: A fresh check of every invariant passed after the agent said it was done.
    SUCCEEDED_VERIFIED = "succeeded_verified"
    #: Every finished step was undone newest-first and each undo was checked in effect.
    COMPENSATED_VERIFIED = "compensated_verified"
    #: Stopped before any effect landed: nothing to undo.
    ABORTED_CLEAN = "aborted_clean"
    #: A named person closed a job whose undo could not be proven. Never "verified".
    RESOLVED_BY_PERSON = "resolved_by_person"


# -- the job ---------------------------------------------------------------------------


@dataclass(frozen=True)
class UndoSpec:
    """The compensator (registered with ``@compensator``) that undoes a step, and its arguments.

    An argument is a literal, or a reference: ``$result.<path>`` (the step's result),
    ``$args.<path>`` (the step's own arguments), ``$facts.<path>`` (the job's facts).
    """

    handler: str
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def prebound(self) -> bool:
        """Known before the forward call (no ``$result`` reference): it can undo an UNKNOWN step."""
        return not any(ref.split(".", 1)[0] == "$result" for ref in references(self.args))


@dataclass(frozen=True)
class StepSpec:
    """One step the agent may choose: a registered effect, its semantics, its undo."""

    name: str
    semantics: str  # an ActionSemantics value, checked when the manifest is loaded
    tool: str = ""  # the registered effect; the step's name when empty
    description: str = ""
    args: dict[str, Any] = field(default_factory=dict)  # literals and $facts references
    after: list[str] = field(default_factory=list)  # steps that must be done first
    undo: UndoSpec | None = None

    @property
    def effect(self) -> str:
        return self.tool or self.name


@dataclass(frozen=True)
class Limits:
    """Bounds the workflow enforces whatever the agent proposes."""

    max_turns: int = 20
    max_refusals: int = 3
    min_confidence: float = 0.0
    effect_attempts: int = 2  # runs of one step's effect, each after a reconciler said "did not land"
    undo_attempts: int = 3  # runs of one undo, each after its check said "not in effect"
    step_timeout_seconds: float = 60.0
    heartbeat_seconds: float = 10.0  # a worker silent this long is presumed dead


@dataclass(frozen=True)
class JobSpec:
    """A validated ``saga.yaml``: what the workflow runs."""

    name: str
    goal: str
    steps: list[StepSpec]
    invariants: list[str]
    facts: dict[str, Any] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    tags: list[str] = field(default_factory=list)
    #: The choice that ends the forward part by checking the invariants afresh. Last, with a
    #: default, so that a job recorded before it existed still decodes (and replays) the same.
    finish: str = FINISH

    def step(self, name: str) -> StepSpec:
        for spec in self.steps:
            if spec.name == name:
                return spec
        raise KeyError(name)


# -- references ---------------------------------------------------------------------------


class Unresolvable(Exception):
    """A reference that cannot be filled in yet (a ``$result`` of a step whose result is unknown)."""


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def _is_ref(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("$") and not value.startswith("$$")


def references(template: Any) -> list[str]:
    """Every ``$source.path`` reference in ``template``, in order."""
    return [v for v in _leaves(template) if _is_ref(v)]


def _lookup(root: Any, path: list[str], ref: str) -> Any:
    value = root
    for part in path:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise Unresolvable(f"{ref}: no {part!r} in {_shape(value)}")
    return value


def _shape(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(sorted(map(str, value))) + "}"
    return type(value).__name__


def resolve_refs(template: Any, sources: Mapping[str, Any]) -> Any:
    """``template`` with every ``$source.path`` replaced from ``sources``; ``$$`` escapes a ``$``.

    A source that is absent from ``sources`` (``result`` of a step whose result was
    never seen) raises :class:`Unresolvable`, never a guess.
    """
    if isinstance(template, Mapping):
        return {k: resolve_refs(v, sources) for k, v in template.items()}
    if isinstance(template, list):
        return [resolve_refs(v, sources) for v in template]
    if isinstance(template, str) and template.startswith("$$"):
        return template[1:]
    if _is_ref(template):
        head, *path = template[1:].split(".")
        if head not in sources:
            raise Unresolvable(f"{template}: the {head} is not known")
        return _lookup(sources[head], path, template)
    return template


# -- proposals ----------------------------------------------------------------------------


@dataclass(frozen=True)
class StepOption:
    """A complete step the agent may choose now: nothing in it is for the agent to fill in."""

    choice: str
    args: dict[str, Any]
    semantics: str
    description: str


@dataclass(frozen=True)
class Proposal:
    """The agent's pick, with how sure it is (0..1)."""

    choice: str
    args: dict[str, Any] = field(default_factory=dict)
    confidence: float = 1.0
    reason: str = ""


@dataclass(frozen=True)
class ProposalRecord:
    """One turn: what was proposed and whether the workflow accepted it."""

    turn: int
    choice: str
    args: dict[str, Any]
    confidence: float
    reason: str
    accepted: bool
    rule: str = ""  # why it was refused: not_allowed, forged_args, low_confidence, malformed, gate
    refusal: str = ""


@dataclass(frozen=True)
class Situation:
    """What the decision driver sees on one turn, and nothing more."""

    saga_id: str
    turn: int
    goal: str
    facts: dict[str, Any]
    done: list[str]
    options: list[StepOption]
    refusals: list[ProposalRecord]

    @property
    def finish(self) -> str:
        """The job's finishing choice: always the last option offered."""
        return self.options[-1].choice if self.options else FINISH


def allowed_options(job: JobSpec, done: Iterable[str]) -> list[StepOption]:
    """The steps not yet done whose prerequisites are, with their arguments filled in, then finish."""
    finished = set(done)
    options = []
    for spec in job.steps:
        if spec.name in finished or not all(d in finished for d in spec.after):
            continue
        args = resolve_refs(spec.args, {"facts": job.facts})
        options.append(StepOption(spec.name, args, spec.semantics, spec.description))
    options.append(StepOption(job.finish, {}, "REVERSIBLE", "the goal is reached: check the invariants"))
    return options


def judge(proposal: Any, options: list[StepOption], limits: Limits) -> tuple[str, str] | None:
    """Why ``proposal`` is refused, as ``(rule, reason)``; None when it may run.

    Only an exact copy of an offered option passes: its choice, and arguments equal
    to the option's (a forged, added or missing argument is refused), with a
    confidence in [0, 1] not below the job's minimum.
    """
    if not isinstance(proposal, Proposal) or not isinstance(proposal.choice, str):
        return "malformed", f"a proposal must be a Proposal with a text choice, got {proposal!r}"
    offered = {o.choice: o for o in options}
    option = offered.get(proposal.choice)
    if option is None:
        allowed = ", ".join(offered) or "none"
        return "not_allowed", f"{proposal.choice!r} is not among the steps allowed now ({allowed})"
    if not isinstance(proposal.args, Mapping) or not _same(proposal.args, option.args):
        return "forged_args", (
            f"the arguments of {proposal.choice!r} must be exactly the offered ones "
            f"{option.args!r}, got {proposal.args!r}"
        )
    confidence = proposal.confidence
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not math.isfinite(confidence) \
            or not 0.0 <= confidence <= 1.0:
        return "malformed", f"confidence must be a number from 0 to 1, got {confidence!r}"
    if confidence < limits.min_confidence:
        return "low_confidence", f"confidence {confidence} is below the job's minimum {limits.min_confidence}"
    return None


def _same(a: Any, b: Any) -> bool:
    # Canonical JSON, not ==: in Python True == 1 and 4200 == 4200.0, and a forged
    # argument must not pass as the offered one.
    try:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    except (TypeError, ValueError):
        return False


# -- what the activities take and give ------------------------------------------------------


@dataclass(frozen=True)
class GateVerdict:
    """The pre-flight gate's answer about one step (or about starting the job)."""

    allowed: bool
    reason: str = ""
    rule: str = ""


@dataclass(frozen=True)
class AdmitCall:
    """The job asking the gate whether it may start at all (a drain or a halt says no)."""

    saga_id: str
    name: str
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class EffectCall:
    """One run of a step's forward effect (or the question whether it landed)."""

    saga_id: str
    step: int
    name: str
    tool: str
    semantics: str
    args: dict[str, Any]
    key: str  # the idempotency key, the same on every run of this step
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class UndoCall:
    """One run of a compensator (or the question whether its undo is in effect)."""

    saga_id: str
    step: int
    handler: str
    kwargs: dict[str, Any]
    key: str


@dataclass(frozen=True)
class Answer:
    """A reconciler's :class:`agent_saga.Observation` as it travels through history."""

    exists: bool | None = None
    reversed_: bool | None = None
    detail: str = ""
    result: Any = None


@dataclass(frozen=True)
class InvariantCall:
    saga_id: str
    names: list[str]
    facts: dict[str, Any]
    results: dict[str, Any]  # step name -> its result


@dataclass(frozen=True)
class InvariantResult:
    name: str
    holds: bool | None  # None: could not tell, which never counts as holding
    detail: str = ""


# -- what the workflow reports -----------------------------------------------------------


@dataclass(frozen=True)
class Resolution:
    """A person's decision on a job waiting for one: ``accept`` what stands, or ``retry`` the undo."""

    decision: str
    by: str
    note: str = ""

    def problem(self) -> str:
        """Why this resolution cannot be acted on ('' when it can)."""
        if self.decision not in ("accept", "retry"):
            return f"decision must be 'accept' or 'retry', got {self.decision!r}"
        if not isinstance(self.by, str) or not self.by.strip():
            return "by must name the person who decides"
        return ""


@dataclass
class StepReport:
    """One step the job ran, and what the unwind did with it."""

    step: int
    name: str
    tool: str
    semantics: str
    state: str  # committed | unknown | not_applied
    key: str
    args: dict[str, Any]
    result: Any = None
    reconciled: str = ""  # the reconciler's detail when it settled a lost reply
    outcome: str = ""  # compensated | kept | orphaned | unresolved | unproven ('' while standing)
    detail: str = ""
    undo_handler: str = ""
    undo_key: str = ""
    undo_attempts: int = 0


@dataclass(frozen=True)
class JobEvent:
    """One thing the workflow did, numbered in the order it did it (``seq`` from 1).

    ``kind`` is one of :data:`EVENT_KINDS`; ``step`` names the step, undo handler or
    finishing choice it concerns ('' for the job as a whole); ``detail`` is the outcome
    in a few words. Recorded as it happens, so the report of a running job holds the
    events so far; the names are the workflow's own, never text from the agent.
    """

    seq: int
    kind: str
    step: str = ""
    detail: str = ""


#: The kinds of :class:`JobEvent`, in the order a job meets them.
EVENT_KINDS = (
    "saga_started",  # admitted by the gate
    "proposal_recorded",  # a turn's proposal and the judgement (accepted, or the rule that refused it)
    "effect_outcome_recorded",  # one run of a step's effect: committed, failed (unknown) or not_applied
    "reconciliation_recorded",  # the step's reconciler answered: landed, not landed, cannot tell
    "invariant_evaluated",  # the fresh check of every invariant, under the finishing choice's name
    "compensation_recorded",  # one run of an undo and the check that followed
    "escalated",  # waiting for a person
    "resolution_recorded",  # a person's decision
    "terminal_assigned",  # the job's end status
)


@dataclass
class JobReport:
    """The job as the workflow sees it: its status query and its result."""

    saga_id: str
    name: str
    status: str = Status.RUNNING.value
    cause: str = ""
    proposals: list[ProposalRecord] = field(default_factory=list)
    steps: list[StepReport] = field(default_factory=list)
    undo_order: list[str] = field(default_factory=list)
    checks: list[InvariantResult] = field(default_factory=list)
    waiting: str = ""
    resolutions: list[Resolution] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # resolutions that could not be acted on, and why
    events: list[JobEvent] = field(default_factory=list)  # the timeline, numbered from 1
