"""Surgical repair: an operator continues a dead or quarantined saga instead of unwinding it.

All-or-nothing stays the default; this is the escape hatch, built so that it never
becomes a hole in the guarantee:

* ``RepairSession.open`` refuses a saga that is live (its owner's lease is held),
  finished, unwinding, or being repaired or recovered by another process right now
  (it takes the same claim the recovery daemon takes, on every backend), and a saga
  whose kept steps could not be undone any more: every retained COMPENSABLE step
  needs a registry-backed undo (a handler name and JSON kwargs any process can run).
  Each offending step is named; nothing is retained on a warning.
* Every act is a record on the saga's own hash-chained log: REPAIR_OPENED (who, why,
  what is kept), REPAIR_AMENDED (each field's old and new value), then REPAIR_RESUMED
  (the retained steps, with their undos, now belong to the continuing saga, whose id
  it names) or REPAIR_ABANDONED (handed back: the daemon unwinds it as usual).
* Each of those records is signed by the operator's key (``signer=``, one the host
  trusts, ``log.attestation``) and names the session it belongs to. The agent writes
  the log, so a repair record it wrote is only a claim: an unsigned one (or one signed
  by a key the host does not trust, or a copy of an old session's) is not a repair,
  and the daemon recovers the saga as if none were open (``recovery.fold``).
* ``resume`` runs the operator's continuation in a fresh saga whose stack holds the
  retained steps, undos rebuilt from the log: a failure after the repair unwinds the
  whole transaction, retained steps included, newest first, exactly once.

While a signed session is open the daemon leaves the saga alone: it holds the claim, and
the log says so (a session whose process died is taken over by the next ``open``). One
whose claim is free, or that has been open for more than ``REPAIR_STALE_TTLS`` times the
saga's lease ttl, is escalated as ``repair-stale`` (``recovery.daemon``).
This is not ``runtime._repair_turn`` (the model's one repair turn on a malformed call).
See docs/REPAIR.md.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_saga.context import saga_scope
from agent_saga.engine.saga import Saga
from agent_saga.engine.saga_options import SagaOptions
from agent_saga.engine.state import Step
from agent_saga.errors import ConfigurationError, SagaError
from agent_saga.ids import new_saga_id
from agent_saga.inert import inert
from agent_saga.log.attestation import OperatorKey
from agent_saga.log.base import WAL
from agent_saga.log.codec import BodyCipher
from agent_saga.log.default import log_argument
from agent_saga.log.encodable import unencodable
from agent_saga.log.records import RecordType as R
from agent_saga.log.resolve import backend_of, default_target
from agent_saga.log.rewrite import operator_signer
from agent_saga.notekeys import ANONYMOUS, approver_name
from agent_saga.recovery.daemon import owner_expiry
from agent_saga.recovery.escalations import escalation_id
from agent_saga.recovery.fold import SagaView, StepView
from agent_saga.recovery.protocols import ClaimLike, RecoveryStore
from agent_saga.recovery.stores import recovery_store, verified_tail
from agent_saga.redaction import redact_args
from agent_saga.registry import registered
from agent_saga.semantics import ActionSemantics, Compensation, StepState

__all__ = ["RepairClosed", "RepairPlan", "RepairRefused", "RepairSession", "RetainedStep"]

Continuation = Callable[[Saga, dict[str, Any]], Awaitable[Any]]


class RepairRefused(SagaError):
    """The saga cannot be repaired (now): the message names why, and each offending step."""

    def __init__(self, message: str, blockers: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.blockers = blockers


class RepairClosed(SagaError):
    """The session was already resumed, abandoned or closed."""


@dataclass(frozen=True, slots=True)
class RetainedStep:
    """A step the repair keeps: it stays done, and its undo moves to the continuing saga."""

    step: int  # its index in the repaired saga
    tool: str
    semantics: str
    op: str | None
    compensation: dict[str, Any] | None  # as the log describes it (None: nothing to undo)

    @property
    def undo(self) -> str:
        comp = self.compensation
        if comp is None:
            return "none" if self.semantics != "REVERSIBLE" else "none (REVERSIBLE: its undo lived only in its process)"
        kwargs = comp.get("kwargs") or {}
        return f"{comp.get('handler')}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"


@dataclass(frozen=True, slots=True)
class RepairPlan:
    """What a repair of one saga would keep, what failed, and what blocks it."""

    saga_id: str
    name: str
    location: str
    retained: tuple[RetainedStep, ...]
    failed: tuple[str, ...]  # one line per step that did not take effect
    undone: tuple[int, ...]  # steps already compensated (not retained)
    blockers: tuple[str, ...]
    takes_over: str = ""  # the operator of an earlier session whose process is gone
    amendments: tuple[tuple[str, Any, Any], ...] = field(default=())  # (field, old, new)
    unsigned: tuple[str, ...] = ()  # REPAIR_* records that are only claims (recovery.fold)

    def format_text(self) -> str:
        """The plan for a person: inert (the log's text is the agent's)."""
        lines = [f"repair of saga {inert(self.saga_id)} ({inert(self.name) or 'unnamed'}) in {inert(self.location)}"]
        if self.takes_over:
            lines.append(f"  takes over {inert(self.takes_over)} whose process is gone (its claim was free)")
        lines.append(f"kept ({len(self.retained)}): done, and undone with the continuation if it fails")
        for kept in self.retained:
            lines.append(f"  step {kept.step} {inert(kept.tool)} [{kept.semantics}] undo: {inert(kept.undo)}")
        if self.undone:
            lines.append(f"already undone: step(s) {', '.join(str(i) for i in self.undone)}")
        if self.unsigned:
            lines.append(f"not repairs ({len(self.unsigned)}): a name without a trusted operator's signature is a claim")
            lines.extend(f"  {inert(line)}" for line in self.unsigned)
        lines.append(f"failed ({len(self.failed)}):")
        lines.extend(f"  {inert(line)}" for line in self.failed)
        if self.amendments:
            lines.append("amended:")
            for name, old, new in self.amendments:
                lines.append(f"  {inert(name)}: {inert(repr(old))} -> {inert(repr(new))}")
        if self.blockers:
            lines.append(f"BLOCKED ({len(self.blockers)}): this saga cannot be repaired")
            lines.extend(f"  {inert(line)}" for line in self.blockers)
        else:
            lines.append("blockers: none")
        return "\n".join(lines)


def _person(value: object, what: str) -> str:
    """An operator's name or reason: the rule approver names follow (not blank, nothing hidden)."""
    try:
        return approver_name(value)
    except ConfigurationError as err:
        if str(err) == ANONYMOUS:
            raise ConfigurationError(
                f"RepairSession: {what}= is required and must not be blank (got {value!r}): "
                "a repair says who made it and why"
            ) from None
        raise ConfigurationError(f"RepairSession: {what}= {str(err).partition(' ')[2]}") from None


