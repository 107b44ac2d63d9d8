"""Crash recovery: fold a log into saga states, and the daemon that finishes dead sagas.

Leases say which sagas still have a live owner, claims keep daemons from working
one saga twice, the ledger keeps compensations exactly-once across daemons and
crashes, and the escalation queue holds what only a human may decide.
See docs/RECOVERY.md.
"""

from typing import TYPE_CHECKING

from agent_saga._migrating import gone_names
from agent_saga.recovery.claims import Claim, try_claim
from agent_saga.recovery.daemon import Action, RecoveryDaemon, SweepReport
from agent_saga.recovery.determinism import check_replay, check_step
from agent_saga.recovery.escalations import Escalation, EscalationQueue, escalate_rollback
from agent_saga.recovery.fold import LogTail, SagaView, StepView, fold
from agent_saga.recovery.jsonl import JournalCorrupt
from agent_saga.recovery.lease import Lease, LeaseKeeper, LeaseLifecycle, configure_leases, read_lease
from agent_saga.recovery.ledger import FileLedger, KeyState, Ledger
from agent_saga.recovery.paths import recovery_dir
from agent_saga.recovery.repair import RepairClosed, RepairPlan, RepairRefused, RepairSession, RetainedStep

__all__ = [
    "Action",
    "Claim",
    "Escalation",
    "EscalationQueue",
    "FileLedger",
    "JournalCorrupt",
    "KeyState",
    "Lease",
    "LeaseKeeper",
    "LeaseLifecycle",
    "Ledger",
    "LogTail",
    "RecoveryDaemon",
    "RepairClosed",
    "RepairPlan",
    "RepairRefused",
    "RepairSession",
    "RetainedStep",
    "SagaView",
    "StepView",
    "SweepReport",
    "check_replay",
    "check_step",
    "configure_leases",
    "escalate_rollback",
    "fold",
    "read_lease",
    "recovery_dir",
    "try_claim",
]

if not TYPE_CHECKING:  # at run time only: mypy still refuses a name this module lacks
    __getattr__ = gone_names(__name__)  # a 2.x name of this module says what 3.x has instead
