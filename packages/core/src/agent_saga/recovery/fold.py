"""Fold a log into per-saga state, reading it incrementally and checking its chain.

The daemon re-reads the log after every claim (another daemon may have just
finished the saga), so the reader keeps its offset and only decodes what was
appended since. A final line is consumed once it parses (the log's final-line
rule, ``agent_saga.log.lines``); a fragment still being written, or torn by a
crash, waits, and the records before it stand on their own.

Every record is checked against the hash chain as it is folded
(``agent_saga.log.chain``; ``CheckedFold``, which the tail of a server log
shares): ``LogTail.verdict`` says whether what was read verifies, and a record
that fails its own hash or digest check (edited, or a plain line forged into a
chained log) is never folded at all: it is listed in its saga's ``ignored``
instead, whoever later decides to trust the log.

``LogTail`` reads a file log; ``ServerTail`` reads a Postgres or Redis log the
same way, past the last sequence number it has seen.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_saga.errors import WALCorrupt, WALError
from agent_saga.log.attestation import SIGNATURE_FIELD, OperatorKeys
from agent_saga.log.chain import Attestations, ChainChecker, VerifyReport
from agent_saga.log.codec import BodyCipher, decode_line
from agent_saga.log.fs import open_regular
from agent_saga.log.lines import Line, ReadMark, iter_lines, parses
from agent_saga.log.parts import part_of, spanning_end
from agent_saga.log.records import AUDIT_SAGA, Record
from agent_saga.log.records import RecordType as R
from agent_saga.log.resolve import ServerWAL
from agent_saga.log.server import open_stored

__all__ = [
    "DEFAULT_LEASE_TTL", "CheckedFold", "Folder", "LogTail", "SagaView", "ServerTail", "SignalView", "StepView",
    "WaitView", "durable_blocker", "fold", "repair_operator",
]

#: Lease length assumed for a saga whose start record does not state one.
DEFAULT_LEASE_TTL = 30.0
#: Reads of a server log a compaction or redaction may interrupt before the tail gives up.
_REWRITE_TRIES = 5
_CHUNK = 1 << 22

_OUTCOMES = frozenset({R.STEP_COMMITTED.value, R.STEP_UNKNOWN.value})
# Written for a saga by others: a daemon's claim, a signal anyone may send, a person's finding
# and the answer to an escalation (a person, a daemon, or the owner, which writes its own steps too).
_NOT_OWNER = frozenset({R.RECOVERY_CLAIMED.value, R.EVENT_SIGNALLED.value, R.STEP_SETTLED.value,
                        R.ESCALATION_RESOLVED.value})
# What a daemon escalates about a run it holds for a person without claiming it: written by the
# daemon, not the owner, so it must not make the dead owner look alive for one more lease (a
# resume-unknown, held then settled, was not resumed by the next sweep within that lease).
_DAEMON_ESCALATIONS = frozenset({"repair-stale", "repair-unsigned", "resume-unknown", "resume-unavailable"})
_SETTLED = {
    R.STEP_COMPENSATED.value: "compensated",
    R.STEP_ORPHANED.value: "orphaned",
    R.STEP_UNRESOLVED.value: "unresolved",
    R.STEP_KEPT.value: "kept",
}


@dataclass(slots=True)
class StepView:
    """What the log says about one step."""

    index: int
    tool: str | None = None
    semantics: str | None = None
    op: str | None = None
    intent: bool = False
    committed: bool = False
    unknown: bool = False
    not_applied: bool = False
    refused: bool = False
    refusal: str = ""  # "<rule>: <reason>" of a STEP_REFUSED record (what the pictures show)
    note: str = ""  # the runtime's verdict on the call: a repair request or a thrash stop (pictures too)
    intent_compensation: dict[str, Any] | None = None
    committed_compensation: dict[str, Any] | None = None
    unknown_compensation: dict[str, Any] | None = None
    problem: str = ""
    #: What the forward returned, as its commit record holds it (``agent_saga.log.results``):
    #: the redacted value, or ``{"$shape": ...}``. ``has_result`` is False when the record holds
    #: none (``record_result="none"``, a log written before results were recorded, a redaction).
    result: Any = None
    has_result: bool = False
    error: str = ""  # what the call raised, as its STEP_UNKNOWN or STEP_NOT_APPLIED record says
    args: dict[str, Any] | None = None  # the call's logged arguments (what a reconciler is asked about)
    recipe: dict[str, Any] | None = None  # how to build the undo from a result (intent record)
    facts: str = ""  # what a reconciler answered, for escalations (set by the daemon, not the log)
    asked_in_recovery: bool = False  # a daemon already asked its reconciler (RECONCILE_ANSWERED with "by")
    settled: str | None = None  # compensated | orphaned | unresolved | kept (latest)
    compensation_started: int = 0
    compensation_failed: int = 0
    served: bool = False  # a resumed run took it from the log (STEP_SERVED): nothing ran for it then
    #: Its saga's rollback ended while it was in flight (STEP_UNRESOLVED ``in_flight``), or its
    #: outcome was recorded after the saga rolled back: it is settled when it lands (``late_open``).
    left: bool = False
    escalated: set[str] = field(default_factory=set)  # escalation kinds already in the log

    @property
    def compensated(self) -> bool:
        return self.settled == "compensated"

    @property
    def late_open(self) -> bool:
        """A step left in flight whose effect may exist and is not settled yet.

        Either it landed and its process died before settling it, or it never landed (its
        process died with it in flight: the saga's lease, held until every left step lands,
        ran out). An undo that failed when it landed was escalated there: that settles it for
        the daemon, as a failed undo in the agent's own rollback does.
        """
        return self.left and self.applied and self.settled is None and self.compensation_failed == 0

    @property
    def applied(self) -> bool:
        """Whether the effect may exist: committed, unknown, or in flight (intent only)."""
        if self.not_applied or (self.refused and not self.intent):
            return False
        return self.committed or self.unknown or self.intent

    @property
    def state(self) -> str:
        """committed | unknown | in-flight | not-applied | refused."""
        if self.not_applied:
            return "not-applied"
        if self.committed:
            return "committed"
        if self.unknown:
            return "unknown"
        if self.intent:
            return "in-flight"
        return "refused" if self.refused else "unknown"

    @property
    def compensation(self) -> dict[str, Any] | None:
        """The undo to run: the one derived from the result, else the one known before the call."""
        if self.committed and self.committed_compensation is not None:
            return self.committed_compensation
        return self.unknown_compensation or self.intent_compensation


@dataclass(slots=True)
class WaitView:
    """What the log says about one durable wait (a sleep, or a wait for an event) of a run."""

    until: float | None = None  # its wake-up time (seconds since the epoch); None: no timeout
    outcome: str | None = None  # "woke" | "signalled" | "timed_out" once WAIT_ENDED says so
    signal: int | None = None  # the seq of the EVENT_SIGNALLED record it took ("signalled")


@dataclass(frozen=True, slots=True)
class SignalView:
    """One EVENT_SIGNALLED record of a saga: the event's name, its JSON data, who sent it."""

    name: str
    data: Any
    by: str