def _retained(step: StepView) -> tuple[RetainedStep | None, str | None, str | None]:
    """(kept, failed line, blocker) for one step of the saga being repaired."""
    tool = step.tool or "?"
    where = f"step {step.index} {tool!r}"
    if not step.applied:
        why = step.refusal or step.error or step.state
        return None, f"{where}: {step.state}: {why}", None
    if step.compensated:
        return None, None, None
    if not step.committed:
        return None, None, (
            f"{where}: its outcome is unknown ({step.state}: {step.error or 'its process died during the call'}); "
            "settle it first (agent-saga reconcile), or abandon the repair"
        )
    comp = step.compensation
    semantics = step.semantics or "?"
    if semantics == "COMPENSABLE":
        usable = (
            comp is not None and comp.get("recoverable") is True
            and isinstance(comp.get("handler"), str) and isinstance(comp.get("kwargs"), dict)
        )
        if not usable:
            what = (step.problem or "no undo was recorded") if comp is None else (
                f"its undo {comp.get('description') or comp.get('handler')!r} is a closure, not a registered "
                "handler with JSON kwargs"
            )
            return None, None, f"{where} is COMPENSABLE but {what}: no process but the dead one could undo it"
        assert comp is not None
        if not registered(str(comp["handler"])):
            return None, None, (
                f"{where}: its undo handler {comp['handler']!r} is not registered in this process; "
                "import the module that declares it"
            )
    elif semantics in ("REVERSIBLE", "IRREVERSIBLE"):
        # An undo in process memory died with the process; a registered one is kept and runs
        # if the continuation unwinds, as the in-process rollback would have run it.
        if not (comp is not None and comp.get("recoverable") is True and isinstance(comp.get("kwargs"), dict)
                and registered(str(comp.get("handler")))):
            comp = None
    else:
        return None, None, f"{where}: its semantics cannot be read ({semantics}); the repair will not guess"
    return RetainedStep(step.index, tool, semantics, step.op, comp), None, None


