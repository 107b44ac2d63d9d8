"""The public surface: pinned names, and an import that costs nothing extra."""

from __future__ import annotations

import json
import subprocess
import sys

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


def test_all_is_pinned() -> None:
    assert set(agent_saga.__all__) == EXPECTED
    assert len(agent_saga.__all__) == len(set(agent_saga.__all__))
    for name in agent_saga.__all__:
        assert hasattr(agent_saga, name), name


def test_import_loads_no_third_party_module() -> None:
    code = (
        "import sys, json, agent_saga\n"
        "top = {m.split('.')[0] for m in sys.modules}\n"
        "print(json.dumps(sorted(top - set(sys.stdlib_module_names) - {'agent_saga'})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    extra = set(json.loads(out.stdout)) - {"__main__", "pluggy"}
    assert extra == set(), f"import agent_saga pulled in {extra}"