@dataclass(slots=True)
class SagaView:
    """What the log says about one saga."""

    saga_id: str
    name: str = ""
    owner: str = ""
    lease_ttl: float | None = None  # as SAGA_STARTED states it (None: not stated, or unreadable)
    started: bool = False
    first_ts: int = 0  # microseconds
    last_ts: int = 0
    owner_ts: int = 0  # the last record written before any daemon claimed the saga
    ended: str | None = None  # SAGA_COMPLETED | SAGA_ROLLED_BACK
    rollback_started: bool = False
    recovered_by: list[str] = field(default_factory=list)
    dead_lettered: bool = False
    quarantined: bool = False
    unreadable: bool = False  # some body could not be read (encrypted, redacted)
    steps: dict[int, StepView] = field(default_factory=dict)
    escalated: set[str] = field(default_factory=set)  # saga-level escalation kinds
    ignored: list[int] = field(default_factory=list)  # seqs of its records that failed their own check
    #: A merged mesh log (agent_saga.mesh): each device that wrote to the saga -> how its part ended
    #: (None: not yet). Empty for any other log.
    parts: dict[str, str | None] = field(default_factory=dict)
    repairing: bool = False  # an operator's repair session is open on it (REPAIR_OPENED, not yet ended)
    continued_as: str = ""  # the saga a resumed repair moved its retained steps to (REPAIR_RESUMED)
    repair_of: str = ""  # the saga this one continues (it holds that saga's retained steps)
    #: The open session (its id, the key that signed it, when it opened in microseconds), and every
    #: session this saga has seen: a REPAIR_* record counts only signed, and only in its own session.
    repair_session: str = ""
    repair_signer: str = ""
    repair_opened_us: int = 0
    repair_sessions: set[str] = field(default_factory=set)
    #: REPAIR_* records that are only claims (unsigned, signed by a key this host does not trust,
    #: replayed or out of their session): one line each, "seq N TYPE by OPERATOR (unsigned): why".
    unsigned_repairs: list[str] = field(default_factory=list)
    #: An unsigned REPAIR_RESUMED said this saga was continued elsewhere (its effects kept on
    #: purpose): not believed, so the saga is not over, and not undone blindly either (a repair
    #: resumed before repairs were signed reads the same): the daemon asks a person. Its line.
    unsigned_end: str = ""
    #: A ``@durable`` run (agent_saga.durable_run): its entry, inputs and on_crash, as SAGA_STARTED holds them.
    durable: dict[str, Any] | None = None
    resumed_by: list[str] = field(default_factory=list)  # each SAGA_RESUMED's resumer, oldest first
    diverged: bool = False  # a resume found the code asking for other calls (SAGA_DIVERGED)
    result: Any = None  # what a durable run's entry returned, as SAGA_COMPLETED records it
    #: A durable run's waits by (kind, name, n), and the signals sent to it by their records' seq.
    waits: dict[tuple[str, str, int], WaitView] = field(default_factory=dict)
    signals: dict[int, SignalView] = field(default_factory=dict)

    #: Steps left in flight by its rollback (``StepView.left``).
    left: set[int] = field(default_factory=set)

    @property
    def open(self) -> bool:
        """Started and not ended, or rolled back with a step left in flight that is not settled yet."""
        return self.started and (self.ended is None or any(self.steps[i].late_open for i in self.left))

    def late_open(self) -> list[StepView]:
        """The steps left in flight by its rollback that wait to be settled, newest first."""
        return [self.steps[i] for i in sorted(self.left, reverse=True) if self.steps[i].late_open]

    def step(self, index: int) -> StepView:
        view = self.steps.get(index)
        if view is None:
            view = self.steps[index] = StepView(index)
        return view

    def newest_first(self) -> list[StepView]:
        return [self.steps[i] for i in sorted(self.steps, reverse=True)]


