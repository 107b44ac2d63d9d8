"""The reconciliation pass: ask the outside systems what the log's effects really are.

The log ends at an API's answer: a refund that returned 200 is written down as
compensated. This pass does not take that answer's word. For every effect a log
records (every step with an intent, and a REVERSIBLE one that has a reconciler), it
asks the ``@reconciler`` registered under the tool's name whether the effect landed,
and the one registered under its undo's handler name whether the undo is in effect,
then compares what the systems say with what the saga's outcome requires:

* **confirmed** — the world agrees with the log (a refunded charge, a step that never
  landed, a completed saga's effect standing);
* **drift** — it does not: an undo that reported success while the effect still
  stands, a timed-out call that DID land in a rolled-back saga and was never undone,
  a committed effect the system has no trace of;
* **unverifiable** — no reconciler is registered, it could not tell, it failed or it
  timed out. Never counted as confirmed;
* **skipped** — the saga has not ended (running, or waiting for the recovery daemon).

Run it later than the saga, not inline: payment and CRM APIs are eventually
consistent, and a read right after a write reports drift that is only latency. The
pass only reads: it writes nothing to the log. It refuses a log whose hash chain
does not verify (an edited log could hide an effect) unless told to trust it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_saga.engine.invoke import accepts_idempotency_key
from agent_saga.inert import inert
from agent_saga.log.chain import ChainUnverified
from agent_saga.log.codec import BodyCipher
from agent_saga.log.records import RecordType as R
from agent_saga.recovery.fold import LogTail, SagaView, StepView
from agent_saga.recovery.in_doubt import ASK_TIMEOUT, ask
from agent_saga.registry import reconciler_for
from agent_saga.semantics import Observation

__all__ = ["Finding", "ReconciliationReport", "reconcile"]

CONFIRMED, DRIFT, UNVERIFIABLE, SKIPPED = "confirmed", "drift", "unverifiable", "skipped"


@dataclass(frozen=True, slots=True)
class Finding:
    """What the pass concluded about one effect (one step of one saga)."""

    saga: str
    step: int
    tool: str
    status: str  # confirmed | drift | unverifiable | skipped
    message: str
    expected: str = ""  # what the log's outcome requires: reversed | absent | standing | any | undone
    observed: str = ""  # what the systems say: standing | reversed | absent | unknown
    amount: Any = None
    detail: str = ""  # the reconcilers' own words

    def line(self) -> str:
        amount = f" (amount={inert(self.amount)})" if self.amount is not None else ""
        return (f"[{self.status.upper()}] saga {inert(self.saga)} step {self.step} {inert(self.tool)}: "
                f"{inert(self.message)}{amount}")

    def to_dict(self) -> dict[str, Any]:
        amount = self.amount if _jsonable(self.amount) else repr(self.amount)
        return {
            "saga": self.saga, "step": self.step, "tool": self.tool, "status": self.status,
            "message": self.message, "expected": self.expected, "observed": self.observed,
            "amount": amount, "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class ReconciliationReport:
    """Every finding of one pass over one log, and the verdict."""

    log: str
    findings: tuple[Finding, ...]
    sagas: int = 0
    chain: str = "intact"
    _by: dict[str, list[Finding]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by: dict[str, list[Finding]] = {s: [] for s in (CONFIRMED, DRIFT, UNVERIFIABLE, SKIPPED)}
        for finding in self.findings:
            by[finding.status].append(finding)
        object.__setattr__(self, "_by", by)

    @property
    def drift(self) -> list[Finding]:
        return list(self._by[DRIFT])

    @property
    def unverifiable(self) -> list[Finding]:
        return list(self._by[UNVERIFIABLE])

    @property
    def confirmed(self) -> list[Finding]:
        return list(self._by[CONFIRMED])

    @property
    def skipped(self) -> list[Finding]:
        return list(self._by[SKIPPED])

    @property
    def clean(self) -> bool:
        """Every effect was checked and agrees with the log (an empty log is clean)."""
        return not (self._by[DRIFT] or self._by[UNVERIFIABLE] or self._by[SKIPPED])

    @property
    def exit_code(self) -> int:
        """0 clean; 1 drift; 3 something could not be verified (and nothing drifted)."""
        if self._by[DRIFT]:
            return 1
        return 0 if self.clean else 3

    @property
    def verdict(self) -> str:
        if self._by[DRIFT]:
            return "DRIFT"
        if self.clean:
            return "clean"
        return "nothing could be verified" if not self._by[CONFIRMED] else "NOT fully verified"

    def summary(self) -> str:
        counts = ", ".join(f"{len(self._by[s])} {s}" for s in (CONFIRMED, DRIFT, UNVERIFIABLE, SKIPPED))
        return (f"reconciled {len(self.findings)} effect(s) in {self.sagas} saga(s) of {inert(self.log)}: "
                f"{counts}; {self.verdict}")

    def format_text(self) -> str:
        lines = [f.line() for f in self.findings]
        if self.chain != "intact":
            lines.insert(0, f"WARNING: the log's chain does not verify ({inert(self.chain)}); reconciled anyway")
        lines.append(self.summary())
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {
            "log": self.log, "chain": self.chain, "sagas": self.sagas, "clean": self.clean,
            "verdict": self.verdict, "exit_code": self.exit_code,
            "counts": {s: len(self._by[s]) for s in (CONFIRMED, DRIFT, UNVERIFIABLE, SKIPPED)},
            "findings": [f.to_dict() for f in self.findings],
        }


def reconcile(
    wal_path: str | os.PathLike[str],
    *,
    timeout: float = ASK_TIMEOUT,
    trust_unverified: bool = False,
    encryptor: BodyCipher | None = None,
) -> ReconciliationReport:
    """Ask the registered reconcilers about every effect the log at ``wal_path`` records.

    Import the modules that declare your ``@reconciler`` functions first (the
    connectors register theirs on import). Each question is bounded by ``timeout``
    seconds. Raises FileNotFoundError / WALCorrupt for a missing or unreadable log,
    and ChainUnverified for a chain that does not verify unless ``trust_unverified``.
    """
    path = Path(wal_path)
    tail = LogTail(path, encryptor=encryptor)
    tail.refresh()
    verdict = tail.verdict
    if not verdict.ok and not trust_unverified:
        raise ChainUnverified.refusing(
            path, verdict, "reconcile it",
            "investigate, then pass trust_unverified=True (--trust-unverified) to reconcile it anyway",
        )
    findings: list[Finding] = []
    sagas = 0
    for view in tail.sagas.values():
        if not view.started:
            continue
        sagas += 1
        for index in sorted(view.steps):
            step = view.steps[index]
            if _is_effect(step):
                findings.append(_judge(view, step, timeout))
    return ReconciliationReport(str(path), tuple(findings), sagas, verdict.label if not verdict.ok else "intact")


def _is_effect(step: StepView) -> bool:
    """A step whose effect may exist outside the process: it had an intent, or a reconciler asks about it."""
    return step.intent or (step.committed and step.tool is not None and reconciler_for(step.tool) is not None)


def _expected(view: SagaView, step: StepView) -> str:
    """What the log's outcome requires of the world for this effect."""
    if step.compensated:
        return "reversed"
    if step.not_applied:
        return "absent"
    if view.ended == R.SAGA_COMPLETED or step.settled == "kept" or step.semantics == "IRREVERSIBLE":
        # Meant to stay. A step UNKNOWN to the log claims nothing either way.
        return "standing" if step.committed else "any"
    return "undone"  # its saga rolled back: whether or not the log knew it landed, it must not stand


