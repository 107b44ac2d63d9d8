"""Resume a crashed durable run forward: its entry point called again, the log answering what it recorded.

``resume(saga_id, wal=...)`` is the API; the recovery daemon does the same for every expired
saga whose start record says ``on_crash="resume"`` (``RecoveryDaemon.sweep``). Either way:

1. the saga is claimed with the claim the daemon takes to unwind (``store.try_claim``): of two
   resumers, or a resumer and a daemon, exactly one proceeds; the claim is held until the run ends;
2. the log is read chain-checked, and the saga must be open, not unwinding, not live (its owner's
   lease ran out), and its entry point registered here (``@durable`` in an imported module);
3. a step that was in flight when its process died (an intent and no outcome, or UNKNOWN) is put
   to its ``@reconciler``; if nobody can tell whether it landed, the run is escalated
   (``resume-unknown``) and left open for a person, never resumed on a guess;
4. the entry point runs again with its recorded inputs under the same saga id: SAGA_RESUMED (the
   resumer's lease replaces the dead owner's), then the recorded steps served from the log
   (``engine/resumed.py``) and the rest live, ending SAGA_COMPLETED with its return value, or
   SAGA_DIVERGED and an unwind when the code asks for other calls.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent_saga.durable_run import Entry, entry, log_of, run_async, run_sync
from agent_saga.engine.report import SagaAborted
from agent_saga.engine.resumed import RecordedStep, RecordedWait, Replay, WaitKey, replayable
from agent_saga.errors import ResumeRefused
from agent_saga.inert import inert
from agent_saga.log.base import WAL
from agent_saga.log.records import RecordType as R
from agent_saga.recovery.escalations import Escalation, escalation_id
from agent_saga.recovery.fold import SagaView, StepView, durable_blocker
from agent_saga.recovery.in_doubt import settle_in_flight
from agent_saga.recovery.lease import owner_expiry
from agent_saga.recovery.protocols import EscalationsLike, RecoveryStore
from agent_saga.recovery.stores import recovery_store, verified_tail

__all__ = ["Resumed", "blocker", "resumable", "resume", "resume_claimed"]


@dataclass(frozen=True, slots=True)
class Resumed:
    """How one resume ended: ``completed``, or ``held`` (left open for a person; a divergence raises)."""

    outcome: str
    detail: str
    value: Any = None
    escalation: Escalation | None = None  # filed by this resume (held: a step nobody can settle)

    @property
    def ended(self) -> bool:
        return self.outcome != "held"


def resumable(view: SagaView) -> bool:
    """Whether recovery resumes ``view`` forward rather than unwinding it (its start record says so)."""
    durable = view.durable
    return (
        durable is not None and durable.get("on_crash") == "resume" and view.ended is None
        and not view.rollback_started and not view.diverged and not view.unreadable and not view.ignored
    )


def blocker(view: SagaView | None, saga_id: str, location: str) -> str | None:
    """Why the run cannot be resumed from what its log says (None: it can); one line."""
    why = durable_blocker(view, saga_id, location, not_durable="there is nothing to call again",
                          ended="there is nothing to resume",
                          unwinding=" (its rollback began, or a resume diverged): recovery finishes it")
    if why is not None or view is None:  # (a missing view always has its why)
        return why
    if view.repairing or view.quarantined or view.dead_lettered:
        return f"saga {saga_id} is quarantined, dead-lettered or under repair: a person holds it"
    if view.unreadable or view.ignored:
        return f"saga {saga_id} has records that cannot be read or fail their own hash check: it is not resumed"
    return None


def _inputs(view: SagaView) -> tuple[str, list[Any], dict[str, Any]]:
    durable = view.durable or {}
    name, args, kwargs = durable.get("entry"), durable.get("args"), durable.get("kwargs")
    if not isinstance(name, str) or not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ResumeRefused(f"saga {view.saga_id}: its start record does not hold a readable entry and inputs")
    return name, args, kwargs


def _recorded(step: StepView) -> RecordedStep | None:
    """A step as the replay serves it; None for one without a tool name (nothing the code called)."""
    if step.tool is None:
        return None
    if step.committed:
        outcome = "committed"
    elif step.not_applied and step.asked_in_recovery:
        outcome = "unseen"  # settled after its process died: the code never saw its call end
    else:
        outcome = "refused" if step.refused and not step.not_applied else "not-applied"
    result_ok = step.committed and step.has_result and replayable(step.result)
    return RecordedStep(step.index, step.tool, step.args or {}, outcome, step.semantics or "REVERSIBLE", step.result,
                        result_ok, step.compensation, step.refusal if outcome == "refused" else step.error)


def _waits(view: SagaView) -> dict[WaitKey, RecordedWait]:
    """The run's durable waits as a resume answers them: each signalled one with the data of the signal it took."""
    waits = {}
    for key, wait in view.waits.items():
        signal = view.signals.get(wait.signal) if wait.signal is not None else None
        if wait.outcome == "signalled" and signal is None:  # its signal is not in the log: never served as None
            waits[key] = RecordedWait(wait.until)
        else:
            waits[key] = RecordedWait(wait.until, wait.outcome, signal.data if signal is not None else None)
    return waits


def _in_doubt(view: SagaView) -> list[StepView]:
    return [view.steps[i] for i in sorted(view.steps) if view.steps[i].applied and not view.steps[i].committed]


