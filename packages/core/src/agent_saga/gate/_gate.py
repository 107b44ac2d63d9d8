"""The pre-flight gate: the one place a step can be refused before anything happened.

Order of evaluation, cheapest "no" first, and each for a reason:

1. kill switch -- a halted system spends no budget and wakes no human;
1b. the call's shape (``repair=``, then ``thrash=``) -- a malformed, repeated or
   oscillating call is refused before it takes a breaker probe or a budget;
2. circuit breaker -- a call to a dependency known to be down consumes no budget;
3. limits -- all-or-nothing debit; a call over budget never reaches a human;
4. rules -- block, approve or allow (IRREVERSIBLE needs approval by default); an
   ADVISE rule that matches is written to the log (STEP_ADVISORY) and refuses nothing;
5. approval -- one request to the provider for every reason at once.

Any refusal after the limits debited hands that debit back (a refusal is the
one outcome where the effect certainly did not happen); once the step is allowed
the debit is permanent, whatever the step then does.

The kill switch is asked again at the last moment: after a human's approval (a
halt pulled while they decided refuses the step, and hands the debit back), and
by the engine immediately before every forward attempt (``recheck``), retries
included. Undos ask ``check_undo``: only a halt that names the undo's own tool
stops one (see docs/GATE.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agent_saga.engine.ports import SagaInfo, StepRequest
from agent_saga.errors import ConfigurationError, StepRefused
from agent_saga.gate import _breaker as _breaker_module
from agent_saga.gate._approval import ApprovalDecision, ApprovalProvider, ApprovalRequest
from agent_saga.gate._breaker import CircuitBreaker, get_breaker
from agent_saga.gate._limits import Limit, check_limits
from agent_saga.gate._rules import Action, Rule, evaluate_rules
from agent_saga.gate._stores import Charge, LimitStore, Receipt, StoreUnavailable, get_limit_store
from agent_saga.gate._switch import (
    KillSwitch,
    changed_settings,
    default_switch,
    switch_posture,
    switch_settings,
)
from agent_saga.log.base import WAL
from agent_saga.log.default import log_argument
from agent_saga.log.records import RecordType
from agent_saga.semantics import ActionSemantics

__all__ = ["CallCheck", "DefaultGate", "PreFlightGate", "install_default_gate"]

_NO_RECEIPT = Receipt()
_IRREVERSIBLE = ActionSemantics.IRREVERSIBLE


@runtime_checkable
class CallCheck(Protocol):
    """A check of the call itself, before any budget: ``RepairPolicy``, ``ThrashPolicy``.

    ``check`` returns to let the call go on, or raises ``StepRefused`` (``RepairRequested``
    for one more try, ``SagaStopped`` to end the saga).
    """

    def check(self, request: StepRequest) -> None: ...


@dataclass(slots=True)
class _Pending:
    """A step that passed the cheap checks and may still need a human."""

    request: StepRequest
    probe: bool
    receipt: Receipt
    approval: ApprovalRequest | None
    escalated: tuple[Charge, ...]


class PreFlightGate:
    """Budgets, rate limits, rules and approvals, behind the kill switch and the breaker.

    ``switch``/``breaker``/``store`` default to the process-wide ones
    (``default_switch()``, ``set_breaker``, ``set_limit_store``), looked up at each
    call so that installing one later takes effect. ``wal`` receives breaker
    records when the breaker has no log of its own.
    """

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        *,
        limits: Iterable[Limit] = (),
        approval_provider: ApprovalProvider | None = None,
        breaker: CircuitBreaker | None = None,
        switch: KillSwitch | None = None,
        store: LimitStore | None = None,
        wal: WAL | str | os.PathLike[str] | None = None,
        repair: CallCheck | None = None,
        thrash: CallCheck | None = None,
    ) -> None:
        self.rules = tuple(rules)
        for label, given in (("repair", repair), ("thrash", thrash)):
            if given is not None and not isinstance(given, CallCheck):
                raise ConfigurationError(
                    f"{label}= takes an object with check(request), e.g. {label}="
                    f"{'RepairPolicy(schemas={...})' if label == 'repair' else 'ThrashPolicy()'}, got {given!r}"
                )
        self.repair = repair
        self.thrash = thrash
        self._calls = tuple(c for c in (repair, thrash) if c is not None)
        for rule in self.rules:
            if not isinstance(rule, Rule):
                raise ConfigurationError(
                    f"rules= takes Rule objects, e.g. Rule('big-wire', arg_exceeds('amount', 10_000)), got {rule!r}"
                )
            if rule.then is Action.ADVISE and wal is None:
                # An advisory nobody can read later is no advisory: say so now, not never.
                raise ConfigurationError(
                    f"rule {rule.name!r} advises, and its note goes to the log: pass wal= (the sagas' log) "
                    "to PreFlightGate"
                )
        self.limits = tuple(limits)
        check_limits(self.limits)
        if approval_provider is not None and not isinstance(approval_provider, ApprovalProvider):
            raise ConfigurationError(
                "approval_provider= must have request_approval(request) and "
                f"async request_approval_async(request) methods, got {approval_provider!r}"
            )
        self.approval_provider = approval_provider
        self._breaker = breaker
        self._switch = switch
        self._store = store
        self.wal = log_argument(wal)  # a log, or a path or URL as --wal-path takes it
        if breaker is not None and breaker.wal is None and self.wal is not None:
            breaker.wal = self.wal

    @property
    def switch(self) -> KillSwitch:
        return self._switch or default_switch()

    @property
    def breaker(self) -> CircuitBreaker | None:
        return self._breaker or get_breaker()

    @property
    def store(self) -> LimitStore:
        return self._store or get_limit_store()

    # -- GatePort ----------------------------------------------------------------------

    def admit(self, saga: SagaInfo) -> None:
        self.switch.admit(saga)

    def posture(self) -> dict[str, Any]:
        """Which kill switch this gate obeys: the engine writes it into every saga's start record."""
        return switch_posture(self)

    def posture_since(self, known: Any) -> tuple[Any, dict[str, Any] | None]:
        """Whether the switch this gate obeys changed since ``known`` (None: the first ask).

        Returns the new token and, when it changed, the body of the record that says
        so: the posture before and after and the settings that moved it. This gate
        looks the process-wide switch up at every step, so a changed
        ``AGENT_SAGA_SWITCH``, ``AGENT_SAGA_HOST_ROOT`` or ``set_switch`` takes
        effect mid-saga; the engine writes the record into the saga's log.
        """
        switch = self._switch or default_switch()
        if known is not None and known[0] is switch:
            return known, None  # the common case: one lookup and one identity test
        token = (switch, switch_settings(), switch_posture(self))
        if known is None:
            return token, None
        return token, {"from": known[2], "to": token[2], "source": changed_settings(known[1], token[1])}

    def recheck(self, request: StepRequest) -> None:
        """The last word before a forward attempt: the kill switch only (never waits, never debits)."""
        try:
            (self._switch or default_switch()).check(request)
        except StepRefused:
            _release_probe(self._breaker or get_breaker(), request)
            raise

    def check_undo(self, request: StepRequest) -> None:
        """Before each attempt of an undo: refused only by a halt that names its tool."""
        (self._switch or default_switch()).check_undo(request)

    def check_speculation(self, request: StepRequest) -> None:
        """May this call run ahead of the agent (a guess, before it asked)? Raises StepRefused if not.

        Only a REVERSIBLE step, under a switch that lets it run, a breaker that is closed for
        it, and rules that would let it through without a person: a guess never takes a
        breaker's trial call, never waits for an approval and never debits a budget (the
        agent's own call, when it comes, is checked and debited like any other).
        """
        _reversible_only(request)
        (self._switch or default_switch()).check(request)
        # repair= and thrash= are not asked: they judge (and remember) the agent's calls, and a
        # guess is not one; the agent's own call meets them.
        _breaker_closed(self._breaker or get_breaker(), request)
        if self.limits:
            raise StepRefused(request.tool, "limits are set: a guess does not spend a budget", "speculation")
        outcome = evaluate_rules(self.rules, request)
        if outcome.action is not Action.ALLOW:
            rule = outcome.rules[0]
            raise StepRefused(request.tool, f"not speculated: {rule.describe()}", rule.name)

    def check(self, request: StepRequest) -> None:
        pending = self._prepare(request)
        if pending is None or pending.approval is None:
            return
        provider = self.approval_provider
        with self._refused_if_the_wait_fails(pending):
            decision = provider.request_approval(pending.approval) if provider is not None else None
        self._decide(pending, decision)
        self._after_wait(pending)

    async def check_async(self, request: StepRequest) -> None:
        pending = self._prepare(request)
        if pending is None or pending.approval is None:
            return
        provider = self.approval_provider
        with self._refused_if_the_wait_fails(pending):
            decision = await provider.request_approval_async(pending.approval) if provider is not None else None
        self._decide(pending, decision)
        self._after_wait(pending)

    @contextmanager
    def _refused_if_the_wait_fails(self, pending: _Pending) -> Iterator[None]:
        """The approval wait of both faces: a provider that fails refuses the step, its holds handed back."""
        assert pending.approval is not None
        try:
            yield
        except Exception as err:
            self._refuse(pending)
            raise StepRefused(pending.request.tool, f"approval failed, so the step is refused: {err}",
                              pending.approval.rule) from err
        except BaseException:
            self._refuse(pending)
            raise

    def _after_wait(self, pending: _Pending) -> None:
        """A halt pulled while a human decided stops the step, and hands its debit back."""
        try:
            (self._switch or default_switch()).check(pending.request)
        except BaseException:
            self._refuse(pending)
            raise

    def observe(self, request: StepRequest, error: BaseException | None) -> None:
        breaker = self._breaker or get_breaker()
        if breaker is not None:
            breaker.observe(request, error)

    # -- the stages ----------------------------------------------------------------------

    def _prepare(self, request: StepRequest) -> _Pending | None:
        """Switch, breaker, limits, rules; None when the step may simply go."""
        (self._switch or default_switch()).check(request)
        for call_check in self._calls:
            call_check.check(request)
        breaker = self._breaker or get_breaker()
        probe = breaker.before(request) if breaker is not None else False
        if not self.limits and not self.rules and request.semantics is not _IRREVERSIBLE:
            return None
        receipt = _NO_RECEIPT
        try:
            receipt, escalated, reasons = self._debit(request)
            try:
                outcome = evaluate_rules(self.rules, request)
                if outcome.advice:
                    self._advise(request, outcome.advice)
                if outcome.action is Action.BLOCK:
                    rule = outcome.rules[0]
                    raise StepRefused(request.tool, rule.describe(), rule.name)
                if outcome.action is Action.APPROVE:
                    reasons = [(r.name, r.describe()) for r in outcome.rules] + reasons
            except BaseException:
                self._hand_back(receipt)
                raise
        except BaseException:
            if probe and breaker is not None:
                breaker.release(request)
            raise
        approval = None
        if reasons:
            approval = ApprovalRequest(
                request, reasons[0][0], reasons[0][1], tuple(reasons),
                tuple(c.key for c in escalated),
            )
        return _Pending(request, probe, receipt, approval, escalated)

    def _advise(self, request: StepRequest, rules: tuple[Rule, ...]) -> None:
        """One STEP_ADVISORY record per matching ADVISE rule, under the step's own number.

        Queued, not awaited: the step's intent (or its commit) makes it durable. A note
        that cannot be computed is recorded as such; an advisory never stops a step.
        """
        wal = self.wal
        assert wal is not None  # checked when the gate was built
        for rule in rules:
            body: dict[str, Any] = {"tool": request.tool, "rule": rule.name, "advisory": True}
            try:
                note = rule.note(request) if rule.note is not None else {"reason": rule.describe()}
            except Exception as err:  # noqa: BLE001 - advice that fails is recorded, never raised
                note = {"error": f"{type(err).__name__}: {err}"}
            if note is None:
                continue
            body["note"] = dict(note)
            wal.append(RecordType.STEP_ADVISORY.value, request.saga_id, body, request.step)

    def _debit(self, request: StepRequest) -> tuple[Receipt, tuple[Charge, ...], list[tuple[str, str]]]:
        charges: list[Charge] = []
        owners: list[Limit] = []
        for limit in self.limits:
            charge = limit.charge(request)  # raises StepRefused for an unreadable amount or scope
            if charge is not None:
                charges.append(charge)
                owners.append(limit)
        if not charges:
            return _NO_RECEIPT, (), []
        store = self.store
        try:
            result = store.debit(charges)
        except StoreUnavailable as err:
            raise StepRefused(
                request.tool, f"limit store unreachable, so the budget cannot be checked: {err}",
                owners[0].rule,
            ) from err
        if result.refused is not None:
            limit, charge = owners[result.refused], charges[result.refused]
            raise StepRefused(
                request.tool,
                f"over limit {limit.name!r}: {result.total:g} used of {limit.max_total:g} in the last "
                f"{limit.window:g}s, this call needs {charge.amount:g}",
                limit.rule,
            )
        escalated = tuple(charges[i] for i in result.deferred)
        reasons = [
            (owners[i].rule, f"over limit {owners[i].name!r} ({owners[i].max_total:g} per {owners[i].window:g}s); "
             "escalated to a human") for i in result.deferred
        ]
        return result.receipt, escalated, reasons

    def _decide(self, pending: _Pending, decision: ApprovalDecision | None) -> None:
        assert pending.approval is not None
        request, rule = pending.request, pending.approval.rule
        if decision is None:
            self._refuse(pending)
            raise StepRefused(
                request.tool,
                f"{pending.approval.reason}: needs a human's approval and no approval_provider is configured",
                rule,
            )
        if not isinstance(decision, ApprovalDecision) or decision.approved is not True:
            self._refuse(pending)
            who = getattr(decision, "approver", None) or "the approver"
            note = getattr(decision, "note", "")
            raise StepRefused(request.tool, f"denied by {who}" + (f": {note}" if note else ""), rule)
        if pending.escalated:
            forced = [Charge(c.key, c.max_total, c.window, c.amount, "force") for c in pending.escalated]
            try:
                result = self.store.debit(forced)
            except StoreUnavailable as err:
                self._refuse(pending)
                raise StepRefused(request.tool, f"limit store unreachable after approval: {err}", rule) from err
            pending.receipt = pending.receipt + result.receipt

    def _refuse(self, pending: _Pending) -> None:
        self._hand_back(pending.receipt)
        breaker = self.breaker
        if pending.probe and breaker is not None:
            breaker.release(pending.request)

    def _hand_back(self, receipt: Receipt) -> None:
        if receipt.entries:
            try:
                self.store.refund(receipt)
            except StoreUnavailable:
                # Cannot hand it back: the window stays debited, which errs toward
                # spending less, never more.
                pass

    def __repr__(self) -> str:
        return (
            f"PreFlightGate(rules={len(self.rules)}, limits={[lim.name for lim in self.limits]}, "
            f"approval_provider={self.approval_provider!r})"
        )


