"""The saga engine: one state machine, a sync and an async face."""

from agent_saga.engine.observe import (
    Interceptor,
    RollbackEvent,
    SagaEnd,
    SagaEvent,
    StepEnd,
    StepEvent,
    add_interceptor,
    remove_interceptor,
)
from agent_saga.engine.ports import GatePort, SagaInfo, StepRequest
from agent_saga.engine.report import RollbackReport, SagaAborted, StepOutcome
from agent_saga.engine.retry import RetryPolicy
from agent_saga.engine.saga import Saga, SagaStatus, Step
from agent_saga.engine.saga_options import SagaKwargs, SagaOptions
from agent_saga.engine.step_options import StepKwargs, StepOptions

__all__ = [
    "GatePort",
    "Interceptor",
    "RetryPolicy",
    "RollbackEvent",
    "RollbackReport",
    "Saga",
    "SagaAborted",
    "SagaEnd",
    "SagaEvent",
    "SagaInfo",
    "SagaKwargs",
    "SagaOptions",
    "SagaStatus",
    "Step",
    "StepEnd",
    "StepEvent",
    "StepKwargs",
    "StepOptions",
    "StepOutcome",
    "StepRequest",
    "add_interceptor",
    "remove_interceptor",
]