def plan_of(view: SagaView, location: str, *, live_until: float | None, now: float) -> RepairPlan:
    """The repair plan of ``view`` (``live_until``: when its owner's lease runs out, grace included)."""
    blockers: list[str] = []
    if view.ended is not None:
        end = (f"continued as saga {view.continued_as} by an earlier repair" if view.continued_as
               else f"with {view.ended}")
        blockers.append(f"the saga is finished: it ended {end}")
    elif view.rollback_started:
        blockers.append("its rollback has begun (by its owner or a recovery daemon): let recovery finish it")
    if live_until is not None and view.ended is None and now <= live_until:
        blockers.append(
            f"the saga is live: its owner {view.owner or '?'} holds its lease for another "
            f"{live_until - now:.0f}s; stop that process, or wait for the lease to run out"
        )
    if view.ignored:
        blockers.append(f"record(s) seq {', '.join(map(str, view.ignored))} fail their own hash check")
    if view.unreadable:
        blockers.append("some of its records carry no readable body (encrypted without the key here, or redacted)")
    retained: list[RetainedStep] = []
    failed: list[str] = []
    undone: list[int] = []
    for index in sorted(view.steps):
        step = view.steps[index]
        if step.compensated:
            undone.append(index)
        kept, failure, blocker = _retained(step)
        if kept is not None:
            retained.append(kept)
        if failure is not None:
            failed.append(failure)
        if blocker is not None:
            blockers.append(blocker)
    return RepairPlan(view.saga_id, view.name, location, tuple(retained), tuple(failed), tuple(undone),
                      tuple(blockers), unsigned=tuple(view.unsigned_repairs))


def _log_of(records: Any, saga_id: str, wal: WAL | None) -> str | os.PathLike[str] | WAL:
    """The log a repair reads and writes: ``wal=``, the log ``records`` is, or, for bare records, the default log.

    Bare records (``list(read_records(path))``, as the seed passes them) do not say which log they
    came from, and the claim and the REPAIR_* records must live with that log: without ``wal=``
    they go to the default log (``$AGENT_SAGA_WAL``, else ./agent-saga.wal), which must hold the saga.
    """
    target = wal if wal is not None else records
    if isinstance(target, (str, os.PathLike, WAL)):
        return target
    try:
        sagas = {record["saga"] for record in records}
    except (TypeError, KeyError):
        raise TypeError(
            f"RepairSession: records must be a log (its path, URL or WAL) or its records (dicts as read_records "
            f"gives them), got {type(records).__name__}"
        ) from None
    if saga_id not in sagas:
        raise RepairRefused(f"no saga {saga_id} in the records given: give its full id (agent-saga graph lists them)")
    target = default_target()
    if backend_of(target) == "file" and not os.path.exists(target):  # else "no log at" would blame the records
        raise RepairRefused(
            f"records do not say which log they came from, and the default log {target} ($AGENT_SAGA_WAL, else "
            "./agent-saga.wal) does not exist: pass wal= the log they were read from"
        )
    return target