class DefaultGate:
    """The gate a saga gets when nobody configured one: the kill switch, and a breaker if set.

    It deliberately enforces no rules or limits -- in particular it does *not*
    hold IRREVERSIBLE steps for approval, which would block working code the day
    the library is upgraded. An operator's halt, though, reaches every process
    on the host with no setup at all. Configure a :class:`PreFlightGate` for policy.
    """

    #: Its check never waits (no human, nothing to await): the engine calls it inline.
    never_waits = True

    def __init__(self, switch: KillSwitch | None = None) -> None:
        # Resolved once per saga (install_default_gate gives each saga its own
        # DefaultGate), so a step pays for no environment lookup.
        self.switch = switch or default_switch()

    def admit(self, saga: SagaInfo) -> None:
        self.switch.admit(saga)

    def posture(self) -> dict[str, Any]:
        """Which kill switch this gate obeys: the engine writes it into every saga's start record."""
        return switch_posture(self)

    def check(self, request: StepRequest) -> None:
        self.switch.check(request)
        breaker = _breaker_module._breaker
        if breaker is not None:
            breaker.before(request)

    def recheck(self, request: StepRequest) -> None:
        """The last word before a forward attempt: the kill switch again."""
        try:
            self.switch.check(request)
        except StepRefused:
            _release_probe(_breaker_module._breaker, request)
            raise

    def check_undo(self, request: StepRequest) -> None:
        """Before each attempt of an undo: refused only by a halt that names its tool."""
        self.switch.check_undo(request)

    def check_speculation(self, request: StepRequest) -> None:
        """May this call run ahead of the agent? Only a REVERSIBLE one the switch and breaker let run."""
        _reversible_only(request)
        self.switch.check(request)
        _breaker_closed(_breaker_module._breaker, request)

    async def check_async(self, request: StepRequest) -> None:
        self.check(request)

    def observe(self, request: StepRequest, error: BaseException | None) -> None:
        breaker = _breaker_module._breaker
        if breaker is not None:
            breaker.observe(request, error)

    def __repr__(self) -> str:
        return "DefaultGate()"


def _reversible_only(request: StepRequest) -> None:
    if request.semantics is not ActionSemantics.REVERSIBLE:
        raise StepRefused(
            request.tool,
            f"only a REVERSIBLE step may be speculated; {request.tool!r} is {request.semantics.value}",
            "speculation",
        )


def _breaker_closed(breaker: CircuitBreaker | None, request: StepRequest) -> None:
    """Refuse a guess at a dependency whose breaker is open, or half open (its trial call is the agent's)."""
    if breaker is not None and breaker.before(request):
        breaker.release(request)
        raise StepRefused(request.tool, "its breaker is half open: the trial call is the agent's", "speculation")


def _release_probe(breaker: CircuitBreaker | None, request: StepRequest) -> None:
    # A trial call the breaker let through will not run: free its slot (a no-op for any other call).
    if breaker is not None:
        breaker.release(request)


def install_default_gate() -> None:
    """Give every saga not given a gate its own :class:`DefaultGate` (done by ``import agent_saga``)."""
    from agent_saga.context import set_default_gate

    set_default_gate(_new_default_gate)


def _new_default_gate() -> DefaultGate:
    return DefaultGate()
