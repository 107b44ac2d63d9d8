"""The recovery daemon: finish what a dead process left half done.

One sweep folds the log into saga states and, for every saga that started,
has no end record and whose owner's lease has expired:

1. claims it (``claims``), re-reads the log and the ledger, checks again;
2. walks its steps newest-first and, per step, compensates it through the
   handler the log names (with the recorded idempotency key), or skips it when
   it is already compensated (log or ledger), or escalates it. The undo runs
   through the executor the agent's own rollback uses (``engine.undo_run``: the
   halt, the kwargs check, credentials, the key, the records), one attempt per sweep;
3. writes everything it did into the same log, chained, and ends the saga
   with ``SAGA_ROLLED_BACK`` unless something newer blocks the older steps.

What blocks (the older steps stay put, the saga stays open): an undo that
exists but cannot run here (its handler is not imported) or keeps failing.
LIFO order exists because an older step's undo may depend on the newer one
having been undone first, so running it early could fail or do harm.
A halt that names an undo's tool stops it here as in the agent's own rollback (one rule,
``engine.undo.halt_on_undo``, asked of the daemon's gate: the process's default one, whose
kill switch is the host's): the undo is not attempted (no attempt counts, nothing is
dead-lettered), the saga is escalated once (``undo-halted``) and held, and the next sweep
after the halt is lifted runs it.
What does not block: a step that has no undo at all (IRREVERSIBLE, an unknown
outcome with no inverse recorded before the call, a closure). Waiting cannot
make those undoable; they are escalated and the older steps unwound, exactly as
the in-process rollback settles them as orphaned/unresolved and continues.

A saga that rolled back is open again when a step its rollback left in flight
landed and was not settled (the process died between the two): the daemon
settles those steps only, and writes no second end record.

A ``@durable`` run whose start record says ``on_crash="resume"`` is not unwound: under the
same claim, the daemon resumes it forward (``recovery.resume``: its entry point called again,
the log serving the recorded steps). When its entry point is not registered in this process,
it is escalated (``resume-unavailable``) and left open, never unwound behind its owner's back.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_saga.context import default_gate
from agent_saga.durable_run import entry
from agent_saga.engine.error_text import describe_error
from agent_saga.engine.invoke import drive_sync
from agent_saga.engine.observe import RollbackEvent, Wrappers, interceptors
from agent_saga.engine.ports import GatePort
from agent_saga.engine.report import SagaAborted, StepOutcome
from agent_saga.engine.retry import RetryPolicy
from agent_saga.engine.undo_run import UndoJob, run_undo
from agent_saga.errors import CompensationRefused, CompensationUnproven, ConfigurationError
from agent_saga.ids import operation_id
from agent_saga.inert import inert
from agent_saga.log.attestation import OperatorKey
from agent_saga.log.base import WAL
from agent_saga.log.chain import ChainUnverified, VerifyReport, verify_records
from agent_saga.log.codec import BodyCipher
from agent_saga.log.file import read_records
from agent_saga.log.maintenance import CompactionResult, LogMaintenanceError, settled_sagas
from agent_saga.log.maintenance import compact as compact_file
from agent_saga.log.records import Record
from agent_saga.log.records import RecordType as R
from agent_saga.recovery.escalations import Escalation, escalation_id
from agent_saga.recovery.fold import DEFAULT_LEASE_TTL, SagaView, StepView
from agent_saga.recovery.in_doubt import settle_in_flight
from agent_saga.recovery.lease import owner_expiry
from agent_saga.recovery.ledger import KeyState, Ledger
from agent_saga.recovery.mesh_register import recovered_elsewhere
from agent_saga.recovery.protocols import EscalationsLike
from agent_saga.recovery.resume import resumable, resume_claimed
from agent_saga.recovery.stores import recovery_store
from agent_saga.registry import registered
from agent_saga.semantics import ActionSemantics, Outcome, StepState

if TYPE_CHECKING:
    from agent_saga.engine.snapshot import SnapshotStore

__all__ = [
    "REPAIR_STALE_TTLS", "Action", "RecoveryDaemon", "SweepReport", "is_transient", "owner_expiry",
    "set_snapshot_sweep",
]

#: A signed repair session open longer than this many lease ttls of its saga is escalated
#: (``repair-stale``), as is one whose claim is free (its process is gone): either way the
#: daemon keeps off the saga, so a person must finish or abandon the repair.
REPAIR_STALE_TTLS = 20

#: The snapshot GC the daemon runs over its ``snapshots=`` stores after each sweep:
#: ``sweep(store, records, verdict)`` -> that store's report (``agent_saga.snapshots.GCReport``).
#: The snapshots wing installs it when it is imported, as every store it makes imports it;
#: so the daemon, like the rest of the kernel, imports no wing.
SnapshotSweep = Callable[["SnapshotStore", list[Record], VerifyReport], Any]
_snapshot_sweep: SnapshotSweep | None = None


def set_snapshot_sweep(sweep: SnapshotSweep) -> None:
    """Install the GC of snapshot stores the daemon runs after each sweep (``agent_saga.snapshots`` does)."""
    global _snapshot_sweep
    _snapshot_sweep = sweep


log = logging.getLogger("agent_saga.recovery")

#: Errors a later sweep may not meet again: the disk or quota was full for a moment.
_TRANSIENT = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_transient(err: BaseException | None) -> bool:
    """Whether a failed sweep is worth retrying as it is (a full disk, directly or as a cause)."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in _TRANSIENT:
            return True
        err = err.__cause__
    return False

