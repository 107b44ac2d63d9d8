"""The pre-flight gate: kill switch, circuit breaker, spend and rate limits, rules, approvals.

Everything here runs before a step's side effect, where refusing costs nothing.
``import agent_saga`` installs :class:`DefaultGate` (kill switch only) for sagas
that are not given a gate; build a :class:`PreFlightGate` for policy. Every kill
switch obeys the host's own store (:mod:`agent_saga.gate.host`); ``switch_posture``
says so, or says why not, for a saga's start record. The Redis stores import
redis-py only when one is created.
"""

from typing import TYPE_CHECKING

from agent_saga._migrating import gone_names
from agent_saga.engine.ports import GatePort, SagaInfo, StepRequest
from agent_saga.gate._approval import ApprovalDecision, ApprovalProvider, ApprovalRequest
from agent_saga.gate._breaker import (
    BreakerPolicy,
    BreakerStore,
    CircuitBreaker,
    LocalBreakerStore,
    get_breaker,
    set_breaker,
)
from agent_saga.gate._gate import DefaultGate, PreFlightGate, install_default_gate
from agent_saga.gate._limits import BudgetLimit, Limit, RateLimit
from agent_saga.gate._redis_store import RedisBreakerStore, RedisLimitStore, RedisSwitchStore
from agent_saga.gate._rules import Action, Condition, Rule, arg_exceeds, semantics_is, tool_is
from agent_saga.gate._scopes import by_arg, by_tool, combine, everything
from agent_saga.gate._stores import (
    LimitStore,
    MemoryLimitStore,
    StoreUnavailable,
    get_limit_store,
    set_limit_store,
)
from agent_saga.gate._switch import (
    FileSwitchStore,
    Halt,
    KillSwitch,
    Quarantine,
    SwitchState,
    SwitchStore,
    default_switch,
    set_switch,
    switch_posture,
)

__all__ = [
    "Action",
    "ApprovalDecision",
    "ApprovalProvider",
    "ApprovalRequest",
    "BreakerPolicy",
    "BreakerStore",
    "BudgetLimit",
    "CircuitBreaker",
    "Condition",
    "DefaultGate",
    "FileSwitchStore",
    "GatePort",
    "Halt",
    "KillSwitch",
    "Limit",
    "LimitStore",
    "LocalBreakerStore",
    "MemoryLimitStore",
    "PreFlightGate",
    "Quarantine",
    "RateLimit",
    "RedisBreakerStore",
    "RedisLimitStore",
    "RedisSwitchStore",
    "Rule",
    "SagaInfo",
    "StepRequest",
    "StoreUnavailable",
    "SwitchState",
    "SwitchStore",
    "arg_exceeds",
    "by_arg",
    "by_tool",
    "combine",
    "default_switch",
    "everything",
    "get_breaker",
    "get_limit_store",
    "install_default_gate",
    "semantics_is",
    "set_breaker",
    "set_limit_store",
    "set_switch",
    "switch_posture",
    "tool_is",
]

if not TYPE_CHECKING:  # at run time only: mypy still refuses a name this module lacks
    __getattr__ = gone_names(__name__)  # a 2.x name of this module says what 3.x has instead