def durable_blocker(
    view: SagaView | None, saga_id: str, location: str, *, not_durable: str, ended: str, unwinding: str
) -> str | None:
    """Why ``view`` is no ``@durable`` run still going on (None: it is one); one line.

    A run can be resumed or take a signal only while so; each caller says what each reason
    means for it: ``not_durable`` and ``ended`` follow a colon, ``unwinding`` follows "is being unwound".
    """
    if view is None or not view.started:
        return f"no saga {saga_id} in {location}: give its full id (agent-saga graph lists them)"
    if view.durable is None:
        return f"saga {saga_id} was not started by a @durable entry point: {not_durable}"
    if view.ended is not None:
        return f"saga {saga_id} already ended ({view.ended}): {ended}"
    if view.rollback_started or view.diverged:
        return f"saga {saga_id} is being unwound{unwinding}"
    return None


def _compensation(body: dict[str, Any]) -> dict[str, Any] | None:
    comp = body.get("compensation")
    return comp if isinstance(comp, dict) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _waited(view: SagaView, rtype: str, body: dict[str, Any], seq: Any) -> None:
    """A durable wait's start or end (engine/waits.py), or a signal sent to the saga."""
    name = body.get("name")
    if not isinstance(name, str):
        return
    if rtype == R.EVENT_SIGNALLED:
        if isinstance(seq, int):
            view.signals[seq] = SignalView(name, body.get("data"), str(body.get("by", "")))
        return
    kind, n = body.get("wait"), body.get("n")
    if not isinstance(kind, str) or not isinstance(n, int) or isinstance(n, bool):
        return
    wait = view.waits.setdefault((kind, name, n), WaitView())
    if rtype == R.WAIT_STARTED:
        wait.until = _number(body.get("until"))
    elif isinstance(body.get("outcome"), str):
        wait.outcome = body["outcome"]
        signal = body.get("signal")
        wait.signal = signal if isinstance(signal, int) and not isinstance(signal, bool) else None


