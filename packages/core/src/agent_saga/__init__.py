"""agent-saga: transactional side effects for AI agents.

Every tool call becomes a step of a saga with declared semantics and an undo
derived from its actual result; on failure the finished steps are undone
newest-first, and the report says exactly whether the unwind was clean.
"""

from agent_saga._version import __version__
from agent_saga.approvals import (
    ApprovalGateway,
    ApprovalPolicy,
    EscalationLevel,
    FileApprovalStore,
    WebhookNotifier,
)
from agent_saga.audit import audit_root, build_disclosure, verify_disclosure
from agent_saga.context import Boundary, SyncSaga, current_saga, saga_scope, set_default_gate
from agent_saga.decorators import guard, tool
from agent_saga.engine import (
    GatePort,
    Interceptor,
    RetryPolicy,
    RollbackReport,
    Saga,
    SagaAborted,
    SagaOptions,
    StepOptions,
    StepOutcome,
    add_interceptor,
    remove_interceptor,
)
from agent_saga.errors import (
    BoundaryRequired,
    CompensationError,
    CompensationRefused,
    ConfigurationError,
    NonDeterminismError,
    NotApplied,
    RepairRequested,
    SagaClosed,
    SagaError,
    SagaQuarantined,
    SagaStopped,
    StepRefused,
    ToolFailed,
    WALError,
    WALFull,
    WALRefused,
    WALStalled,
)
from agent_saga.fleet import SagaFleet
from agent_saga.gate import (
    BreakerPolicy,
    BudgetLimit,
    CircuitBreaker,
    KillSwitch,
    PreFlightGate,
    RateLimit,
    StoreUnavailable,
    by_arg,
    by_tool,
    combine,
    install_default_gate,
    set_breaker,
)
from agent_saga.kit import AgentKit
from agent_saga.learning import FailureModel, build_corpus, counterfactual_replay
from agent_saga.log import (
    WAL,
    BaseWAL,
    FileWAL,
    MemoryWAL,
    PostgresWAL,
    RedisWAL,
    default_wal,
    open_log,
    set_default_wal,
    speedups_active,
)
from agent_saga.observability import configure_logging
from agent_saga.plugins.dispatch import wrap_tool
from agent_saga.plugins.patching import patch_all, unpatch_all
from agent_saga.proving import prove_rollback, verify_rollback_invariants
from agent_saga.recovery import RecoveryDaemon
from agent_saga.recovery.lease import install_leases
from agent_saga.recovery.server_leases import install_server_leases
from agent_saga.registry import call_with, compensator, delete_by, inverse_of, reconciler
from agent_saga.runtime import (
    CascadeExhausted,
    CascadeResult,
    ClaimStatus,
    ContextBroker,
    GroundingReport,
    OpenAICompatibleTier,
    Provenance,
    ProvenancePolicy,
    RepairPolicy,
    ThrashPolicy,
    Tier,
    TierAnswer,
    ToolCall,
    all_of,
    cascade,
    derived,
    ground,
    grounded,
    matches_schema,
    sourced,
    tools_must_exist,
    user_value,
)
from agent_saga.semantics import ActionSemantics, Compensation, Observation, Outcome, StepState
from agent_saga.synthetic import WALProfile, synthesize

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

# Names that 2.x exported here and 3.0 keeps in a sub-namespace only: the top level holds
# what a user of the quickstart needs, each sub-namespace the rest of its subject. A stale
# import fails with the name of the new home instead of a bare AttributeError.
_MOVED = {
    **dict.fromkeys(["ApprovalDecision", "ApprovalProvider", "ApprovalRequest", "FileSwitchStore",
                     "MemoryLimitStore", "RedisBreakerStore", "RedisLimitStore", "RedisSwitchStore", "Rule",
                     "SagaInfo", "StepRequest", "arg_exceeds", "semantics_is", "set_limit_store", "set_switch",
                     "tool_is"], "agent_saga.gate"),
    **dict.fromkeys(["ConsoleNotifier", "RedisApprovalStore"], "agent_saga.approvals"),
    **dict.fromkeys(["certify", "export_bundle", "verify_log"], "agent_saga.audit"),
    **dict.fromkeys(["compact", "redact_record", "redact_where"], "agent_saga.log"),
    **dict.fromkeys(["registered", "resolve"], "agent_saga.registry"),
    **dict.fromkeys(["LockHeld", "PostgresSemanticLocks", "RedisSemanticLocks", "SemanticLockManager",
                     "TentativeResource"], "agent_saga.isolation"),
    **dict.fromkeys(["InvariantReport", "RollbackProof"], "agent_saga.proving"),
}


