"""agent-saga: transactional side effects for AI agents.

Every tool call becomes a step of a saga with declared semantics and an undo
derived from its actual result; on failure the finished steps are undone
newest-first, and the report says exactly whether the unwind was clean.
"""

from agent_saga._version import __version__
from agent_saga.approvals import (
    ApprovalGateway,
    ApprovalPolicy,
    ConsoleNotifier,
    EscalationLevel,
    FileApprovalStore,
    RedisApprovalStore,
    WebhookNotifier,
)
from agent_saga.audit import (
    audit_root,
    build_disclosure,
    certify,
    export_bundle,
    verify_disclosure,
    verify_log,
)
from agent_saga.context import Boundary, SyncSaga, current_saga, saga_scope, set_default_gate
from agent_saga.decorators import guard, tool
from agent_saga.engine import (
    GatePort,
    Interceptor,
    RetryPolicy,
    RollbackReport,
    Saga,
    SagaInfo,
    StepOptions,
    StepOutcome,
    StepRequest,
    add_interceptor,
    remove_interceptor,
)
from agent_saga.errors import (
    BoundaryRequired,
    CompensationError,
    ConfigurationError,
    NonDeterminismError,
    NotApplied,
    SagaAborted,
    SagaClosed,
    SagaError,
    SagaQuarantined,
    StepRefused,
    ToolFailed,
    WALError,
    WALFull,
    WALStalled,
)
from agent_saga.fleet import SagaFleet
from agent_saga.gate import (
    ApprovalDecision,
    ApprovalProvider,
    ApprovalRequest,
    BreakerPolicy,
    BudgetLimit,
    CircuitBreaker,
    FileSwitchStore,
    KillSwitch,
    MemoryLimitStore,
    PreFlightGate,
    RateLimit,
    RedisBreakerStore,
    RedisLimitStore,
    RedisSwitchStore,
    Rule,
    StoreUnavailable,
    arg_exceeds,
    by_arg,
    by_tool,
    combine,
    install_default_gate,
    semantics_is,
    set_breaker,
    set_limit_store,
    set_switch,
    tool_is,
)
from agent_saga.isolation import (
    LockHeld,
    PostgresSemanticLocks,
    RedisSemanticLocks,
    SemanticLockManager,
    TentativeResource,
)
from agent_saga.kit import AgentKit
from agent_saga.log import WAL, FileWAL, MemoryWAL, default_wal, set_default_wal
from agent_saga.log.maintenance import compact, redact_record, redact_where
from agent_saga.log.postgres import PostgresWAL  # psycopg is imported when one is created
from agent_saga.log.redis import RedisWAL  # redis-py likewise
from agent_saga.log.resolve import open_log
from agent_saga.observability import configure_logging
from agent_saga.plugins.dispatch import wrap_tool
from agent_saga.plugins.patching import patch_all, unpatch_all
from agent_saga.proving import InvariantReport, RollbackProof, prove_rollback, verify_rollback_invariants
from agent_saga.recovery import RecoveryDaemon
from agent_saga.recovery.lease import install_leases
from agent_saga.recovery.server_leases import install_server_leases
from agent_saga.registry import (
    call_with,
    compensator,
    delete_by,
    inverse_of,
    reconciler,
    registered,
    resolve,
)
from agent_saga.semantics import ActionSemantics, Compensation, Observation, Outcome, StepState

# With no configuration, every saga still honours an operator's kill switch
# (agent-saga halt ...); PreFlightGate adds policy on top. See docs/GATE.md.
install_default_gate()
# ... and holds a lease while it runs, so a recovery daemon can tell a live saga from a dead one.
install_leases()
install_server_leases()  # the same, for sagas on a Postgres or Redis log (docs/FLEET.md)

#: ``@saga`` is ``@guard``: ``from agent_saga import saga`` then decorate a function.
saga = guard

# Names that need an extra, imported on first use so that ``import agent_saga`` never
# imports FastAPI or OpenTelemetry; without the extra the import error names it. They
# are not in ``__all__``: ``from agent_saga import *`` would fail without the extra.
_EXTRAS = {"saga_lifespan": "agent_saga.service.lifespan", "setup_telemetry": "agent_saga.observability.telemetry"}


def __getattr__(name: str) -> object:
    module = _EXTRAS.get(name)
    if module is None:
        raise AttributeError(f"module 'agent_saga' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXTRAS])

__all__ = [
    "WAL",
    "ActionSemantics",
    "AgentKit",
    "ApprovalDecision",
    "ApprovalGateway",
    "ApprovalPolicy",
    "ApprovalProvider",
    "ApprovalRequest",
    "Boundary",
    "BoundaryRequired",
    "BreakerPolicy",
    "BudgetLimit",
    "CircuitBreaker",
    "Compensation",
    "CompensationError",
    "ConfigurationError",
    "ConsoleNotifier",
    "EscalationLevel",
    "FileApprovalStore",
    "FileSwitchStore",
    "FileWAL",
    "GatePort",
    "Interceptor",
    "InvariantReport",
    "KillSwitch",
    "LockHeld",
    "MemoryLimitStore",
    "MemoryWAL",
    "NonDeterminismError",
    "NotApplied",
    "Observation",
    "Outcome",
    "PostgresSemanticLocks",
    "PostgresWAL",
    "PreFlightGate",
    "RateLimit",
    "RecoveryDaemon",
    "RedisApprovalStore",
    "RedisBreakerStore",
    "RedisLimitStore",
    "RedisSemanticLocks",
    "RedisSwitchStore",
    "RedisWAL",
    "RetryPolicy",
    "RollbackProof",
    "RollbackReport",
    "Rule",
    "Saga",
    "SagaAborted",
    "SagaClosed",
    "SagaError",
    "SagaFleet",
    "SagaInfo",
    "SagaQuarantined",
    "SemanticLockManager",
    "StepOptions",
    "StepOutcome",
    "StepRefused",
    "StepRequest",
    "StepState",
    "StoreUnavailable",
    "SyncSaga",
    "TentativeResource",
    "ToolFailed",
    "WALError",
    "WALFull",
    "WALStalled",
    "WebhookNotifier",
    "__version__",
    "add_interceptor",
    "arg_exceeds",
    "audit_root",
    "build_disclosure",
    "by_arg",
    "by_tool",
    "call_with",
    "certify",
    "combine",
    "compact",
    "compensator",
    "configure_logging",
    "current_saga",
    "default_wal",
    "delete_by",
    "export_bundle",
    "guard",
    "inverse_of",
    "open_log",
    "patch_all",
    "prove_rollback",
    "reconciler",
    "redact_record",
    "redact_where",
    "registered",
    "remove_interceptor",
    "resolve",
    "saga",
    "saga_scope",
    "semantics_is",
    "set_breaker",
    "set_default_gate",
    "set_default_wal",
    "set_limit_store",
    "set_switch",
    "tool",
    "tool_is",
    "unpatch_all",
    "verify_disclosure",
    "verify_log",
    "verify_rollback_invariants",
    "wrap_tool",
]
