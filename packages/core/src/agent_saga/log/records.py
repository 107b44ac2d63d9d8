"""The record model of the write-ahead log.

A record is one JSON object per line. Its *header* (``HEADER_FIELDS``) is what the
hash chain commits to and what survives redaction; its ``body`` is the payload,
committed to indirectly through a salted digest so that erasing the body (and its
salt) keeps the chain verifiable. The log knows record types, not sagas.
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = ["AUDIT_SAGA", "GENESIS", "HEADER_FIELDS", "Record", "RecordType"]

Record = dict[str, Any]

# The fields a record's chain hash covers, in canonical (sorted) order.
HEADER_FIELDS = ("digest", "prev", "saga", "seq", "step", "ts", "type")
GENESIS = "0" * 64  # ``prev`` of the first record of a log
# The saga id of records the log writes about itself (COMPACTION, REDACTION); no
# saga started through the engine can have an empty id.
AUDIT_SAGA = ""


class RecordType(enum.StrEnum):
    """Every kind of record the engine and its tools write."""

    SAGA_STARTED = "SAGA_STARTED"
    LEASE_RENEWED = "LEASE_RENEWED"
    STEP_REFUSED = "STEP_REFUSED"
    STEP_INTENT = "STEP_INTENT"
    STEP_COMMITTED = "STEP_COMMITTED"
    STEP_UNKNOWN = "STEP_UNKNOWN"
    STEP_NOT_APPLIED = "STEP_NOT_APPLIED"
    ROLLBACK_STARTED = "ROLLBACK_STARTED"
    COMPENSATION_STARTED = "COMPENSATION_STARTED"
    STEP_COMPENSATED = "STEP_COMPENSATED"
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    STEP_ORPHANED = "STEP_ORPHANED"
    STEP_UNRESOLVED = "STEP_UNRESOLVED"
    STEP_KEPT = "STEP_KEPT"
    STEP_UNPROTECTED = "STEP_UNPROTECTED"  # a tool ran with no declared semantics (observe mode)
    # Reconciliation (agent_saga.registry.reconciler): a question to the outside system and its answer.
    RECONCILE_ASKED = "RECONCILE_ASKED"
    RECONCILE_ANSWERED = "RECONCILE_ANSWERED"
    SAGA_COMPLETED = "SAGA_COMPLETED"
    SAGA_ROLLED_BACK = "SAGA_ROLLED_BACK"
    # The pre-flight gate (agent_saga.gate): breaker transitions and operator switches.
    BREAKER_TRIPPED = "BREAKER_TRIPPED"
    BREAKER_PROBE = "BREAKER_PROBE"
    BREAKER_RECOVERED = "BREAKER_RECOVERED"
    SWITCH_HALTED = "SWITCH_HALTED"
    SWITCH_DRAINED = "SWITCH_DRAINED"
    SWITCH_QUARANTINED = "SWITCH_QUARANTINED"
    SWITCH_RESUMED = "SWITCH_RESUMED"
    # Under the saga whose gate now obeys another kill switch (a setting changed mid-saga):
    SWITCH_POSTURE_CHANGED = "SWITCH_POSTURE_CHANGED"
    # Human approvals (agent_saga.approvals), under the saga and step that asked:
    APPROVAL_REQUESTED = "APPROVAL_REQUESTED"  # written before anyone is notified
    APPROVAL_ESCALATED = "APPROVAL_ESCALATED"  # the next level was asked; once per level
    APPROVAL_GRANTED = "APPROVAL_GRANTED"  # names the approver, the note, the args and the time
    APPROVAL_DENIED = "APPROVAL_DENIED"  # by a person, or by a failure (store, notifier): fail closed
    APPROVAL_EXPIRED = "APPROVAL_EXPIRED"  # the deadline passed with no decision; denies
    APPROVAL_BREAK_GLASS = "APPROVAL_BREAK_GLASS"  # an emergency grant, flagged requires_review
    # Written by the log's own maintenance (agent_saga.log.maintenance), never by a saga:
    COMPACTION = "COMPACTION"  # attests which sequences a compaction removed, and what they were
    REDACTION = "REDACTION"  # records that the bodies of some records were erased, by whom, why
    # Written by the recovery daemon (agent_saga.recovery) about a saga it took over:
    RECOVERY_CLAIMED = "RECOVERY_CLAIMED"  # a daemon found the owner's lease expired and took the saga
    ESCALATED = "ESCALATED"  # a step (or saga) was handed to the human queue; written once
    SAGA_DEAD_LETTERED = "SAGA_DEAD_LETTERED"  # a compensation kept failing; the daemon stops trying
    ESCALATION_RESOLVED = "ESCALATION_RESOLVED"  # a human closed an escalation
    # The accountable agent runtime (agent_saga.runtime), under the saga that asked:
    ANSWER_GROUNDED = "ANSWER_GROUNDED"  # grounding.ground(): each claim's status, reason and receipts
    # The cascade of model tiers (agent_saga.runtime._cascade): the whole ladder, failures included,
    # as one saga-level record whose body's "verdict" is the line `graph` and `ui` show.
    CASCADE_RESOLVED = "CASCADE_RESOLVED"  # a tier's answer passed verification and was returned
    CASCADE_EXHAUSTED = "CASCADE_EXHAUSTED"  # no tier passed; CascadeExhausted was raised
    # Issue 26 part 4, repair once and stop the thrash (agent_saga.runtime._repair_turn / .thrash):
    ACTION_REPAIR_REQUESTED = "ACTION_REPAIR_REQUESTED"  # a malformed call refused, the model gets one more try
    THRASH_STOPPED = "THRASH_STOPPED"  # the gate ended the saga on a repeated or oscillating call; names the pattern
    # Issue 28 part 4: an ADVISE gate rule's note on a step (a learned estimate); it refuses nothing.
    STEP_ADVISORY = "STEP_ADVISORY"
    # Issue 29 part 2: the first record of a merged mesh log (agent_saga.mesh): each device's head.
    MESH_MERGED = "MESH_MERGED"
    # Written by a service's SagaContextMiddleware (agent_saga.distributed) about itself, at most once
    # per window: how many compensation requests it refused since the last one, the latest's reason.
    COMPENSATIONS_REFUSED = "COMPENSATIONS_REFUSED"
    # Written by a mesh device into its own log (agent_saga.mesh): its key (at seq 1) and, later, a head
    # signed by that key. A hub merges a device's records only up to its last signed head.
    DEVICE_HEAD = "DEVICE_HEAD"
    # Issue 27 part 1, surgical repair (agent_saga.recovery.repair): an operator's session on a dead or
    # quarantined saga, under that saga's id; RESUMED names the saga that continues it (and ends this one).
    REPAIR_OPENED = "REPAIR_OPENED"  # who, why, and what is kept; the daemon leaves the saga alone
    REPAIR_AMENDED = "REPAIR_AMENDED"  # one field: its old value (and where it was seen) and its new one
    REPAIR_RESUMED = "REPAIR_RESUMED"  # the retained steps, with their undos, now belong to "continued_as"
    REPAIR_ABANDONED = "REPAIR_ABANDONED"  # handed back: the daemon unwinds the saga as usual
    # Issue 30 part 2 (agent_saga.runtime._speculation): the agent made a call whose result was
    # run ahead of it (REVERSIBLE only) and held behind a lease; the held result was used.
    SPECULATION_REDEEMED = "SPECULATION_REDEEMED"
    # Issue 41, resume forward (agent_saga.durable_run, agent_saga.recovery.resume): a crashed durable
    # run re-invoked under its own saga id; its recorded steps are served from the log, not run again.
    SAGA_RESUMED = "SAGA_RESUMED"  # who resumed it, how many steps were recorded; the new owner's lease
    SAGA_DIVERGED = "SAGA_DIVERGED"  # the re-invoked code asked for another call than the one recorded: unwound
    # Issue 41 part 5, durable timers and events (engine/waits.py: durable_sleep, wait_for_event; and
    # agent_saga.signal), under the run's saga. A wait is keyed by (wait, name, n): the n-th of that kind and name.
    WAIT_STARTED = "WAIT_STARTED"  # a durable sleep or event wait began: its key and wake-up time ("until")
    WAIT_ENDED = "WAIT_ENDED"  # "woke", "signalled" (+ the signal's seq), "timed_out": a resume answers the same
    EVENT_SIGNALLED = "EVENT_SIGNALLED"  # a named event's JSON data, sent to the saga by any process ("by")
    # A resumed run's call answered from the log (its recorded result, or its recorded failure): nothing ran.
    STEP_SERVED = "STEP_SERVED"  # under the recorded step's number: its position in the replay, the outcome served
    # A person's finding about a step in doubt that held a resume (recovery.settle), signed by an operator key.
    STEP_SETTLED = "STEP_SETTLED"  # operator, reason, landed; if it landed, the result and the undo built from it
