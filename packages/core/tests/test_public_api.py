"""The public surface: pinned names, and an import that costs nothing extra."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import agent_saga

EXPECTED = {
    "WAL", "ActionSemantics", "AgentKit", "BoundaryRequired", "Compensation", "CompensationError",
    "ConfigurationError", "FileWAL", "GatePort", "MemoryWAL", "NonDeterminismError", "NotApplied",
    "Outcome", "RetryPolicy", "RollbackReport", "Saga", "SagaAborted", "SagaClosed", "SagaError",
    "SagaInfo", "SagaQuarantined", "StepOutcome", "StepRefused", "StepRequest", "StepState",
    "SyncSaga", "WALError", "WALFull", "WALStalled", "__version__", "call_with", "compensator",
    "current_saga", "default_wal", "delete_by", "guard", "inverse_of", "registered", "resolve",
    "saga", "saga_scope", "set_default_gate", "set_default_wal", "tool",
}
# The pre-flight gate (issue 8).
EXPECTED |= {
    "ApprovalDecision", "ApprovalProvider", "ApprovalRequest", "BreakerPolicy", "BudgetLimit",
    "CircuitBreaker", "FileSwitchStore", "KillSwitch", "MemoryLimitStore", "PreFlightGate", "RateLimit",
    "RedisBreakerStore", "RedisLimitStore", "RedisSwitchStore", "Rule", "StoreUnavailable", "arg_exceeds",
    "by_arg", "by_tool", "combine", "semantics_is", "set_breaker", "set_limit_store", "set_switch", "tool_is",
}

# Durable human approvals (issue 9).
EXPECTED |= {
    "ApprovalGateway", "ApprovalPolicy", "ConsoleNotifier", "EscalationLevel", "FileApprovalStore",
    "RedisApprovalStore", "WebhookNotifier",
}
# Plugins, patch_all and SagaFleet (issue 5).
EXPECTED |= {"SagaFleet", "patch_all", "unpatch_all"}
# The audit tools and log maintenance (issue 3), and recovery (issue 4).
EXPECTED |= {
    "audit_root", "build_disclosure", "certify", "compact", "export_bundle", "redact_record",
    "redact_where", "verify_disclosure", "verify_log", "RecoveryDaemon",
}
# Reconciliation: asking the outside system what really happened.
EXPECTED |= {"Observation", "reconciler"}
# Proving the rollback (issue 18).
EXPECTED |= {"InvariantReport", "RollbackProof", "prove_rollback", "verify_rollback_invariants"}
# One step, one boundary, observers in the engine (issue 14).
EXPECTED |= {"Boundary", "Interceptor", "StepOptions", "ToolFailed", "add_interceptor", "remove_interceptor"}
# The adapter kit's top-level face (issue 14): any framework's tool, through its adapter.
EXPECTED |= {"wrap_tool"}
# Running it in a service (issue 19); saga_lifespan and setup_telemetry need an extra, so they
# are imported on first use and stay out of __all__ (see test_service_extras.py).
EXPECTED |= {"configure_logging"}

# Beyond one machine: server logs and isolation countermeasures (issue 16).
EXPECTED |= {
    "LockHeld", "PostgresSemanticLocks", "PostgresWAL", "RedisSemanticLocks", "RedisWAL", "SemanticLockManager",
    "TentativeResource", "open_log",
}


def test_all_is_pinned() -> None:
    assert set(agent_saga.__all__) == EXPECTED
    assert len(agent_saga.__all__) == len(set(agent_saga.__all__))
    for name in agent_saga.__all__:
        assert hasattr(agent_saga, name), name


@pytest.mark.slow
def test_import_loads_no_third_party_module() -> None:
    # Compare before and after the import: site hooks of the environment (setuptools'
    # _distutils_hack, say) are loaded before any of our code runs.
    code = (
        "import sys, json\n"
        "before = set(sys.modules)\n"
        "import agent_saga\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print(json.dumps(sorted(new - set(sys.stdlib_module_names) - {'agent_saga'})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    extra = set(json.loads(out.stdout)) - {"pluggy"}
    assert extra == set(), f"import agent_saga pulled in {extra}"
