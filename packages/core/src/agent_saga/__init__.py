"""agent-saga: transactional side effects for AI agents.

Every tool call becomes a step of a saga with declared semantics and an undo
derived from its actual result; on failure the finished steps are undone
newest-first, and the report says exactly whether the unwind was clean.
"""

# ``import agent_saga`` imports nothing else of the package (issue 32: it took a quarter of a
# second, and the CLI, a hook or a worker that needs one name paid for all of them). Each public
# name is imported from its home module on first use (PEP 562 ``__getattr__`` below) and then
# kept here, so it is the very object its home module holds.
import sys as _sys

from agent_saga import boot as _boot
from agent_saga._version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing; type checkers know the name
if TYPE_CHECKING:  # what a type checker (and an IDE) sees: the same names, eagerly
    from agent_saga.approvals import ApprovalGateway as ApprovalGateway
    from agent_saga.approvals import ApprovalPolicy as ApprovalPolicy
    from agent_saga.approvals import EscalationLevel as EscalationLevel
    from agent_saga.approvals import FileApprovalStore as FileApprovalStore
    from agent_saga.approvals import WebhookNotifier as WebhookNotifier
    from agent_saga.arrays import SagaArray as SagaArray
    from agent_saga.arrays import array as array
    from agent_saga.audit import audit_root as audit_root
    from agent_saga.audit import build_disclosure as build_disclosure
    from agent_saga.audit import verify_disclosure as verify_disclosure
    from agent_saga.context import Boundary as Boundary
    from agent_saga.context import SyncSaga as SyncSaga
    from agent_saga.context import current_saga as current_saga
    from agent_saga.context import saga_scope as saga_scope
    from agent_saga.context import set_default_gate as set_default_gate
    from agent_saga.decorators import guard as guard
    from agent_saga.decorators import tool as tool
    from agent_saga.durable_run import durable as durable
    from agent_saga.durable_run import durable_sleep as durable_sleep
    from agent_saga.durable_run import durable_sleep_async as durable_sleep_async
    from agent_saga.durable_run import wait_for_event as wait_for_event
    from agent_saga.durable_run import wait_for_event_async as wait_for_event_async
    from agent_saga.engine import GatePort as GatePort
    from agent_saga.engine import Interceptor as Interceptor
    from agent_saga.engine import RetryPolicy as RetryPolicy
    from agent_saga.engine import RollbackReport as RollbackReport
    from agent_saga.engine import Saga as Saga
    from agent_saga.engine import SagaAborted as SagaAborted
    from agent_saga.engine import SagaOptions as SagaOptions
    from agent_saga.engine import StepOptions as StepOptions
    from agent_saga.engine import StepOutcome as StepOutcome
    from agent_saga.engine import add_interceptor as add_interceptor
    from agent_saga.engine import remove_interceptor as remove_interceptor
    from agent_saga.engine.tool_pool import ToolExecutorStats as ToolExecutorStats
    from agent_saga.engine.tool_pool import configure_tool_executor as configure_tool_executor
    from agent_saga.engine.tool_pool import tool_executor_stats as tool_executor_stats
    from agent_saga.errors import BoundaryRequired as BoundaryRequired
    from agent_saga.errors import CompensationError as CompensationError
    from agent_saga.errors import CompensationRefused as CompensationRefused
    from agent_saga.errors import ConfigurationError as ConfigurationError
    from agent_saga.errors import EventTimedOut as EventTimedOut
    from agent_saga.errors import NonDeterminismError as NonDeterminismError
    from agent_saga.errors import NotApplied as NotApplied
    from agent_saga.errors import RepairRequested as RepairRequested
    from agent_saga.errors import ResumeRefused as ResumeRefused
    from agent_saga.errors import SagaClosed as SagaClosed
    from agent_saga.errors import SagaError as SagaError
    from agent_saga.errors import SagaQuarantined as SagaQuarantined
    from agent_saga.errors import SagaStopped as SagaStopped
    from agent_saga.errors import SignalRefused as SignalRefused
    from agent_saga.errors import StepRefused as StepRefused
    from agent_saga.errors import ToolFailed as ToolFailed
    from agent_saga.errors import WALError as WALError
    from agent_saga.errors import WALFull as WALFull
    from agent_saga.errors import WALRefused as WALRefused
    from agent_saga.errors import WALStalled as WALStalled
    from agent_saga.fleet import SagaFleet as SagaFleet
    from agent_saga.gate import BreakerPolicy as BreakerPolicy
    from agent_saga.gate import BudgetLimit as BudgetLimit
    from agent_saga.gate import CircuitBreaker as CircuitBreaker
    from agent_saga.gate import KillSwitch as KillSwitch
    from agent_saga.gate import PreFlightGate as PreFlightGate
    from agent_saga.gate import RateLimit as RateLimit
    from agent_saga.gate import StoreUnavailable as StoreUnavailable
    from agent_saga.gate import by_arg as by_arg
    from agent_saga.gate import by_tool as by_tool
    from agent_saga.gate import combine as combine
    from agent_saga.gate import set_breaker as set_breaker
    from agent_saga.kit import AgentKit as AgentKit
    from agent_saga.learning import FailureModel as FailureModel
    from agent_saga.learning import build_corpus as build_corpus
    from agent_saga.learning import counterfactual_replay as counterfactual_replay
    from agent_saga.log import WAL as WAL
    from agent_saga.log import BaseWAL as BaseWAL
    from agent_saga.log import FileWAL as FileWAL
    from agent_saga.log import MemoryWAL as MemoryWAL
    from agent_saga.log import PostgresWAL as PostgresWAL
    from agent_saga.log import RedisWAL as RedisWAL
    from agent_saga.log import default_wal as default_wal
    from agent_saga.log import open_log as open_log
    from agent_saga.log import set_default_wal as set_default_wal
    from agent_saga.observability import configure_logging as configure_logging
    from agent_saga.plugins.dispatch import wrap_tool as wrap_tool
    from agent_saga.plugins.patching import patch_all as patch_all
    from agent_saga.plugins.patching import unpatch_all as unpatch_all
    from agent_saga.proving import prove_rollback as prove_rollback
    from agent_saga.proving import verify_rollback_invariants as verify_rollback_invariants
    from agent_saga.recovery import RecoveryDaemon as RecoveryDaemon
    from agent_saga.recovery.repair import RepairClosed as RepairClosed
    from agent_saga.recovery.repair import RepairRefused as RepairRefused
    from agent_saga.recovery.repair import RepairSession as RepairSession
    from agent_saga.recovery.resume import resume as resume
    from agent_saga.recovery.signals import signal as signal
    from agent_saga.registry import call_with as call_with
    from agent_saga.registry import compensator as compensator
    from agent_saga.registry import delete_by as delete_by
    from agent_saga.registry import inverse_of as inverse_of
    from agent_saga.registry import reconciler as reconciler
    from agent_saga.runtime import CascadeExhausted as CascadeExhausted
    from agent_saga.runtime import CascadeResult as CascadeResult
    from agent_saga.runtime import ClaimStatus as ClaimStatus
    from agent_saga.runtime import ContextBroker as ContextBroker
    from agent_saga.runtime import GroundingReport as GroundingReport
    from agent_saga.runtime import OpenAICompatibleTier as OpenAICompatibleTier
    from agent_saga.runtime import PatternPredictor as PatternPredictor
    from agent_saga.runtime import Provenance as Provenance
    from agent_saga.runtime import ProvenancePolicy as ProvenancePolicy
    from agent_saga.runtime import RepairPolicy as RepairPolicy
    from agent_saga.runtime import Speculator as Speculator
    from agent_saga.runtime import ThrashPolicy as ThrashPolicy
    from agent_saga.runtime import Tier as Tier
    from agent_saga.runtime import TierAnswer as TierAnswer
    from agent_saga.runtime import ToolCall as ToolCall
    from agent_saga.runtime import all_of as all_of
    from agent_saga.runtime import cascade as cascade
    from agent_saga.runtime import derived as derived
    from agent_saga.runtime import ground as ground
    from agent_saga.runtime import grounded as grounded
    from agent_saga.runtime import matches_schema as matches_schema
    from agent_saga.runtime import planned_calls as planned_calls
    from agent_saga.runtime import sourced as sourced
    from agent_saga.runtime import tools_must_exist as tools_must_exist
    from agent_saga.runtime import user_value as user_value
    from agent_saga.semantics import ActionSemantics as ActionSemantics
    from agent_saga.semantics import Compensation as Compensation
    from agent_saga.semantics import Observation as Observation
    from agent_saga.semantics import Outcome as Outcome
    from agent_saga.semantics import StepState as StepState
    from agent_saga.synthetic import WALProfile as WALProfile
    from agent_saga.synthetic import synthesize as synthesize

    saga = guard