class _Folder:
    def __init__(self, keys: OperatorKeys | None = None) -> None:
        self.sagas: dict[str, SagaView] = {}
        self._keys = keys  # the host's trusted operator keys, read at the first REPAIR_* record

    @property
    def keys(self) -> OperatorKeys:
        if self._keys is None:
            self._keys = OperatorKeys.load()
        return self._keys

    def view(self, saga_id: str) -> SagaView:
        view = self.sagas.get(saga_id)
        if view is None:
            view = self.sagas[saga_id] = SagaView(saga_id)
        return view

    def feed(self, record: Record) -> None:
        saga_id = record.get("saga")
        if not isinstance(saga_id, str) or saga_id == AUDIT_SAGA:
            return
        rtype = str(record.get("type"))
        view = self.view(saga_id)
        part = part_of(record)
        if part:
            view.parts.setdefault(part, None)
        ts = record.get("ts")
        if isinstance(ts, int):
            view.first_ts = view.first_ts or ts
            view.last_ts = max(view.last_ts, ts)
        raw = record.get("body")
        if not isinstance(raw, dict):
            # An encrypted or redacted body: the record's type is known, its content is not.
            view.unreadable = True
            raw = {}
        body: dict[str, Any] = raw
        # A daemon's (or a repairing operator's) records are not signs of life from the owner.
        # Nor is a signal, a person's finding about a step, or an escalation answered (_NOT_OWNER).
        by_owner = not view.recovered_by and rtype not in _NOT_OWNER and not rtype.startswith("REPAIR_") and not (
            rtype == R.ESCALATED and body.get("kind") in _DAEMON_ESCALATIONS
        )
        if isinstance(ts, int) and by_owner:
            view.owner_ts = max(view.owner_ts, ts)
        if rtype.startswith("APPROVAL_") or rtype == R.STEP_ADVISORY:
            # About a step that has not started: its own records (intent, refusal) say if it ever did.
            return
        index = record.get("step")
        step = view.step(index) if isinstance(index, int) else None

        if rtype == R.SAGA_STARTED:
            view.started = True
            view.name = str(body.get("name", ""))
            durable = body.get("durable")
            view.durable = durable if isinstance(durable, dict) else None
            self._owned(view, body)
        elif rtype == R.SAGA_RESUMED:
            # Another process took the saga over: its owner and lease are the resumer's from here.
            view.resumed_by.append(str(body.get("by", "")))
            self._owned(view, body)
        elif rtype == R.SAGA_DIVERGED:
            view.diverged = True
        elif rtype in (R.WAIT_STARTED, R.WAIT_ENDED, R.EVENT_SIGNALLED):
            _waited(view, rtype, body, record.get("seq"))
        elif rtype in (R.SAGA_COMPLETED, R.SAGA_ROLLED_BACK):
            view.ended = rtype
            view.result = body.get("result")
            if view.parts:
                view.parts[part] = rtype
        elif rtype == R.ROLLBACK_STARTED:
            view.rollback_started = True
        elif rtype == R.RECOVERY_CLAIMED:
            view.recovered_by.append(str(body.get("by", "")))
        elif rtype == R.SAGA_DEAD_LETTERED:
            view.dead_lettered = True
        elif rtype == R.SWITCH_QUARANTINED:
            view.quarantined = True
        elif rtype == R.SWITCH_RESUMED:
            view.quarantined = False
        elif rtype.startswith("REPAIR_"):
            if self._signed_repair(view, rtype, body, record):
                self._repair(view, rtype, body)
        elif rtype == R.STEP_SETTLED and step is not None:
            self._settled(step, body, record)
        elif rtype == R.ESCALATED:
            kind = str(body.get("kind", ""))
            (step.escalated if step is not None else view.escalated).add(kind)
        elif step is not None:
            self._step(step, rtype, body)
            if rtype in _OUTCOMES and view.ended == R.SAGA_ROLLED_BACK and not step.left:
                # Recorded after its saga rolled back (a process taken for dead): settled like one left in flight.
                step.left = True
                if not step.compensated:
                    step.settled = None
            if step.left:
                view.left.add(step.index)
        if view.parts and not view.continued_as:  # a resumed repair ended it, whatever its parts say
            view.ended = spanning_end(view.parts)

    def _settled(self, step: StepView, body: dict[str, Any], record: Record) -> None:
        """A person's finding about a step in doubt (``recovery.settle``): believed only signed by a trusted operator key.

        Believed, the step reads as a reconciler's answer would have left it: committed with the
        result given (served on resume), or not applied and asked about (run again live on resume).
        Unsigned, it changes nothing: the step stays in doubt, and its note says a claim was made.
        """
        who = str(body.get("operator", "?"))
        why = self.keys.saga_problem(record)
        if why:
            step.note = f"settled by {who} (unsigned, not believed): {why}"
            return
        if step.committed or step.not_applied:
            return  # settled in the log before: a later finding changes nothing
        step.asked_in_recovery = True
        if body.get("landed") is True:
            step.committed, step.committed_compensation = True, _compensation(body)
            step.problem = str(body.get("problem", ""))
            if "result" in body:
                step.result, step.has_result = body["result"], True
        else:
            step.not_applied = True
            step.error = f"settled by {who}: it did not land ({body.get('reason', '')})"

    def _signed_repair(self, view: SagaView, rtype: str, body: dict[str, Any], record: Record) -> bool:
        """Whether a REPAIR_* record is an operator's act: signed by a trusted operator key, in its session.

        The agent writes the log, so a name in it is only a claim; an operator's key it does
        not hold is proof. A REPAIR_OPENED opens a session never seen on this saga before (a
        copy of an old one opens nothing); every later record belongs to the open session. A
        record that is none of these, including every one written before repairs were signed,
        is listed in ``unsigned_repairs`` and changes nothing.
        """
        session = body.get("session")
        why = self.keys.saga_problem(record)
        if not why and not (isinstance(session, str) and session):
            why = "it names no session"
        elif not why and rtype == R.REPAIR_OPENED and session in view.repair_sessions:
            why = f"session {session} was opened before: a copy of its opening record opens nothing"
        elif not why and rtype != R.REPAIR_OPENED and session != view.repair_session:
            why = f"session {session} is not the repair open on this saga"
        if why:
            seq = record.get("seq")
            line = f"seq {seq if isinstance(seq, int) else '?'} {rtype} by {body.get('operator', '?')!s} (unsigned): {why}"
            view.unsigned_repairs.append(line)
            if rtype == R.REPAIR_RESUMED and isinstance(body.get("continued_as"), str) and not view.repairing:
                view.unsigned_end = line
            return False
        assert isinstance(session, str)
        if rtype == R.REPAIR_OPENED:
            view.unsigned_end = ""  # an operator's signed session decides now
            signed = body.get(SIGNATURE_FIELD)
            ts = record.get("ts")
            view.repair_sessions.add(session)
            view.repair_session = session
            view.repair_signer = str(signed.get("key")) if isinstance(signed, dict) else ""
            view.repair_opened_us = ts if isinstance(ts, int) else 0
        elif rtype in (R.REPAIR_ABANDONED, R.REPAIR_RESUMED):
            view.repair_session = ""
        return True

    @staticmethod
    def _owned(view: SagaView, body: dict[str, Any]) -> None:
        """Who owns the saga and for how long its lease holds, as a start (or resume) record says."""
        view.owner = str(body.get("owner", ""))
        ttl = body.get("lease_ttl")
        if isinstance(ttl, (int, float)) and ttl > 0:
            view.lease_ttl = float(ttl)

    def _repair(self, view: SagaView, rtype: str, body: dict[str, Any]) -> None:
        """An operator's signed repair session (``recovery.repair``) on this saga."""
        if rtype == R.REPAIR_OPENED:
            view.repairing = True
        elif rtype == R.REPAIR_ABANDONED:
            # Handed back: the daemon unwinds it as usual, quarantined or not.
            view.repairing = view.quarantined = False
        elif rtype == R.REPAIR_RESUMED:
            view.repairing = False
            new = body.get("continued_as")
            if not isinstance(new, str) or not new or new == view.saga_id:
                return  # a record that names no other saga moves nothing (and ends nothing)
            view.ended = rtype  # its retained steps now belong to the continuation
            view.continued_as = new
            continuation = self.view(new)
            continuation.repair_of = view.saga_id
            retained = body.get("retained")
            for kept in retained if isinstance(retained, list) else ():
                index = kept.get("step") if isinstance(kept, dict) else None
                if not isinstance(index, int) or isinstance(index, bool):
                    continue
                step = continuation.step(index)
                self._step(step, R.STEP_COMMITTED, kept)
                step.intent = True

    @staticmethod
    def _step(step: StepView, rtype: str, body: dict[str, Any]) -> None:
        if isinstance(body.get("tool"), str):
            step.tool = body["tool"]
        if isinstance(body.get("semantics"), str):
            step.semantics = body["semantics"]
        if isinstance(body.get("op"), str):
            step.op = body["op"]
        if isinstance(body.get("args"), dict):
            step.args = body["args"]
        if rtype == R.STEP_INTENT:
            step.intent = True
            step.intent_compensation = _compensation(body)
            if isinstance(body.get("recipe"), dict):
                step.recipe = body["recipe"]
        elif rtype == R.STEP_COMMITTED:
            step.committed = True
            step.committed_compensation = _compensation(body)
            step.problem = str(body.get("problem", ""))
            if "result" in body:
                step.result, step.has_result = body["result"], True
            if step.semantics is None:
                step.semantics = "REVERSIBLE"  # only REVERSIBLE commits carry no intent
        elif rtype == R.STEP_SERVED:
            step.served = True
        elif rtype == R.STEP_UNKNOWN:
            step.unknown = True
            step.unknown_compensation = _compensation(body)
            step.error = str(body.get("error", ""))
        elif rtype == R.STEP_NOT_APPLIED:
            step.not_applied = True
            step.error = str(body.get("error", ""))
        elif rtype in (R.STEP_REFUSED, R.ACTION_REPAIR_REQUESTED):  # the gate refused it: nothing ran
            step.refused = True
            step.refusal = f"{body.get('rule') or 'gate'}: {body.get('reason', '')}"
            if rtype == R.ACTION_REPAIR_REQUESTED:
                errors = body.get("errors")
                step.note = "repair requested: " + ("; ".join(str(e) for e in errors) if isinstance(errors, list) else "")
        elif rtype == R.THRASH_STOPPED:
            step.note = f"THRASH STOPPED ({body.get('pattern', '?')}): {body.get('reason', '')}"
        elif rtype == R.COMPENSATION_STARTED:
            step.compensation_started += 1
        elif rtype == R.COMPENSATION_FAILED:
            step.compensation_failed += 1
        elif rtype == R.RECONCILE_ANSWERED and "by" in body:
            step.asked_in_recovery = True
        elif rtype == R.STEP_UNRESOLVED and body.get("in_flight") is True:
            step.left = True  # the rollback stopped waiting for it: not a settlement, its outcome is to come
        elif rtype in _SETTLED and step.settled != "compensated":
            # A compensated step stays compensated whatever is written about it later.
            step.settled = _SETTLED[rtype]