def _missing_extra(name: str, missing: ImportError) -> object:
    """A stand-in for a name whose extra is not installed: it raises the install hint when called.

    Raising at attribute access broke ``help(agent_saga)`` (pydoc reads every name of
    ``dir()``) and made ``hasattr`` raise; the name exists, it only cannot run yet.
    """
    message = str(missing)

    def unavailable(*_args: object, **_kwargs: object) -> object:
        raise ImportError(message)

    unavailable.__name__ = unavailable.__qualname__ = name
    unavailable.__module__ = __name__
    unavailable.__doc__ = f"Not available in this environment: {message}"
    return unavailable


def __getattr__(name: str) -> object:
    module = _EXTRAS.get(name)
    if module is not None:
        import importlib

        try:
            return getattr(importlib.import_module(module), name)
        except ImportError as missing:  # the extra is not installed: report it when the name is used
            return _missing_extra(name, missing)
    home = _MOVED.get(name)
    if home is not None:
        raise AttributeError(f"agent_saga.{name} lives in {home} since 3.0: use `from {home} import {name}`")
    raise AttributeError(f"module 'agent_saga' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXTRAS])


__all__ = [
    "WAL",
    "ActionSemantics",
    "AgentKit",
    "ApprovalGateway",
    "ApprovalPolicy",
    "BaseWAL",
    "Boundary",
    "BoundaryRequired",
    "BreakerPolicy",
    "BudgetLimit",
    "CascadeExhausted",
    "CascadeResult",
    "CircuitBreaker",
    "ClaimStatus",
    "Compensation",
    "CompensationError",
    "CompensationRefused",
    "ConfigurationError",
    "ContextBroker",
    "EscalationLevel",
    "FailureModel",
    "FileApprovalStore",
    "FileWAL",
    "GatePort",
    "GroundingReport",
    "Interceptor",
    "KillSwitch",
    "MemoryWAL",
    "NonDeterminismError",
    "NotApplied",
    "Observation",
    "OpenAICompatibleTier",
    "Outcome",
    "PostgresWAL",
    "PreFlightGate",
    "Provenance",
    "ProvenancePolicy",
    "RateLimit",
    "RecoveryDaemon",
    "RedisWAL",
    "RepairPolicy",
    "RepairRequested",
    "RetryPolicy",
    "RollbackReport",
    "Saga",
    "SagaAborted",
    "SagaClosed",
    "SagaError",
    "SagaFleet",
    "SagaOptions",
    "SagaQuarantined",
    "SagaStopped",
    "StepOptions",
    "StepOutcome",
    "StepRefused",
    "StepState",
    "StoreUnavailable",
    "SyncSaga",
    "ThrashPolicy",
    "Tier",
    "TierAnswer",
    "ToolCall",
    "ToolFailed",
    "WALError",
    "WALFull",
    "WALProfile",
    "WALRefused",
    "WALStalled",
    "WebhookNotifier",
    "__version__",
    "add_interceptor",
    "all_of",
    "audit_root",
    "build_corpus",
    "build_disclosure",
    "by_arg",
    "by_tool",
    "call_with",
    "cascade",
    "combine",
    "compensator",
    "configure_logging",
    "counterfactual_replay",
    "current_saga",
    "default_wal",
    "delete_by",
    "derived",
    "ground",
    "grounded",
    "guard",
    "inverse_of",
    "matches_schema",
    "open_log",
    "patch_all",
    "prove_rollback",
    "reconciler",
    "remove_interceptor",
    "saga",
    "saga_scope",
    "set_breaker",
    "set_default_gate",
    "set_default_wal",
    "sourced",
    "speedups_active",
    "synthesize",
    "tool",
    "tools_must_exist",
    "unpatch_all",
    "user_value",
    "verify_disclosure",
    "verify_rollback_invariants",
    "wrap_tool",
]