class RepairSession:
    """An operator's repair of one saga; make one with :meth:`open`.

    ``format_text()`` shows the plan, ``amend(**fields)`` records corrections, then
    ``await resume(continuation, wal=...)`` or ``abandon(reason=...)`` ends it.
    """

    def __init__(
        self, store: RecoveryStore, claim: ClaimLike, view: SagaView, the_plan: RepairPlan,
        operator: str, reason: str, key: OperatorKey, session: str, encryptor: BodyCipher | None = None,
    ) -> None:
        self._store = store
        self._key = key
        #: This session's id: every record it writes names it, under the operator's signature.
        self.session = session
        self._encryptor = encryptor
        self._claim: ClaimLike | None = claim
        self._view = view
        self._plan = the_plan
        self.operator = operator
        self.reason = reason
        self.saga_id = view.saga_id
        self.amendments: dict[str, Any] = {}
        self._amended: list[tuple[str, Any, Any]] = []
        self.state = "open"  # open | resumed | abandoned | closed
        #: The id of the saga that continues this one (set by resume).
        self.continued_as: str | None = None

    # -- opening ---------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        records: Any,
        saga_id: str,
        *,
        operator: str,
        reason: str,
        signer: str | os.PathLike[str] | OperatorKey | None = None,
        wal: WAL | None = None,
        lease_grace: float = 5.0,
        clock: Callable[[], float] = time.time,
        encryptor: BodyCipher | None = None,
    ) -> RepairSession:
        """Claim ``saga_id`` for repair and record REPAIR_OPENED, or raise RepairRefused saying why.

        ``records`` is the log (a path, a URL, a WAL) or its records; for bare records the
        claim and the session's records go to ``wal=``, else to the default log (see ``_log_of``). ``signer`` is the
        operator's key (its file's path) that signs every record of the session; it must
        be one the host trusts (``/etc/agent-saga/operator-keys``), or nothing is
        opened. ``lease_grace`` is the daemon's: a lease counts as held until
        ``lease_grace`` after it runs out.
        """
        operator = _person(operator, "operator")
        reason = _person(reason, "reason")
        key = operator_signer(signer, "a repair")
        if not isinstance(saga_id, str) or not saga_id.strip():
            raise ConfigurationError(f"RepairSession.open: saga_id must be a saga's id, got {saga_id!r}")
        store = recovery_store(_log_of(records, saga_id, wal), encryptor)
        try:
            claim = store.try_claim(saga_id)
        except BaseException:
            store.close()
            raise
        if claim is None:
            store.close()
            raise RepairRefused(
                f"saga {saga_id} is being repaired or recovered by another process right now (its claim "
                f"on {store.location} is held); try again once that session ends"
            )
        try:
            view, the_plan = _read(store, saga_id, encryptor, lease_grace, clock)
            if the_plan.blockers:
                raise RepairRefused(
                    f"saga {saga_id} cannot be repaired: " + "; ".join(the_plan.blockers), the_plan.blockers
                )
            session = secrets.token_hex(16)
            log = store.open_wal()
            ticket = log.append(R.REPAIR_OPENED.value, saga_id, key.sign_saga(R.REPAIR_OPENED.value, saga_id, {
                "operator": operator, "reason": reason, "session": session,
                "retained": [kept.step for kept in the_plan.retained],
                **({"takes_over": the_plan.takes_over} if the_plan.takes_over else {}),
            }), None)
            log.barrier(ticket)
        except BaseException:
            claim.release()
            store.close()
            raise
        return cls(store, claim, view, the_plan, operator, reason, key, session, encryptor)

    @staticmethod
    def plan(
        records: Any, saga_id: str, *, wal: WAL | None = None, lease_grace: float = 5.0,
        clock: Callable[[], float] = time.time, encryptor: BodyCipher | None = None,
    ) -> RepairPlan:
        """What a repair of ``saga_id`` would keep and what blocks it; claims and records nothing."""
        store = recovery_store(_log_of(records, saga_id, wal), encryptor)
        try:
            return _read(store, saga_id, encryptor, lease_grace, clock)[1]
        finally:
            store.close()

    # -- the session -----------------------------------------------------------------

    @property
    def retained(self) -> tuple[RetainedStep, ...]:
        return self._plan.retained

    def format_text(self) -> str:
        """What is kept, what failed, what was amended, any blockers (inert text)."""
        head = f"operator {inert(self.operator)}: {inert(self.reason)} [{self.state}]"
        body = RepairPlan(
            self._plan.saga_id, self._plan.name, self._plan.location, self._plan.retained, self._plan.failed,
            self._plan.undone, self._plan.blockers, self._plan.takes_over, tuple(self._amended), self._plan.unsigned,
        ).format_text()
        return f"{body}\n{head}"

    def amend(self, **fields: Any) -> None:
        """Record each field's new value, with its old one (the newest step's argument of that name)."""
        self._check_open()
        for name, value in fields.items():
            unfit = unencodable(value, name)
            if unfit is not None:
                raise ConfigurationError(f"RepairSession.amend: {unfit}; amend with JSON values only")
        log = self._store.open_wal()
        for name, value in fields.items():
            old, seen = self._old_value(name)
            logged = redact_args({"old": {name: old}, "new": {name: value}})
            ticket = log.append(R.REPAIR_AMENDED.value, self.saga_id, self._signed(R.REPAIR_AMENDED, {
                "operator": self.operator, "field": name, "old": logged["old"][name], "new": logged["new"][name],
                "seen_in": seen,
            }), None)
            log.barrier(ticket)
            self._amended.append((name, old, value))
            self.amendments[name] = value

    def _old_value(self, name: str) -> tuple[Any, str]:
        if name in self.amendments:
            return self.amendments[name], "an earlier amendment"
        for step in self._view.newest_first():
            if step.args is not None and name in step.args:
                return step.args[name], f"step {step.index}"
        return None, "nowhere (a new field)"

    async def resume(
        self, continuation: Continuation, *, wal: WAL | str | os.PathLike[str], options: SagaOptions | None = None
    ) -> Any:
        """Run ``continuation(saga, amendments)`` in a fresh saga holding the retained steps; its result.

        ``wal`` must be the repaired saga's own log (a WAL, or its path or URL). If the continuation fails, the
        boundary unwinds the whole transaction (its own steps, then the retained
        ones, newest first) and raises SagaAborted, as any saga does.
        """
        self._check_open()
        if not callable(continuation):
            raise ConfigurationError(
                f"RepairSession.resume: continuation must be an async callable (saga, amendments), got {continuation!r}"
            )
        wal = self._same_log(wal)
        self._unchanged()
        new_id = new_saga_id()
        steps = [self._rebuilt(new_id, number, kept) for number, kept in enumerate(self.retained, start=1)]
        retained = [
            {"step": number, "from_step": kept.step, "tool": kept.tool, "semantics": kept.semantics,
             "op": kept.op, "compensation": kept.compensation}
            for number, kept in enumerate(self.retained, start=1)
        ]
        scope = saga_scope(wal, options=options, saga_id=new_id) if options is not None else saga_scope(
            wal, saga_id=new_id, name=self._view.name or "repair"
        )
        try:
            async with scope as saga:
                # Durable before the stack holds them: a crash in between leaves them with the old saga.
                ticket = wal.append(R.REPAIR_RESUMED.value, self.saga_id, self._signed(R.REPAIR_RESUMED, {
                    "operator": self.operator, "reason": self.reason, "continued_as": new_id,
                    "retained": retained, "amended": sorted(self.amendments),
                }), None)
                wal.barrier(ticket)
                self.state, self.continued_as = "resumed", new_id
                saga.preload(steps)
                return await continuation(saga, dict(self.amendments))
        finally:
            if self.state == "resumed":
                self._release(finished=True)

    def abandon(self, *, reason: str) -> None:
        """Hand the saga back: REPAIR_ABANDONED, then the daemon unwinds it as usual (quarantined or not)."""
        self._check_open()
        why = _person(reason, "reason")
        log = self._store.open_wal()
        ticket = log.append(R.REPAIR_ABANDONED.value, self.saga_id,
                            self._signed(R.REPAIR_ABANDONED, {"operator": self.operator, "reason": why}), None)
        log.barrier(ticket)
        self.state = "abandoned"
        self._release(finished=False)

    def close(self) -> None:
        """Let the claim go without ending the session: the log still says it is open (re-open to end it)."""
        if self.state == "open":
            self.state = "closed"
        self._release(finished=False)

    def __enter__(self) -> RepairSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ---------------------------------------------------------------------

    def _signed(self, rtype: R, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` of this session, signed by its operator's key for this saga."""
        return self._key.sign_saga(rtype.value, self.saga_id, {**body, "session": self.session})

    def _check_open(self) -> None:
        if self.state != "open":
            raise RepairClosed(f"the repair session on saga {self.saga_id} is {self.state}; open a new one")

    def _unchanged(self) -> None:
        """Refuse to resume a saga whose owner wrote to it after the session opened (it was not dead)."""
        tail = self._store.tail(self._encryptor)
        tail.refresh()
        now = tail.sagas.get(self.saga_id)
        if now is None or now.owner_ts != self._view.owner_ts or now.ended is not None:
            raise RepairRefused(
                f"saga {self.saga_id} changed since this session opened (its owner wrote to it, or it ended): "
                "nothing was resumed; abandon this session and open a new one to see what it did"
            )

    def _release(self, *, finished: bool) -> None:
        claim, self._claim = self._claim, None
        if claim is not None and self.state in ("resumed", "abandoned"):
            try:  # the daemon may have asked a person to finish this session: it is finished
                self._store.escalations().resolve(
                    escalation_id(self.saga_id, None, "repair-stale"), f"the repair was {self.state} by {self.operator}"
                )
            except KeyError:
                pass  # nobody was asked
        if claim is not None:
            if finished:  # continued elsewhere: its owner's lease says nothing any more (the daemon's rule)
                self._store.remove_lease(self.saga_id)
            claim.release(remove=finished)
        self._store.close()

    def _same_log(self, given: object) -> WAL:
        """The log ``wal=`` names (a WAL, or a path or URL as --wal-path takes it), checked to be the saga's."""
        wal = log_argument(given)
        if wal is None:
            raise ConfigurationError(
                f"RepairSession.resume: wal= must be the saga's log (a WAL, its path or URL), got {given!r}"
            )
        path = getattr(wal, "path", None)
        mine = getattr(self._store, "path", None)
        same = (Path(path).absolute() == mine) if isinstance(path, Path) and isinstance(mine, Path) else (
            str(wal.location) == self._store.location
        )
        if not same:
            raise ConfigurationError(
                f"RepairSession.resume: wal= is {wal.location}, but saga {self.saga_id} lives in "
                f"{self._store.location}; the continuation must write to the same log"
            )
        return wal

    @staticmethod
    def _rebuilt(saga_id: str, index: int, kept: RetainedStep) -> Step:
        """A retained step as the continuing saga's stack holds it: its undo rebuilt from the log."""
        comp = kept.compensation
        undo = None if comp is None else Compensation(
            handler=str(comp["handler"]), kwargs=dict(comp["kwargs"]),
            description=str(comp.get("description") or ""), idempotency_key=comp.get("key"),
        )
        step = Step(saga_id, index, kept.tool, ActionSemantics(kept.semantics), StepState.COMMITTED, undo,
                    undo_declared=undo is not None)
        return step


def _read(
    store: RecoveryStore, saga_id: str, encryptor: BodyCipher | None, lease_grace: float,
    clock: Callable[[], float],
) -> tuple[SagaView, RepairPlan]:
    """The saga's view (from a chain-checked read of its log) and its plan; refused if it cannot be read."""
    tail = verified_tail(store, encryptor, "a repair", RepairRefused)
    view = tail.sagas.get(saga_id)
    if view is None or not view.started:
        raise RepairRefused(f"no saga {saga_id} in {store.location}: give its full id (agent-saga graph lists them)")
    lease = store.read_lease(saga_id)
    the_plan = plan_of(view, store.location, live_until=owner_expiry(view, lease) + lease_grace, now=clock())
    if view.repairing:
        # The claim was free, so the session that opened it has no process any more.
        return view, RepairPlan(
            the_plan.saga_id, the_plan.name, the_plan.location, the_plan.retained, the_plan.failed,
            the_plan.undone, the_plan.blockers, takes_over=f"an earlier session signed by {view.repair_signer}",
            unsigned=the_plan.unsigned,
        )
    return view, the_plan