def repair_operator(record: Mapping[str, Any], keys: OperatorKeys | None = None) -> str:
    """Who a REPAIR_* record says acted, with " (unsigned)" unless a trusted operator key signed it.

    For pictures and plans: a name the agent could have written is shown as a claim.
    ``keys`` default to the host's trusted operator keys.
    """
    body = record.get("body")
    name = str(body.get("operator", "?")) if isinstance(body, dict) else "?"
    return name if not (keys or OperatorKeys.load()).saga_problem(record) else f"{name} (unsigned)"


#: The fold itself, one record at a time (``feed``; ``sagas`` is the state so far): a replay
#: reads the state after each record without folding the prefix again.
Folder = _Folder


def fold(records: Any) -> dict[str, SagaView]:
    """Fold an iterable of records into saga views (keyed by saga id)."""
    folder = _Folder()
    for record in records:
        folder.feed(record)
    return folder.sagas


class _Tail:
    """What a log file's tail and a server log's tail both answer from their checked fold."""

    _fold: CheckedFold

    @property
    def sagas(self) -> dict[str, SagaView]:
        return self._fold.sagas

    @property
    def verdict(self) -> VerifyReport:
        """The chain verdict over everything read so far (``ok``: intact or empty)."""
        return self._fold.verdict


class LogTail(_Tail):
    """An incremental reader of one log file; ``refresh()`` checks and folds what was appended."""

    def __init__(self, path: str | os.PathLike[str], *, encryptor: BodyCipher | None = None) -> None:
        self.path = Path(path)
        self.encryptor = encryptor
        self._fold = CheckedFold(self.path, encryptor)
        self._offset = 0
        self._line = 0  # lines consumed
        self._unterminated = False  # the last record consumed still lacks its newline
        self._mark: ReadMark | None = None
        self.records = 0

    def refresh(self) -> int:
        """Read, check and fold every record appended since the last call; return how many.

        Raises FileNotFoundError if the log is missing (NotARegularFile for a FIFO or
        directory) and WALCorrupt if a complete line in it is not a record (a log
        that skips records is not evidence).
        """
        count = 0
        with open_regular(self.path) as fh:
            if self._mark is None or not self._mark.holds(fh):
                # Replaced (compaction renames a new file in) or cut: start over, first
                # collecting what its COMPACTION and REDACTION records attest.
                size = os.fstat(fh.fileno()).st_size
                self._fold = CheckedFold(self.path, self.encryptor, Attestations.scan(iter_lines(fh, 0, size)))
                self._offset = self._line = self.records = 0
                self._unterminated = False
            fh.seek(self._offset)
            carry = b""
            while True:
                # In chunks, so that a large log is never held in memory at once.
                chunk = fh.read(_CHUNK)
                if not chunk:
                    break
                data = carry + chunk
                end = data.rfind(b"\n")
                if end < 0:
                    carry = data
                    continue
                count += self._fold_lines(data[: end + 1])
                carry = data[end + 1 :]
            if carry.strip() and parses(carry):
                # A complete last record whose newline is not there (yet, or lost).
                count += self._fold_lines(carry, terminated=False)
            self._mark = ReadMark.take(fh, self._offset)
        self.records += count
        return count

    def _fold_lines(self, data: bytes, terminated: bool = True) -> int:
        count = 0
        lines = data.split(b"\n")
        for line in lines[:-1] if terminated else lines:
            if self._unterminated:
                self._unterminated = False
                if not line:  # the newline of the record consumed without it
                    self._offset += 1
                    continue
            self._line += 1
            if line.strip():
                self._feed(line)
                count += 1
            self._offset += len(line) + terminated
        self._unterminated = not terminated
        return count

    def _feed(self, line: bytes) -> None:
        try:
            record = decode_line(line)
        except ValueError as err:
            raise WALCorrupt(
                f"{self.path}: the line at byte {self._offset} is not a record ({err}); recovery "
                f"stops rather than guess. Run 'agent-saga verify --wal-path {self.path}'"
            ) from err
        self._fold.feed(self._line, record)


