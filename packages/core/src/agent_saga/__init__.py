"""agent-saga: transactional side effects for AI agents.

Every tool call becomes a step of a saga with declared semantics and an undo
derived from its actual result; on failure the finished steps are undone
newest-first, and the report says exactly whether the unwind was clean.
"""

from agent_saga._version import __version__
from agent_saga.context import SyncSaga, current_saga, saga_scope, set_default_gate
from agent_saga.decorators import guard, tool
from agent_saga.engine import (
    GatePort,
    RetryPolicy,
    RollbackReport,
    Saga,
    SagaInfo,
    StepOutcome,
    StepRequest,
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
    WALError,
    WALFull,
    WALStalled,
)
from agent_saga.kit import AgentKit
from agent_saga.log import WAL, FileWAL, MemoryWAL, default_wal, set_default_wal
from agent_saga.registry import (
    call_with,
    compensator,
    delete_by,
    inverse_of,
    registered,
    resolve,
)
from agent_saga.semantics import ActionSemantics, Compensation, Outcome, StepState

#: ``@saga`` is ``@guard``: ``from agent_saga import saga`` then decorate a function.
saga = guard

__all__ = [
    "WAL",
    "ActionSemantics",
    "AgentKit",
    "BoundaryRequired",
    "Compensation",
    "CompensationError",
    "ConfigurationError",
    "FileWAL",
    "GatePort",
    "MemoryWAL",
    "NonDeterminismError",
    "NotApplied",
    "Outcome",
    "RetryPolicy",
    "RollbackReport",
    "Saga",
    "SagaAborted",
    "SagaClosed",
    "SagaError",
    "SagaInfo",
    "SagaQuarantined",
    "StepOutcome",
    "StepRefused",
    "StepRequest",
    "StepState",
    "SyncSaga",
    "WALError",
    "WALFull",
    "WALStalled",
    "__version__",
    "call_with",
    "compensator",
    "current_saga",
    "default_wal",
    "delete_by",
    "guard",
    "inverse_of",
    "registered",
    "resolve",
    "saga",
    "saga_scope",
    "set_default_gate",
    "set_default_wal",
    "tool",
]