# Every public name -> the module it lives in ("module:attribute" when it is named otherwise
# there). Adding a public name is one line here, plus its line in the TYPE_CHECKING block
# above (tests/test_import_time.py checks the two agree) and in tests/test_public_api.py.
_PUBLIC: dict[str, str] = {
    "ActionSemantics": "agent_saga.semantics",
    "add_interceptor": "agent_saga.engine",
    "AgentKit": "agent_saga.kit",
    "all_of": "agent_saga.runtime",
    "ApprovalGateway": "agent_saga.approvals",
    "ApprovalPolicy": "agent_saga.approvals",
    "array": "agent_saga.arrays",
    "audit_root": "agent_saga.audit",
    "BaseWAL": "agent_saga.log",
    "Boundary": "agent_saga.context",
    "BoundaryRequired": "agent_saga.errors",
    "BreakerPolicy": "agent_saga.gate",
    "BudgetLimit": "agent_saga.gate",
    "build_corpus": "agent_saga.learning",
    "build_disclosure": "agent_saga.audit",
    "by_arg": "agent_saga.gate",
    "by_tool": "agent_saga.gate",
    "call_with": "agent_saga.registry",
    "cascade": "agent_saga.runtime",
    "CascadeExhausted": "agent_saga.runtime",
    "CascadeResult": "agent_saga.runtime",
    "CircuitBreaker": "agent_saga.gate",
    "ClaimStatus": "agent_saga.runtime",
    "combine": "agent_saga.gate",
    "Compensation": "agent_saga.semantics",
    "CompensationError": "agent_saga.errors",
    "CompensationRefused": "agent_saga.errors",
    "compensator": "agent_saga.registry",
    "ConfigurationError": "agent_saga.errors",
    "configure_logging": "agent_saga.observability",
    "configure_tool_executor": "agent_saga.engine.tool_pool",
    "ContextBroker": "agent_saga.runtime",
    "counterfactual_replay": "agent_saga.learning",
    "current_saga": "agent_saga.context",
    "default_wal": "agent_saga.log",
    "delete_by": "agent_saga.registry",
    "durable": "agent_saga.durable_run",
    "durable_sleep": "agent_saga.durable_run",
    "durable_sleep_async": "agent_saga.durable_run",
    "derived": "agent_saga.runtime",
    "EscalationLevel": "agent_saga.approvals",
    "EventTimedOut": "agent_saga.errors",
    "FailureModel": "agent_saga.learning",
    "FileApprovalStore": "agent_saga.approvals",
    "FileWAL": "agent_saga.log",
    "GatePort": "agent_saga.engine",
    "ground": "agent_saga.runtime",
    "grounded": "agent_saga.runtime",
    "GroundingReport": "agent_saga.runtime",
    "guard": "agent_saga.decorators",
    "Interceptor": "agent_saga.engine",
    "inverse_of": "agent_saga.registry",
    "KillSwitch": "agent_saga.gate",
    "matches_schema": "agent_saga.runtime",
    "MemoryWAL": "agent_saga.log",
    "NonDeterminismError": "agent_saga.errors",
    "NotApplied": "agent_saga.errors",
    "Observation": "agent_saga.semantics",
    "open_log": "agent_saga.log",
    "OpenAICompatibleTier": "agent_saga.runtime",
    "Outcome": "agent_saga.semantics",
    "PatternPredictor": "agent_saga.runtime",
    "patch_all": "agent_saga.plugins.patching",
    "planned_calls": "agent_saga.runtime",
    "PostgresWAL": "agent_saga.log",
    "PreFlightGate": "agent_saga.gate",
    "prove_rollback": "agent_saga.proving",
    "Provenance": "agent_saga.runtime",
    "ProvenancePolicy": "agent_saga.runtime",
    "RateLimit": "agent_saga.gate",
    "reconciler": "agent_saga.registry",
    "RecoveryDaemon": "agent_saga.recovery",
    "RedisWAL": "agent_saga.log",
    "remove_interceptor": "agent_saga.engine",
    "RepairPolicy": "agent_saga.runtime",
    "RepairClosed": "agent_saga.recovery.repair",
    "RepairRefused": "agent_saga.recovery.repair",
    "RepairRequested": "agent_saga.errors",
    "RepairSession": "agent_saga.recovery.repair",
    "resume": "agent_saga.recovery.resume",
    "ResumeRefused": "agent_saga.errors",
    "RetryPolicy": "agent_saga.engine",
    "RollbackReport": "agent_saga.engine",
    "Saga": "agent_saga.engine",
    "saga": "agent_saga.decorators:guard",
    "saga_scope": "agent_saga.context",
    "SagaAborted": "agent_saga.engine",
    "SagaArray": "agent_saga.arrays",
    "SagaClosed": "agent_saga.errors",
    "SagaError": "agent_saga.errors",
    "SagaFleet": "agent_saga.fleet",
    "SagaOptions": "agent_saga.engine",
    "SagaQuarantined": "agent_saga.errors",
    "SagaStopped": "agent_saga.errors",
    "set_breaker": "agent_saga.gate",
    "set_default_gate": "agent_saga.context",
    "set_default_wal": "agent_saga.log",
    "signal": "agent_saga.recovery.signals",
    "SignalRefused": "agent_saga.errors",
    "sourced": "agent_saga.runtime",
    "Speculator": "agent_saga.runtime",
    "StepOptions": "agent_saga.engine",
    "StepOutcome": "agent_saga.engine",
    "StepRefused": "agent_saga.errors",
    "StepState": "agent_saga.semantics",
    "StoreUnavailable": "agent_saga.gate",
    "SyncSaga": "agent_saga.context",
    "synthesize": "agent_saga.synthetic",
    "ThrashPolicy": "agent_saga.runtime",
    "Tier": "agent_saga.runtime",
    "TierAnswer": "agent_saga.runtime",
    "tool": "agent_saga.decorators",
    "tool_executor_stats": "agent_saga.engine.tool_pool",
    "ToolCall": "agent_saga.runtime",
    "ToolExecutorStats": "agent_saga.engine.tool_pool",
    "ToolFailed": "agent_saga.errors",
    "tools_must_exist": "agent_saga.runtime",
    "unpatch_all": "agent_saga.plugins.patching",
    "user_value": "agent_saga.runtime",
    "verify_disclosure": "agent_saga.audit",
    "verify_rollback_invariants": "agent_saga.proving",
    "wait_for_event": "agent_saga.durable_run",
    "wait_for_event_async": "agent_saga.durable_run",
    "WAL": "agent_saga.log",
    "WALError": "agent_saga.errors",
    "WALFull": "agent_saga.errors",
    "WALProfile": "agent_saga.synthetic",
    "WALRefused": "agent_saga.errors",
    "WALStalled": "agent_saga.errors",
    "WebhookNotifier": "agent_saga.approvals",
    "wrap_tool": "agent_saga.plugins.dispatch",
}