def _judge(view: SagaView, step: StepView, timeout: float) -> Finding:
    tool = step.tool or "?"
    expected = _expected(view, step)

    def finding(status: str, message: str, observed: str = "", seen: tuple[Observation, ...] = ()) -> Finding:
        amount = next((o.amount for o in seen if o.amount is not None), None)
        detail = "; ".join(o.detail for o in seen if o.detail)
        return Finding(view.saga_id, step.index, tool, status, message, expected, observed, amount, detail)

    if view.open:
        return finding(SKIPPED, "its saga has not ended (running, or waiting for recovery): not reconciled")
    if step.tool is None:
        return finding(UNVERIFIABLE, "its records cannot be read here (encrypted without the key, or redacted): "
                                     "there is nothing to ask about", "unknown")
    forward = reconciler_for(tool)
    comp = step.compensation or {}
    handler = comp.get("handler") if isinstance(comp.get("handler"), str) else None
    kwargs = comp.get("kwargs")
    undo = reconciler_for(handler) if handler is not None and isinstance(kwargs, Mapping) else None
    if forward is None and undo is None:
        names = f"{tool!r}" + (f" or its undo {handler!r}" if handler else "")
        return finding(UNVERIFIABLE, f"no @reconciler is registered for {names}; import the module that "
                                     "declares one (every shipped connector registers its own)", "unknown")

    seen: list[Observation] = []
    fwd = undone = None
    if forward is not None:
        fwd = ask(forward, {**(step.args or {}), "idempotency_key": step.op}, timeout)
        seen.append(fwd)
    if undo is not None and isinstance(kwargs, Mapping) and (fwd is None or fwd.exists is not False):
        asked = dict(kwargs)
        if accepts_idempotency_key(undo) and isinstance(comp.get("key"), str):
            asked["idempotency_key"] = comp["key"]
        undone = ask(undo, asked, timeout)
        seen.append(undone)
    exists = _first(fwd.exists if fwd else None, undone.exists if undone else None)
    reversed_ = _first(undone.reversed_ if undone else None, fwd.reversed_ if fwd else None)
    undo_ran = step.compensated or step.compensation_started > 0
    if exists is False:
        observed = "absent"
    elif reversed_ is True:
        observed = "reversed"
    elif exists is True and (reversed_ is False or not undo_ran):
        observed = "standing"
    else:
        observed = "unknown"
    status, message = _verdict(expected, observed, step)
    return finding(status, message, observed, tuple(seen))


def _verdict(expected: str, observed: str, step: StepView) -> tuple[str, str]:
    if observed == "unknown":
        return UNVERIFIABLE, "the system could not tell (or the check failed or timed out)"
    if observed == "standing":
        if expected in ("standing", "any"):
            return CONFIRMED, "landed and is standing" + (" (the log did not know)" if expected == "any" else "")
        if expected == "reversed":
            return DRIFT, "its undo reported success, but the effect is still standing"
        if expected == "absent":
            return DRIFT, "the log says it did not happen, but it landed and is standing"
        why = "its undo kept failing" if step.compensation_failed else "it was never compensated"
        lost = "timed-out step DID land and " if not step.committed else ""
        return DRIFT, f"{lost}is still standing in a saga that rolled back: {why}"
    if expected == "standing":
        if observed == "reversed":
            return DRIFT, "its saga completed, but the effect has been reversed"
        return DRIFT, "the log says it took effect, but the system has no trace of it"
    if observed == "reversed":
        return CONFIRMED, "reversed: its undo is in effect"
    return CONFIRMED, "not there: it never landed, or its undo removed it"


def _first(*values: bool | None) -> bool | None:
    return next((v for v in values if v is not None), None)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
