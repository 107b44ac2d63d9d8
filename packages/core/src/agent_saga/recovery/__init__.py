"""Crash recovery: fold a log into saga states, and the daemon that finishes dead sagas.

Leases say which sagas still have a live owner, claims keep daemons from working
one saga twice, the ledger keeps compensations exactly-once across daemons and
crashes, and the escalation queue holds what only a human may decide.
See docs/RECOVERY.md.
"""

from agent_saga.recovery.claims import Claim, try_claim
from agent_saga.recovery.daemon import Action, RecoveryDaemon, SweepReport
from agent_saga.recovery.determinism import check_replay, check_step
from agent_saga.recovery.escalations import Escalation, EscalationQueue
from agent_saga.recovery.fold import LogTail, SagaView, StepView, fold
from agent_saga.recovery.lease import Lease, LeaseKeeper, configure_leases, read_lease, recovery_dir
from agent_saga.recovery.ledger import FileLedger, KeyState, Ledger

__all__ = [
    "Action",
    "Claim",
    "Escalation",
    "EscalationQueue",
    "FileLedger",
    "KeyState",
    "Lease",
    "LeaseKeeper",
    "Ledger",
    "LogTail",
    "RecoveryDaemon",
    "SagaView",
    "StepView",
    "SweepReport",
    "check_replay",
    "check_step",
    "configure_leases",
    "fold",
    "read_lease",
    "recovery_dir",
    "try_claim",
]