# With no configuration, every saga still honours an operator's kill switch
# (agent-saga halt ...); PreFlightGate adds policy on top. See docs/GATE.md.
# ... and holds a lease while it runs, so a recovery daemon can tell a live saga from a dead
# one, on a file log and on a Postgres or Redis log (docs/FLEET.md). Installed before the
# first saga starts (agent_saga/boot.py), not at import. The kill switch is the gate wing's: the
# kernel run without its wings (tests/test_kernel_alone.py) has no default gate.
_boot.defer("agent_saga.gate._gate", "install_default_gate", wing="agent_saga.gate")
_boot.defer("agent_saga.recovery.lease", "install_leases")
_boot.defer("agent_saga.recovery.server_leases", "install_server_leases")

# Names that need an extra, imported on first use so that ``import agent_saga`` never
# imports FastAPI or OpenTelemetry; without the extra the import error names it. They
# are not in ``__all__``: ``from agent_saga import *`` would fail without the extra.
_EXTRAS = {"saga_lifespan": "agent_saga.service._lifespan", "setup_telemetry": "agent_saga.observability._telemetry"}

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
    from importlib import import_module

    home = _PUBLIC.get(name)
    if home is not None:
        module, _, attribute = home.partition(":")
        value = getattr(import_module(module), attribute or name)
        globals()[name] = value  # the next access is a plain global: no second lookup
        return value
    extra = _EXTRAS.get(name)
    if extra is not None:
        try:
            return getattr(import_module(extra), name)
        except ImportError as missing:  # the extra is not installed: report it when the name is used
            return _missing_extra(name, missing)
    moved = _MOVED.get(name)
    if moved is None and name.isidentifier() and not name.startswith("__"):
        # ``import agent_saga`` used to import the subpackages too, so ``agent_saga.gate.X``
        # worked without importing agent_saga.gate: a subpackage is still found by its name.
        try:
            return import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as missing:
            if missing.name != f"{__name__}.{name}":
                raise
    import sys

    from agent_saga._migrating import answer, refusal

    line = f"agent_saga.{name} lives in {moved} since 3.0: use `from {moved} import {name}`" if moved else answer(name)
    if line is None:
        raise AttributeError(f"module 'agent_saga' has no attribute {name!r}")
    raise refusal(name, line, sys._getframe(1))  # the frame that asked: ``from agent_saga import`` or not


class _GoneModules:
    """Last on ``sys.meta_path``: ``import agent_saga.tenant`` (a 2.x module) says what replaced it.

    Consulted only after every other finder found nothing, so it never shadows a real module; an
    unknown name still gets Python's own "No module named".
    """

    @staticmethod
    def find_spec(fullname: str, path: object = None, target: object = None) -> None:
        if fullname.startswith("agent_saga."):
            from agent_saga._migrating import module_answer

            line = module_answer(fullname)
            if line is not None:
                raise ModuleNotFoundError(line, name=fullname)


if not any(getattr(finder, "__module__", None) == __name__ for finder in _sys.meta_path):  # once, reloads too
    _sys.meta_path.append(_GoneModules)


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC, *_EXTRAS})


__all__ = ["__version__", *_PUBLIC]  # the table is the one list of public names
