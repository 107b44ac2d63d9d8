"""The saga engine: one state machine, a sync and an async face."""

from agent_saga.engine.ports import GatePort, SagaInfo, StepRequest
from agent_saga.engine.report import RollbackReport, StepOutcome
from agent_saga.engine.retry import RetryPolicy
from agent_saga.engine.saga import Saga, SagaStatus, Step

__all__ = [
    "GatePort",
    "RetryPolicy",
    "RollbackReport",
    "Saga",
    "SagaInfo",
    "SagaStatus",
    "Step",
    "StepOutcome",
    "StepRequest",
]