def _settle(view: SagaView, log: WAL, escalations: EscalationsLike, by: str) -> Resumed | None:
    """Ask about every step in doubt; a ``held`` outcome (escalated) for the first one nobody can settle."""

    def write(rtype: R, body: dict[str, Any], index: int | None) -> None:
        log.append(rtype.value, view.saga_id, {**body, "by": by}, index)

    for step in _in_doubt(view):
        if settle_in_flight(view.saga_id, step, write, keep_result=True) or step.committed:
            continue
        detail = (
            f"step {step.index} {step.tool!r} was {step.state} when its process died and "
            + (step.facts or "no @reconciler is registered for it")
            + "; nobody can tell whether it landed, so the run is not resumed on a guess: check with its provider, "
            f"then say what you found: agent-saga settle {escalation_id(view.saga_id, step.index, 'resume-unknown')} "
            "--landed --result JSON (or --not-landed), signed with an operator key; the next sweep resumes the run"
        )
        filed, created = escalations.add(view.saga_id, step.index, "resume-unknown", detail)
        if "resume-unknown" not in step.escalated:
            write(R.ESCALATED, {"kind": "resume-unknown", "detail": detail, "escalation": filed.id}, step.index)
        log.barrier()
        return Resumed("held", detail, escalation=filed if created else None)
    log.barrier()
    return None


def resume_claimed(view: SagaView, registered: Entry, log: WAL, escalations: EscalationsLike, *, by: str) -> Resumed:
    """Resume ``view`` (claimed by the caller, checked by :func:`blocker`) with ``registered``, writing to ``log``.

    The caller holds the saga's claim until this returns. A run that diverges or fails is unwound by
    its boundary, which raises ``SagaAborted`` (with the rollback's report) through this.
    """
    held = _settle(view, log, escalations, by)
    if held is not None:
        return held
    _, args, kwargs = _inputs(view)
    recorded = [r for r in map(_recorded, (view.steps[i] for i in sorted(view.steps))) if r is not None]
    replay = Replay(recorded, last_index=max(view.steps, default=0), by=by, waits=_waits(view))
    if registered.is_async:
        value = asyncio.run(run_async(registered, args, kwargs, saga_id=view.saga_id, wal=log, replay=replay))
    else:
        value = run_sync(registered, args, kwargs, saga_id=view.saga_id, wal=log, replay=replay)
    return Resumed("completed", f"resumed: {replay.served} of {replay.recorded} recorded step(s) served from the "
                   "log, the rest run live; completed", value)


def _resumer() -> str:
    return f"resume@{socket.gethostname()}:{os.getpid()}"


def resume(
    saga_id: str, *, wal: WAL | str | os.PathLike[str] | None = None, lease_grace: float = 5.0,
    clock: Callable[[], float] = time.time,
) -> Any:
    """Continue the crashed durable run ``saga_id`` forward; return what its entry point returns.

    ``wal``: its log (a WAL, a path or a URL; default the default log). The saga's owner must be
    gone: its lease run out, plus ``lease_grace`` seconds, at ``clock()``. An ``async def`` entry
    point is run with ``asyncio.run``, so call this from a thread when a loop runs here. Raises
    :class:`ResumeRefused` (one line; nothing ran) when it cannot resume, and ``SagaAborted`` when
    the resumed run diverged or failed and was unwound.
    """
    if not isinstance(saga_id, str) or not saga_id.strip():
        raise ResumeRefused(f"resume: saga_id must be a saga's id, got {saga_id!r}")
    log = log_of(wal)  # the default log when none is named, as the run itself used
    store = recovery_store(log if wal is None else wal)
    try:
        claim = store.try_claim(saga_id)
        if claim is None:
            raise ResumeRefused(
                f"saga {saga_id} is being resumed or recovered by another process right now (its claim on "
                f"{store.location} is held); nothing ran here"
            )
        ended = False
        try:
            log.barrier()  # what this process queued to the log is on disk before the log is read
            registered, view = _check(store, saga_id, lease_grace, clock)
            if registered.is_async and _loop_running():
                raise ResumeRefused(
                    f"saga {saga_id}'s entry {registered.name!r} is async and resume() runs it with asyncio.run, "
                    "which cannot run inside this running event loop: await asyncio.to_thread(resume, ...)"
                )
            try:
                outcome = resume_claimed(view, registered, log, store.escalations(), by=_resumer())
            except SagaAborted:
                ended = True  # diverged or failed: its boundary unwound it
                raise
            ended = outcome.ended
            if not ended:
                raise ResumeRefused(outcome.detail)
            return outcome.value
        finally:
            if ended:
                store.remove_lease(saga_id)  # the dead owner's lease file says nothing any more
            claim.release(remove=ended)
    finally:
        store.close()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _check(store: RecoveryStore, saga_id: str, lease_grace: float, clock: Callable[[], float]) -> tuple[Entry, SagaView]:
    """The saga's entry point and view, read under the claim, or ResumeRefused saying why not."""
    view = verified_tail(store, None, "a resume", ResumeRefused).sagas.get(saga_id)
    why = blocker(view, saga_id, store.location)
    if why is not None:
        raise ResumeRefused(why)
    assert view is not None
    live_until = owner_expiry(view, store.read_lease(saga_id)) + lease_grace
    now = clock()
    if now <= live_until:
        raise ResumeRefused(
            f"saga {saga_id} is live: its owner {inert(view.owner) or '?'} holds its lease for another "
            f"{live_until - now:.0f}s; stop that process, or wait for the lease to run out"
        )
    name = _inputs(view)[0]
    registered = entry(name)
    if registered is None:
        raise ResumeRefused(
            f"saga {saga_id}'s entry point {name!r} is not registered in this process: import the module that "
            f"defines @durable({name!r})"
        )
    return registered, view