class CheckedFold:
    """Records checked against the hash chain, then folded: what every log's tail does with them.

    A record that fails its own hash or digest check is never folded, only listed
    in its saga's ``ignored``. ``attestations`` are what the log's COMPACTION and
    REDACTION records vouch for (collected before the first record is fed);
    ``where`` names the log in errors.
    """

    def __init__(
        self, where: Path | str, encryptor: BodyCipher | None = None,
        attestations: Attestations | None = None,
    ) -> None:
        self.where = where
        self.encryptor = encryptor
        self._folder = _Folder()
        self._checker = ChainChecker(attestations)

    @property
    def sagas(self) -> dict[str, SagaView]:
        return self._folder.sagas

    @property
    def verdict(self) -> VerifyReport:
        return self._checker.report()

    def feed(self, number: int, record: Record) -> None:
        """Check the ``number``-th record of the log (from 1) and fold it if it is sound on its own."""
        if not self._checker.feed(number, record):
            saga, seq = record.get("saga"), record.get("seq")
            if isinstance(saga, str) and saga != AUDIT_SAGA and isinstance(seq, int):
                self._folder.view(saga).ignored.append(seq)
            return
        if "enc" in record:
            record = self._open(record)
        self._folder.feed(record)

    def _open(self, record: Record) -> Record:
        from agent_saga.log.crypto import EncryptionKeyMissing, open_record

        try:
            return open_record(record, self.encryptor, self.where)
        except EncryptionKeyMissing:
            # Folded without a body: the saga is marked unreadable and escalated, never
            # guessed at. A *wrong* key raises: that is a broken setup, not a saga.
            return record