log = logging.getLogger("agent_saga.recovery")


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a sweep did (or, in a dry run, would do)."""

    saga: str
    step: int | None
    kind: str  # compensate | compensated-earlier | keep | escalate | answer | hold | retry-later | dead-letter | finish | resume
    detail: str = ""

    def line(self) -> str:
        where = f"step {self.step}" if self.step is not None else "saga"
        return f"{self.kind:20} {inert(self.saga)} {where}: {inert(self.detail)}".rstrip(": ")


@dataclass(slots=True)
class SweepReport:
    """What one sweep found and did."""

    dry_run: bool = False
    open_sagas: int = 0
    live: list[str] = field(default_factory=list)  # lease still fresh: not touched
    busy: list[str] = field(default_factory=list)  # claimed by another daemon right now
    recovered: list[str] = field(default_factory=list)  # ended (rolled back) by this sweep
    resumed: list[str] = field(default_factory=list)  # durable runs resumed forward to completion by this sweep
    held: list[str] = field(default_factory=list)  # still open: blocked or retrying
    dead_lettered: list[str] = field(default_factory=list)  # gave up on by this sweep
    skipped: list[str] = field(default_factory=list)  # quarantined, dead-lettered, under repair
    compensated: int = 0
    actions: list[Action] = field(default_factory=list)
    new_escalations: list[Escalation] = field(default_factory=list)
    pending_escalations: int = 0
    snapshots: list[Any] = field(default_factory=list)  # one GCReport per snapshot store swept

    @property
    def needs_attention(self) -> bool:
        """True when a human has something to look at, or a saga is still not resolved."""
        return bool(self.pending_escalations or self.held or self.dead_lettered)

    def summary(self) -> str:
        verb = "would recover" if self.dry_run else "recovered"
        resumed = f"resumed {len(self.resumed)}, " if self.resumed else ""
        return (
            f"{self.open_sagas} open saga(s): {len(self.live)} live, {len(self.busy)} busy elsewhere, "
            f"{verb} {len(self.recovered)}, {resumed}{len(self.held)} held, "
            f"{len(self.dead_lettered)} dead-lettered, {len(self.skipped)} skipped; "
            f"{self.compensated} compensation(s) run; {len(self.new_escalations)} new escalation(s), "
            f"{self.pending_escalations} pending"
        )


#: ``RecoveryDaemon(gate=...)`` not given: the process's default gate, looked up at each sweep.
_DEFAULT_GATE = object()


class _Halt(Exception):
    """Stop unwinding this saga for now (older steps are held)."""


class RecoveryDaemon:
    """Sweeps one log and unwinds the sagas whose owners are gone.

    ``lease_grace`` is extra time granted beyond a lease's expiry (clock skew,
    a slow renewer); ``max_attempts`` bounds the attempts per compensation
    across all sweeps and daemons before its saga is dead-lettered; after the
    n-th failure a compensation waits ``retry_delay * 2**(n-1)`` seconds before
    its next attempt. ``clock`` (seconds since the epoch) is the daemon's now.

    ``wal_path`` is the log: a file path, a URL (``postgresql://...``,
    ``redis://...``) or a log object. Leases, claims, the ledger and the
    escalation queue live where the log does (``recovery.stores``): beside a file
    log, or in the same server as a Postgres or Redis log, which is what lets
    daemons on different hosts share one log without running an undo twice.

    Every sweep verifies the log's hash chain first (incrementally: only what was
    appended since the last sweep is checked), whatever the log is stored in, and
    raises ChainUnverified, acting on nothing, when it is broken, unchained or
    partial. ``trust_unverified=True`` is the operator's override: the daemon then
    acts on every record that is sound on its own, never on one that fails its own
    hash check (such a saga is escalated as ``unverified-records``), and each saga
    it takes over says in the log that it was recovered from an unverified log.

    ``gate`` is asked before every undo whether a halt names it (``check_undo``): by
    default the process's default gate, looked up at each sweep, whose kill switch is the
    host's (``agent-saga halt --scope tool:NAME``); ``None`` asks nothing.
    """

    def __init__(
        self,
        wal_path: str | os.PathLike[str] | WAL,
        *,
        lease_grace: float = 5.0,
        max_attempts: int = 5,
        retry_delay: float = 5.0,
        ledger: Ledger | None = None,
        escalations: EscalationsLike | None = None,
        clock: Callable[[], float] = time.time,
        name: str | None = None,
        encryptor: BodyCipher | None = None,
        trust_unverified: bool = False,
        snapshots: Sequence[SnapshotStore] = (),
        gate: GatePort | object | None = _DEFAULT_GATE,
    ) -> None:
        if lease_grace < 0:
            raise ValueError(f"lease_grace must be >= 0 seconds, got {lease_grace!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts!r}")
        if retry_delay < 0:
            raise ValueError(f"retry_delay must be >= 0 seconds, got {retry_delay!r}")
        self.lease_grace = float(lease_grace)
        self.max_attempts = max_attempts
        self.retry_delay = float(retry_delay)
        self.store = recovery_store(wal_path, encryptor)
        self.location = self.store.location
        #: The log file (None for a log on a server: see ``location``).
        self.wal_path: Path | None = getattr(self.store, "path", None)
        self.ledger: Ledger = ledger or self.store.ledger()
        self.escalations = escalations or self.store.escalations()
        if self.store.shared and not getattr(self.ledger, "shared", False):
            log.warning(
                "%s is shared by every host, but this daemon's ledger (%s) is not: daemons on other "
                "hosts cannot see its successes and may run an undo twice. Leave ledger= unset to use "
                "the ledger that lives beside the log", self.location, type(self.ledger).__name__,
            )
        self.clock = clock
        self.name = name or f"saga-recoveryd@{socket.gethostname()}:{os.getpid()}"
        self.encryptor = encryptor  # default: the key in $AGENT_SAGA_WAL_KEY, if set
        self.trust_unverified = trust_unverified
        #: Snapshot stores swept after each sweep (agent_saga.snapshots._gc): their settled sagas' go.
        self.snapshots = tuple(snapshots)
        if self.snapshots and _snapshot_sweep is None:
            raise ConfigurationError(
                "RecoveryDaemon(snapshots=...) sweeps them with the GC of agent_saga.snapshots, which is "
                "not loaded: import agent_saga.snapshots (its stores and the SnapshotStore protocol live there)"
            )
        self.verdict: VerifyReport | None = None  # the chain verdict of the last sweep
        self._gate = gate
        self.gate: object = None  # the gate this sweep asks about undos (see ``gate=``)
        self._tail = self.store.tail(encryptor)
        self._wal: WAL | None = None

    # -- public -----------------------------------------------------------------------

    def sweep(
        self, dry_run: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> SweepReport:
        """One pass over the log; a dry run changes nothing on disk.

        Raises FileNotFoundError / WALCorrupt if the log cannot be read, and
        ChainUnverified (having done nothing) if its chain does not verify, unless
        the daemon was told to trust it. ``progress(done, total)`` is called as the
        open sagas are worked through.
        """
        if not self.store.exists():
            raise FileNotFoundError(f"no log at {self.location}")
        self._tail.refresh()
        self.verdict = self._tail.verdict
        if not self.verdict.ok and not self.trust_unverified:
            raise ChainUnverified.refusing(
                self.location, self.verdict, "recover from it",
                "pass trust_unverified=True to recover from it anyway (recorded in the log as such)",
            )
        if not dry_run:
            # After the verdict: a refused sweep opens nothing (opening a file log moves a torn tail).
            self._wal = self.store.open_wal()
        self.gate = default_gate() if self._gate is _DEFAULT_GATE else self._gate
        self.ledger.refresh()
        report = SweepReport(dry_run=dry_run)
        sagas = list(self._tail.sagas)
        for done, saga_id in enumerate(sagas):
            if progress is not None and done % 64 == 0:
                progress(done, len(sagas))
            view = self._tail.sagas[saga_id]
            if not view.open:
                continue
            report.open_sagas += 1
            if view.quarantined or view.dead_lettered or view.repairing:
                report.skipped.append(saga_id)
                if view.repairing and not dry_run:
                    self._stale_repair(view, report)
                continue
            if not self._expired(view):
                report.live.append(saga_id)
                continue
            if view.unsigned_end:
                report.skipped.append(saga_id)
                if not dry_run:
                    self._unsigned_end(view, report)
                continue
            if self._recovered_elsewhere(view, report, claim=not dry_run):
                continue
            if dry_run:
                if resumable(view):
                    report.actions.append(Action(saga_id, None, "resume", "would resume it forward"))
                else:
                    self._resolve(view, report, dry_run=True)
                continue
            self._claim_and_resolve(saga_id, report)
        if not dry_run:
            self._answer_settled_in_flight(report)
        report.pending_escalations = len(self.escalations.pending())
        if self.snapshots and not dry_run:
            self._collect_snapshots(report)
        return report

    def _collect_snapshots(self, report: SweepReport) -> None:
        """The periodic snapshot GC: the whole log, verified again (a trusted-unverified log deletes nothing)."""
        if self.wal_path is not None:
            records = list(read_records(self.wal_path, encryptor=self.encryptor))
        else:
            assert self._wal is not None
            records = list(self._wal.records())
        verdict = verify_records(records)
        assert _snapshot_sweep is not None  # checked when the daemon was made with stores
        for store in self.snapshots:
            report.snapshots.append(_snapshot_sweep(store, records, verdict))

    def watch(
        self,
        interval: float = 5.0,
        *,
        stop: threading.Event | None = None,
        on_report: Callable[[SweepReport], None] | None = None,
    ) -> None:
        """Sweep every ``interval`` seconds until ``stop`` is set.

        A sweep that fails on a full disk is logged and retried at the next
        interval; one that cannot reach the log's server (it is restarting) is
        retried with backoff, logged once per outage (``recovery.watch``); a log
        that does not exist yet is waited for; any other failure ends the watch.
        """
        from agent_saga.recovery.watch import Watch

        def on_error(daemon: RecoveryDaemon | None, err: Exception) -> None:
            if not is_transient(err):
                raise err
            log.warning("%s: sweep failed (%s); retrying in %gs", self.location, err, interval)

        Watch(lambda: self, interval=interval, say=lambda line: log.warning("%s", line),
              on_report=on_report or (lambda report: None), on_error=on_error, close=False,
              location=self.location).run(stop or threading.Event())

    def compact(
        self,
        *,
        signer: str | os.PathLike[str] | OperatorKey | None,
        grace_seconds: float = 3600.0,
        now: float | None = None,
        by: str = "saga-recoveryd compact",
        reason: str = "settled sagas past the grace period",
    ) -> CompactionResult:
        """Compact the log this daemon sweeps, computing the keep-set for you.

        What goes is what ``agent_saga.log.compact`` removes (every record of a saga
        that completed or rolled back clean, under a signed COMPACTION attestation),
        except a saga whose newest record is less than ``grace_seconds`` old (at
        ``now``, default the daemon's clock): a sweep may still be reading it. An open,
        crashed or unclean saga always stays whole. ``signer`` is the operator key
        that signs the attestation; without one the log is left as it was (the
        maintenance rule). A log that cannot be compacted raises: never a silent no-op.
        """
        if isinstance(grace_seconds, bool) or not isinstance(grace_seconds, int | float) or grace_seconds < 0:
            raise ValueError(f"grace_seconds must be a number of seconds >= 0, got {grace_seconds!r}")
        cutoff = (self.clock() if now is None else now) - grace_seconds
        if self.wal_path is not None:
            self._wal = None
            self.store.close()  # the log this daemon opened for its own records: compaction rewrites the file
            records = list(read_records(self.wal_path, encryptor=self.encryptor))
        else:
            server = self.store.open_wal()
            records = list(server.records())
        newest: dict[str, float] = {}
        for record in records:
            ts = record.get("ts")  # microseconds since the epoch, on every durable log
            if isinstance(ts, int) and not isinstance(ts, bool):
                newest[record["saga"]] = max(newest.get(record["saga"], ts / 1e6), ts / 1e6)
        # Kept: a saga still within the grace period, and (the maintenance rule: a keep
        # predicate may only keep more) every saga that is not settled.
        keep_ids = {saga for saga, ts in newest.items() if ts > cutoff} | (set(newest) - settled_sagas(records))

        def keep(record: Record) -> bool:
            return record.get("saga") in keep_ids

        if self.wal_path is not None:
            return compact_file(self.wal_path, keep, by=by, reason=reason, encryptor=self.encryptor, signer=signer)
        rewrite = getattr(server, "compact", None)
        if not callable(rewrite):
            raise LogMaintenanceError(f"{self.location} cannot be compacted: {type(server).__name__} has no compact()")
        result: CompactionResult = rewrite(keep, by=by, reason=reason, encryptor=self.encryptor, signer=signer)
        return result

    def close(self) -> None:
        self._wal = None
        self.store.close()  # closes the log it opened for our records

    def __enter__(self) -> RecoveryDaemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _answer_settled_in_flight(self, report: SweepReport) -> None:
        """Answer the ``in-flight`` escalations of steps the log shows settled.

        A step left in flight is settled as it lands, in its own thread, and then its escalation
        is answered; a process that dies between the two (or that files the escalation at the
        saga's end after the step already landed) leaves a closed saga with nothing to undo and a
        person told the step still runs. Once the owner's lease has run out, the log is the truth.
        """
        waiting = [e for e in self.escalations.pending() if e.kind == "in-flight" and e.step is not None]
        if not waiting:
            return
        self._tail.refresh()  # with what this sweep wrote (durable: each saga's resolve ends in a barrier)
        for escalation in waiting:
            assert escalation.step is not None
            view = self._tail.sagas.get(escalation.saga)
            if view is None or view.ended is None or view.open or not self._expired(view):
                continue
            step = view.steps.get(escalation.step)
            how = (step.settled or step.state) if step is not None else "never recorded"
            note = f"its step was settled in the log ({how}) before its process could answer this"
            self.escalations.resolve(escalation.id, f"{note}; answered by {self.name}")
            self._append(R.ESCALATION_RESOLVED, escalation.saga, {"escalation": escalation.id, "kind": "in-flight"},
                         escalation.step)
            report.actions.append(Action(escalation.saga, escalation.step, "answer", note))

    def _stale_repair(self, view: SagaView, report: SweepReport) -> None:
        """Escalate, once, a signed repair session left open: its claim is free, or it is too old.

        Only a signed session reaches here (an unsigned one is no repair: ``recovery.fold``).
        Its ESCALATED record is the daemon's, not a sign of life from the saga's owner.
        """
        if "repair-stale" in view.escalated:
            return
        ttl = view.lease_ttl or DEFAULT_LEASE_TTL
        age = self.clock() - view.repair_opened_us / 1e6
        if age > REPAIR_STALE_TTLS * ttl:
            why = f"it has been open {age:.0f}s, more than {REPAIR_STALE_TTLS} lease ttls of its saga ({ttl:g}s each)"
        else:
            claim = self.store.try_claim(view.saga_id)
            if claim is None:
                return  # the operator's session holds it: at work
            claim.release()
            why = "its claim is free: the process of that session is gone"
        self._ask(view, report, "repair-stale", (
            f"the repair opened under {view.repair_signer}'s key is still open and {why}; recovery keeps off the "
            "saga until it is resumed or abandoned (agent-saga repair SAGA --abandon hands it back)"
        ))

    def _unsigned_end(self, view: SagaView, report: SweepReport) -> None:
        """Escalate, once, a saga an unsigned REPAIR_RESUMED says was continued elsewhere.

        Not believed (no operator key signed it), and not undone either: what it claims is
        that a person kept these effects on purpose, and a repair resumed before repairs
        were signed reads exactly so. A signed session on the saga decides (resume or abandon).
        """
        if "repair-unsigned" in view.escalated:
            return
        self._ask(view, report, "repair-unsigned", (
            f"{view.unsigned_end}; the daemon neither ends nor unwinds the saga on it: an operator opens a signed "
            "repair (agent-saga repair SAGA --operator-key FILE) and resumes or abandons it"
        ))

    def _ask(self, view: SagaView, report: SweepReport, kind: str, detail: str) -> None:
        """Queue ``kind`` about a saga the daemon keeps off, and say so in its log: a person decides."""
        escalation, created = self.escalations.add(view.saga_id, None, kind, detail)
        if created:
            report.new_escalations.append(escalation)
        self._append(R.ESCALATED, view.saga_id, {"kind": kind, "detail": detail, "escalation": escalation.id})
        assert self._wal is not None
        self._wal.barrier()
        view.escalated.add(kind)
        report.actions.append(Action(view.saga_id, None, "escalate", f"[{kind}] {detail}"))

    # -- leases and claims -------------------------------------------------------------

    def _recovered_elsewhere(self, view: SagaView, report: SweepReport, *, claim: bool) -> bool:
        """True (and escalated, nothing written to this log) when another merged log recovers this saga.

        A merged mesh log is one view of the devices' logs; the ledger beside it knows only its own
        undos, so each device's part of a saga is recovered from one merged log per host
        (``recovery.mesh_register``).
        """
        devices = [part for part in view.parts if part]
        if not devices or self.wal_path is None:
            return False
        holder = recovered_elsewhere(self.wal_path, view.saga_id, devices, claim=claim)
        if not holder:
            return False
        detail = (f"{inert(holder)} already recovers this saga's device parts (its ledger is beside it): recover "
                  "that log, the log of record; this merged view is for reading, and recovering it would run "
                  "the same undos again")
        report.actions.append(Action(view.saga_id, None, "escalate", f"[mesh-recovered-elsewhere] {detail}"))
        report.skipped.append(view.saga_id)
        if claim:
            escalation, created = self.escalations.add(view.saga_id, None, "mesh-recovered-elsewhere", detail)
            if created:
                report.new_escalations.append(escalation)
        return True

    def _expired(self, view: SagaView) -> bool:
        return self.clock() > owner_expiry(view, self.store.read_lease(view.saga_id)) + self.lease_grace

    def _claim_and_resolve(self, saga_id: str, report: SweepReport) -> None:
        claim = self.store.try_claim(saga_id)
        if claim is None:
            report.busy.append(saga_id)
            return
        finished = False
        try:
            # Another daemon may have finished it between our read and our claim.
            self._tail.refresh()
            self.ledger.refresh()
            view = self._tail.sagas[saga_id]
            if not view.open:
                finished = True
                return
            if view.repairing or view.unsigned_end:  # written between our read and our claim
                report.skipped.append(saga_id)
                return
            if not self._expired(view):
                report.live.append(saga_id)
                return
            resolve = self._resume if resumable(view) else self._resolve
            finished = resolve(view, report, dry_run=False)
            assert self._wal is not None
            self._wal.barrier()  # durable before the claim is let go
            if finished:
                self.store.remove_lease(saga_id)
        finally:
            claim.release(remove=finished)

    # -- one saga --------------------------------------------------------------------

    def _resume(self, view: SagaView, report: SweepReport, *, dry_run: bool) -> bool:
        """Resume one claimed durable run forward (``recovery.resume``); True if it ended."""
        assert self._wal is not None  # dry runs never get here (sweep says what it would do)
        name = str((view.durable or {}).get("entry", ""))
        registered = entry(name)
        if registered is None:
            detail = (
                f"its @durable entry point {name!r} is not registered in this daemon; start it with --import <the "
                f"module that defines @durable({name!r})>; the run is left open"
            )
            if "resume-unavailable" not in view.escalated:  # queued once, however often it is swept
                self._ask(view, report, "resume-unavailable", detail)
            report.held.append(view.saga_id)
            return False
        try:
            outcome = resume_claimed(view, registered, self._wal, self.escalations, by=self.name)
        except SagaAborted as aborted:
            report.actions.append(Action(view.saga_id, None, "resume", f"resumed, then unwound: {aborted.cause}"))
            report.recovered.append(view.saga_id)
            return True
        except Exception as err:  # noqa: BLE001 - refused before it began (a drain, a closed gate): tried again next sweep
            report.actions.append(Action(view.saga_id, None, "resume", f"could not resume it now: {describe_error(err)}"))
            report.held.append(view.saga_id)
            return False
        report.actions.append(Action(view.saga_id, None, "resume", outcome.detail))
        if outcome.escalation is not None:
            report.new_escalations.append(outcome.escalation)
        if not outcome.ended:
            report.held.append(view.saga_id)
            return False
        report.resumed.append(view.saga_id)
        if "resume-unavailable" in view.escalated:  # started again with the import it lacked
            eid = escalation_id(view.saga_id, None, "resume-unavailable")
            self.escalations.resolve(eid, f"resumed by {self.name}")
            self._append(R.ESCALATION_RESOLVED, view.saga_id, {"escalation": eid, "kind": "resume-unavailable"})
        return True

    def _resolve(self, view: SagaView, report: SweepReport, *, dry_run: bool) -> bool:
        """Unwind one claimed saga; True if it ended."""
        run = _Run(self, view, report, dry_run)
        try:
            if view.ignored:
                run.unverified()
            if view.unreadable:
                run.unreadable()
            # Rolled back already: only what landed after its rollback (see the module docstring).
            for step in view.newest_first() if view.ended is None else view.late_open():
                run.step(step)
        except _Halt:
            if view.saga_id not in report.dead_lettered:
                report.held.append(view.saga_id)
            return False
        run.finish()
        report.recovered.append(view.saga_id)
        return True

    def _append(self, rtype: R, saga: str, body: dict[str, Any], step: int | None = None) -> int:
        assert self._wal is not None
        return self._wal.append(rtype.value, saga, {**body, "by": self.name}, step)


class _Run:
    """The unwinding of one saga by one sweep."""

    def __init__(self, daemon: RecoveryDaemon, view: SagaView, report: SweepReport, dry_run: bool) -> None:
        self.d = daemon
        self.view = view
        self.report = report
        self.dry = dry_run
        self.claimed = False
        self.outcomes: dict[str, int] = {}
        self.settled: StepOutcome | None = None  # how the step being settled ended, for the observers

    def _act(self, step: int | None, kind: str, detail: str = "") -> None:
        self.report.actions.append(Action(self.view.saga_id, step, kind, detail))

    def _write(self, rtype: R, body: dict[str, Any], step: int | None = None) -> int | None:
        """Append one record of this saga (claiming it first, once); its ticket, None in a dry run."""
        if self.dry:
            return None
        if not self.claimed:
            self.claimed = True
            claim: dict[str, Any] = {
                "owner": self.view.owner, "lease_ttl": self.view.lease_ttl,
                "last_activity_us": self.view.owner_ts,
            }
            verdict = self.d.verdict
            if verdict is not None and not verdict.ok:
                # The operator chose to act on a log that does not verify: the log says so.
                claim["trust_unverified"] = verdict.label
            if self.view.ignored:
                claim["ignored_seqs"] = list(self.view.ignored)
            self.d._append(R.RECOVERY_CLAIMED, self.view.saga_id, claim)
            if not self.view.rollback_started:
                self.d._append(R.ROLLBACK_STARTED, self.view.saga_id, {
                    "cause": "recovery: the owner's lease expired before the saga ended",
                })
        return self.d._append(rtype, self.view.saga_id, body, step)

    def _count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def _escalate(self, step: StepView | None, kind: str, detail: str) -> None:
        index = step.index if step is not None else None
        self._act(index, "escalate", f"[{kind}] {detail}")
        if self.dry:
            return
        escalation, created = self.d.escalations.add(self.view.saga_id, index, kind, detail)
        if created:
            self.report.new_escalations.append(escalation)
        logged = (step.escalated if step is not None else self.view.escalated)
        if kind not in logged:
            self._write(R.ESCALATED, {"kind": kind, "detail": detail, "escalation": escalation.id}, index)
            logged.add(kind)

    # -- per step ------------------------------------------------------------------------

    def step(self, step: StepView) -> None:
        if not step.applied:
            return
        if step.compensated:
            self._count("compensated")
            return
        if step.settled == "kept":
            self._count("kept")
            return
        if settle_in_flight(self.view.saga_id, step, self._write, dry_run=self.dry):
            self._act(step.index, "not-applied", step.facts)  # the provider says it never happened
            return
        # Observed as the agent's own rollback observes each step it settles (engine.observe):
        # whatever settles it below says how (``settled``); a step held for a later sweep ends unresolved.
        observed = None if self.dry or not interceptors() else _observe(self.view.saga_id, step)
        self.settled = None
        try:
            self._settle(step)
        finally:
            if observed is not None:
                observed.end(self.settled or self._outcome(step, Outcome.UNRESOLVED, "held for a later sweep"))

    def _outcome(self, step: StepView, outcome: Outcome, detail: str, attempts: int = 0) -> StepOutcome:
        """What the observers are told about ``step`` (as the rollback's StepOutcome)."""
        comp = step.compensation or {}
        key, label = comp.get("key"), comp.get("description") or comp.get("handler")
        return StepOutcome(step.index, step.tool or "?", _semantics(step),
                           StepState.COMMITTED if step.committed else StepState.UNKNOWN, outcome,
                           str(label) if label else None, attempts, key if isinstance(key, str) else None, detail)

    def _settle(self, step: StepView) -> None:
        """Settle one applied step not settled yet: keep it, undo it, or escalate it (``_Halt``: hold the saga)."""
        if step.state == "in-flight" and not self.dry:
            # Its process died between the durable intent and any outcome: the call may
            # or may not have landed. Say so in the log before acting on it.
            self._write(R.STEP_UNKNOWN, {
                "tool": step.tool, "semantics": step.semantics, "op": step.op,
                "error": "recovery: the owner died while the call was in flight",
                "compensation": step.intent_compensation,
            }, step.index)
            step.unknown = True
        comp = step.compensation
        if comp is None and step.semantics == "REVERSIBLE" and step.committed and not step.problem:
            self._act(step.index, "keep", "REVERSIBLE with nothing to undo")
            self._write(R.STEP_KEPT, {"op": step.op, "detail": "REVERSIBLE with nothing to undo"}, step.index)
            self._count("kept")
            self.settled = self._outcome(step, Outcome.KEPT, "REVERSIBLE with nothing to undo")
            return
        usable = (
            comp is not None and comp.get("recoverable") is True
            and isinstance(comp.get("handler"), str) and isinstance(comp.get("kwargs"), dict)
        )
        if not usable:
            self._no_undo(step, comp)
            return
        assert comp is not None
        self._compensate(step, comp)

    def _no_undo(self, step: StepView, comp: dict[str, Any] | None) -> None:
        if comp is not None:
            kind = "not-recoverable"
            detail = f"the undo {comp.get('description') or comp.get('handler')!r} cannot run outside the process that made it"
        elif step.committed and step.semantics == "IRREVERSIBLE":
            kind, detail = "irreversible", f"{step.tool!r} is IRREVERSIBLE and committed"
        elif step.committed:
            kind, detail = "no-undo", step.problem or f"{step.tool!r} committed with no undo recorded"
        else:
            kind = "unknown-outcome"
            detail = (
                f"{step.tool!r} was {step.state} when its process died and no inverse was "
                "recorded before the call; "
                + (f"{step.facts}; " if step.facts else "")
                + "check the remote system"
            )
        settle = R.STEP_ORPHANED if step.committed else R.STEP_UNRESOLVED
        wanted = "orphaned" if step.committed else "unresolved"
        if step.settled != wanted:
            self._write(settle, {"op": step.op, "detail": f"recovery: {detail}"}, step.index)
        self._escalate(step, kind, detail)
        self._resolve_escalation(step, "in-flight", f"superseded by [{kind}] from {self.d.name}")
        self._count(wanted)
        self.settled = self._outcome(step, Outcome.ORPHANED if step.committed else Outcome.UNRESOLVED, detail)

    def _compensate(self, step: StepView, comp: dict[str, Any]) -> None:
        saga = self.view.saga_id
        handler = str(comp["handler"])
        key = comp.get("key")
        if not isinstance(key, str):
            key = operation_id(saga, step.index, step.tool or "", "compensate")
        state = self.d.ledger.state(key)
        if state.done:
            # It ran; only its log record was lost (the daemon died before writing it).
            self._act(step.index, "compensated-earlier", f"{handler} (key {key}) per the ledger")
            self._write(R.STEP_COMPENSATED, {"key": key, "attempts": state.attempts, "source": "ledger"}, step.index)
            self._count("compensated")
            self.settled = self._outcome(step, Outcome.COMPENSATED, "per the ledger", state.attempts)
            return
        if not registered(handler):
            # Deliberately not an attempt (the rollback's would be one): this daemon may be
            # started again with the import, and then the undo runs.
            self._escalate(step, "handler-missing", (
                f"handler {handler!r} is not registered in this daemon; start it with "
                "--import <the module that declares it>"
            ))
            self._act(step.index, "hold", "older steps wait until this one is undone")
            raise _Halt
        job = UndoJob(saga, step.index, _semantics(step), handler, handler, None, dict(comp["kwargs"]), key)
        # The executor the agent's own rollback uses (engine.undo_run), one attempt per sweep:
        # the ledger counts them across sweeps and daemons (_Ledgered).
        end = drive_sync(run_undo(
            job, gate=self.d.gate, write=self._write, wal=None if self.dry else self.d._wal, retry=_ONE_ATTEMPT,
            attempts_before=state.attempts, journal=_Ledgered(self, step, job, state),
        ))
        self.settled = self._outcome(step, end.outcome, end.detail, end.attempts)
        if end.halt is not None:
            # Not attempted (no attempt counts toward dead-lettering): it runs once the halt is lifted.
            self._escalate(step, "undo-halted", (
                f"the undo {handler} (key {key}) was not run: {end.halt.reason}; it runs at the first sweep after "
                "the halt is lifted"
            ))
            self._act(step.index, "hold", "halted: older steps wait until this one is undone")
            raise _Halt
        if end.outcome is Outcome.UNRESOLVED:  # a dry run: what it would do is said
            self._count("compensated")
            return
        if end.outcome is Outcome.FAILED:
            kind = _kind_of(end.error)
            if kind is not None:
                # The handler will not do what the record asks (a program, a URL, a server it
                # does not know), or its system said "done" with no proof: asking again gets the
                # same answer, so a person decides now.
                self._dead_letter(step, key, end.attempts, end.detail, kind=kind)
            if end.attempts >= self.d.max_attempts:
                self._dead_letter(step, key, end.attempts, end.detail)
            self._act(step.index, "retry-later", f"attempt {end.attempts}/{self.d.max_attempts} failed: {end.detail}")
            raise _Halt
        # Restarted with the missing import, or the undo the agent's rollback gave up on
        # worked now, or the step the rollback left in flight is undone: those escalations are answered.
        for kind in ("handler-missing", "undo-halted", "compensation-failing", "in-flight", "unknown-outcome",
                     "late-commit"):
            self._resolve_escalation(step, kind, f"compensated by {self.d.name}")
        self.report.compensated += 1
        self._count("compensated")

    def _dead_letter(self, step: StepView, key: str, attempts: int, error: str,
                     kind: str = "compensation-failing") -> None:
        if kind == "undo-refused":
            detail = f"the handler refused the recorded undo (key {key}) and was not retried: {error}"
        elif kind == "compensation-unproven":
            detail = f"the undo (key {key}) was reported done without a proof, so it is not counted as done: {error}"
        else:
            detail = f"{attempts} attempt(s) with key {key} failed; last error: {error or 'unknown (crashed mid-call?)'}"
        self._escalate(step, kind, detail)
        self._act(step.index, "dead-letter", detail)
        self._write(R.SAGA_DEAD_LETTERED, {"key": key, "attempts": attempts, "detail": detail}, step.index)
        self.report.dead_lettered.append(self.view.saga_id)
        raise _Halt

    def _resolve_escalation(self, step: StepView | None, kind: str, note: str) -> None:
        if self.dry or kind not in (step.escalated if step is not None else self.view.escalated):
            return
        index = step.index if step is not None else None
        eid = escalation_id(self.view.saga_id, index, kind)
        try:
            self.d.escalations.resolve(eid, note)
        except KeyError:
            return  # logged, but not in this queue (moved or archived): nothing to close
        self._write(R.ESCALATION_RESOLVED, {"escalation": eid, "kind": kind}, index)

    def unverified(self) -> None:
        seqs = ", ".join(str(s) for s in self.view.ignored)
        self._escalate(None, "unverified-records", (
            f"record(s) seq {seqs} of this saga fail their own hash check (edited, or forged into "
            "the log) and were not acted on; what they claimed may still need a human"
        ))
        self._count("unverified")

    def unreadable(self) -> None:
        self._escalate(None, "unreadable", (
            "some records of this saga carry no readable body (encrypted without the key here, "
            "or redacted); the daemon will not guess what to undo"
        ))
        raise _Halt

    def finish(self) -> None:
        # Read now (the daemon was given the key), or finished where the agent's rollback stopped.
        self._resolve_escalation(None, "unreadable", f"read and recovered by {self.d.name}")
        self._resolve_escalation(None, "rollback-abandoned", f"rollback finished by {self.d.name}")
        clean = set(self.outcomes) <= {"compensated", "kept"}
        if self.view.ended is not None:  # its own rollback ended it: what landed late is settled now
            self._act(None, "finish", "the steps that landed after its rollback are settled")
            return
        self._act(None, "finish", "rolled back clean" if clean else "rolled back, NOT clean (escalated)")
        self._write(R.SAGA_ROLLED_BACK, {
            "clean": clean, "halted": False, "outcomes": dict(sorted(self.outcomes.items())),
            "recovered": True,
        })


def _observe(saga_id: str, step: StepView) -> Wrappers | None:
    """Start the interceptors' ``rollback_step`` for a step this daemon settles."""
    comp = step.compensation or {}
    label, key, handler = comp.get("description") or comp.get("handler"), comp.get("key"), comp.get("handler")
    return Wrappers.start("rollback_step", RollbackEvent(
        saga_id, step.index, step.tool or "?", _semantics(step), str(label) if label else None,
        key if isinstance(key, str) else None, handler if isinstance(handler, str) else None,
    ))


def _semantics(step: StepView) -> ActionSemantics:
    """The step's semantics as the log states them (COMPENSABLE when it states none it can read)."""
    try:
        return ActionSemantics(step.semantics or "COMPENSABLE")
    except ValueError:
        return ActionSemantics.COMPENSABLE


def _args(kwargs: Any) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in dict(kwargs).items())


#: The daemon makes one attempt of an undo per sweep: its ledger counts the attempts across
#: sweeps and daemons, and it waits between them (``retry_delay``) without holding up the sweep.
_ONE_ATTEMPT = RetryPolicy(max_attempts=1)


class _Ledgered:
    """The daemon's journal of one undo (``engine.undo_run.Journal``): its ledger, and its checks before an attempt.

    Asked after the halt, before the attempt: a saga whose undo used up its attempts is
    dead-lettered, one still backing off waits (both hold the saga, raising ``_Halt``); a dry
    run says what it would do and stops there.
    """

    def __init__(self, run: _Run, step: StepView, job: UndoJob, state: KeyState) -> None:
        self.run, self.step, self.job, self.state = run, step, job, state

    def before(self, attempt: int) -> bool:
        run, step, state, d = self.run, self.step, self.state, self.run.d
        if state.attempts >= d.max_attempts:
            run._dead_letter(step, self.job.key, state.attempts, state.last_error)
        if state.failures:
            ready_at = state.last_failed_at + d.retry_delay * 2 ** (state.failures - 1)
            if d.clock() < ready_at:
                run._act(step.index, "retry-later", f"backing off after {state.failures} failure(s)")
                raise _Halt
        run._act(step.index, "compensate",
                 f"{self.job.handler}({_args(self.job.kwargs)}) key={self.job.key} attempt {attempt}")
        if run.dry:
            return False
        d.ledger.attempt(self.job.key, run.view.saga_id, step.index, d.name)
        return True

    def done(self) -> None:
        self.run.d.ledger.done(self.job.key, self.run.view.saga_id, self.step.index, self.run.d.name)

    def failed(self, detail: str) -> None:
        self.run.d.ledger.failed(self.job.key, self.run.view.saga_id, self.step.index, self.run.d.name, detail)


def _kind_of(err: BaseException | None) -> str | None:
    """The escalation a failed undo gets at once (no retry), or None for an ordinary failure."""
    if isinstance(err, CompensationRefused):
        return "undo-refused"  # it will not run what the record asks
    if isinstance(err, CompensationUnproven):
        return "compensation-unproven"  # its system said done, with no proof this daemon trusts
    return None