class ServerTail(_Tail):
    """An incremental, chain-checked fold of a server log: only records past the last seq seen are read.

    A compaction or redaction (the head's rewrite count moved) starts the fold over,
    first collecting what the log's COMPACTION and REDACTION records attest, as a
    file log's tail does when the file is replaced; one that lands while records
    are being read is caught by reading the count again afterwards. An encrypted
    record this reader has no key for is folded without its body, so its saga is
    escalated as unreadable, never guessed at.
    """

    def __init__(self, wal: ServerWAL, encryptor: BodyCipher | None = None) -> None:
        self.wal = wal
        self.encryptor = encryptor
        self._fold = CheckedFold(wal.location, encryptor)
        self._seq = 0
        self._rewrites: int | None = None
        self.records = 0

    def refresh(self) -> int:
        """Read, check and fold every record committed since the last call; return how many."""
        for _ in range(_REWRITE_TRIES):
            _, _, rewrites = self.wal.head()
            if rewrites != self._rewrites:
                lines = (Line(0, 0, line.encode(), True) for _, line in self.wal.lines_after(0))
                self._fold = CheckedFold(self.wal.location, self.encryptor, Attestations.scan(lines))
                self._seq = self.records = 0
                self._rewrites = rewrites
            count = 0
            for seq, line in self.wal.lines_after(self._seq):
                self.records += 1
                self._fold.feed(self.records, open_stored(line, self.wal.location))
                self._seq = seq
                count += 1
            if self.wal.head()[2] == rewrites:
                return count
            self._rewrites = None  # rewritten while we read: what was read may mix two versions
        raise WALError(
            f"{self.wal.location}: the log was compacted or redacted during each of {_REWRITE_TRIES} reads; "
            "recover it at a quieter time"
        )

