"""What ``agent_saga.<name>`` answers for a name the 2.x line exported and 3.x does not.

Taken from docs/MIGRATING.md's table (``tests/test_migrating.py`` keeps the two equal): each
2.x name, its 2.x module, and what 3.x has instead. Plus the names the old README used that never
had a defined behaviour: they get this one line, never an invented one.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import CodeType, FrameType

from agent_saga._bytecode import BYTECODE_KNOWN

__all__ = ["GONE", "NEVER_DEFINED", "answer", "gone_names", "module_answer", "refusal"]

#: 2.x name -> (its 2.x module, what 3.x has instead), as docs/MIGRATING.md's table says.
GONE: dict[str, tuple[str, str]] = {
    "describe_guarantees": ("agent_saga.agentkit", "agent_saga.AgentKit.guarantees"),
    "SlackBlockKitApp": ("agent_saga.slack_app", "removed: no counterpart"),
    "TenantContext": ("agent_saga.tenant", "removed: no counterpart"),
    "get_current_tenant": ("agent_saga.tenant", "removed: no counterpart"),
    "set_current_tenant": ("agent_saga.tenant", "removed: no counterpart"),
    "SagaCloudClient": ("agent_saga.cloud", "removed: no counterpart"),
    "SafetyCertificate": ("agent_saga.certify", "removed: no counterpart"),
    "SafetyFinding": ("agent_saga.certify", "removed: no counterpart"),
    "certify_rollback_safety": ("agent_saga.certify", "agent_saga.audit.certify_log"),
    "MerkleAuditTree": ("agent_saga.provenance", "agent_saga.audit_root, agent_saga.build_disclosure"),
    "DisclosureResult": ("agent_saga.provenance", "removed: no counterpart"),
    "SchemaContractError": ("agent_saga.schemas", "removed: no counterpart"),
    "validate_schema": ("agent_saga.schemas", "removed: no counterpart"),
    "ChaosRunner": ("agent_saga.testing", "removed: no counterpart"),
    "ChaosResult": ("agent_saga.testing", "removed: no counterpart"),
    "verify_saga_replay": ("agent_saga.testing", "removed: no counterpart"),
    "SagaEngine": ("agent_saga.config", "removed: no counterpart"),
    "SagaConfig": ("agent_saga.config", "removed: no counterpart"),
    "SagaConfigError": ("agent_saga.config", "removed: no counterpart"),
    "KeyRingEncryptor": ("agent_saga.encryption", "agent_saga.log.crypto.AESGCMEncryptor"),
    "AutoLockHeartbeat": ("agent_saga.locks", "removed: no counterpart"),
    "IncrementalCompensationTracker": ("agent_saga.streaming", "removed: no counterpart"),
    "streaming_step": ("agent_saga.streaming", "removed: no counterpart"),
    "OTLPExporter": ("agent_saga.observability.otlp", "removed: no counterpart"),
    "SelfHealingPromptFeedback": ("agent_saga.feedback", "removed: no counterpart"),
    "SelfHealingLoop": ("agent_saga.feedback", "removed: no counterpart"),
    "HealingOutcome": ("agent_saga.feedback", "removed: no counterpart"),
    "DurableTimerManager": ("agent_saga.scheduler", "removed: no counterpart"),
    "TimerCancelled": ("agent_saga.scheduler", "removed: no counterpart"),
    "CronSagaScheduler": ("agent_saga.scheduler", "removed: no counterpart"),
    "SignalBus": ("agent_saga.signals", "removed: no counterpart"),
    "QueryBus": ("agent_saga.signals", "removed: no counterpart"),
    "get_signal_bus": ("agent_saga.signals", "removed: no counterpart"),
    "get_query_bus": ("agent_saga.signals", "removed: no counterpart"),
    "ChildSaga": ("agent_saga.orchestrator", "removed: no counterpart"),
    "ParallelSagaGroup": ("agent_saga.orchestrator", "removed: no counterpart"),
    "BPMNExporter": ("agent_saga.bpmn", "removed: no counterpart"),
    "BPMNImporter": ("agent_saga.bpmn", "removed: no counterpart"),
    "BPMNNode": ("agent_saga.bpmn", "removed: no counterpart"),
    "ReplayVerifier": ("agent_saga.determinism", "removed: no counterpart"),
    "verify_replay_determinism": ("agent_saga.determinism", "removed: no counterpart"),
    "DeterminismResult": ("agent_saga.determinism", "removed: no counterpart"),
    "AsyncWAL": ("agent_saga.wal", "removed: no counterpart"),
    "BackpressurePolicy": ("agent_saga.wal", "removed: no counterpart"),
    "WALBackpressure": ("agent_saga.wal", "removed: no counterpart"),
    "DanglingSaga": ("agent_saga.recovery", "removed: no counterpart"),
    "DanglingStep": ("agent_saga.recovery", "removed: no counterpart"),
    "Decision": ("agent_saga.gate", "removed: no counterpart"),
    "RecoveryOutcome": ("agent_saga.recovery", "removed: no counterpart"),
    "Resolution": ("agent_saga.recovery", "removed: no counterpart"),
    "parse_wal": ("agent_saga.recovery", "agent_saga.recovery.fold"),
    "recovery_token": ("agent_saga.recovery", "removed: no counterpart"),
    "GateContext": ("agent_saga.gate", "removed: no counterpart"),
    "EmbeddingRiskScorer": ("agent_saga.gate", "removed: no counterpart"),
    "PreFlightViolation": ("agent_saga.gate", "agent_saga.StepRefused (every gate refusal)"),
    "SagaContext": ("agent_saga.context", "removed: no counterpart"),
    "SagaStep": ("agent_saga.semantics", "removed: no counterpart"),
    "Verdict": (
        "agent_saga.gate",
        "removed: no counterpart (agent_saga.proving.Verdict is another thing: a rollback proof's verdict)",
    ),
    "verify_chain": ("agent_saga.integrity", "agent_saga.audit.verify_log"),
    "CircuitOpen": ("agent_saga.breaker", "agent_saga.StepRefused (every gate refusal)"),
    "InProcessBreakerStore": ("agent_saga.breaker", "removed: no counterpart"),
    "get_breaker": ("agent_saga.breaker", "agent_saga.gate.get_breaker (moved)"),
    "Reconciliation": ("agent_saga.reconcile", "removed: no counterpart"),
    "ReconcileReport": ("agent_saga.reconcile", "removed: no counterpart"),
    "Finding": ("agent_saga.reconcile", "agent_saga.reconciliation.Finding (moved)"),
    "Halted": ("agent_saga.killswitch", "agent_saga.StepRefused (every gate refusal)"),
    "get_kill_switch": ("agent_saga.killswitch", "agent_saga.gate.default_switch"),
    "set_kill_switch": ("agent_saga.killswitch", "agent_saga.gate.set_switch"),
    "PostgresApprovalStore": ("agent_saga.approvals", "removed: no counterpart"),
    "TeamsNotifier": ("agent_saga.approvals", "removed: no counterpart"),
    "DiscordNotifier": ("agent_saga.approvals", "removed: no counterpart"),
    "ChainReport": ("agent_saga.integrity", "agent_saga.audit.VerifyReport"),
    "export_worm": ("agent_saga.integrity", "agent_saga.audit.export_bundle"),
    "redact_path": ("agent_saga.integrity", "removed: no counterpart"),
    "LimitExceeded": ("agent_saga.limits", "agent_saga.StepRefused (every gate refusal)"),
    "LimitMisconfigured": ("agent_saga.limits", "removed: no counterpart"),
    "InProcessLimitStore": ("agent_saga.limits", "removed: no counterpart"),
    "get_limit_store": ("agent_saga.limits", "agent_saga.gate.get_limit_store (moved)"),
    "AttributeSnapshot": ("agent_saga.snapshot", "removed: no counterpart"),
    "MappingSnapshot": ("agent_saga.snapshot", "removed: no counterpart"),
    "SequenceSnapshot": ("agent_saga.snapshot", "removed: no counterpart"),
    "SetSnapshot": ("agent_saga.snapshot", "removed: no counterpart"),
    "SnapshotStrategy": ("agent_saga.snapshot", "removed: no counterpart"),
    "auto_strategy": ("agent_saga.snapshot", "removed: no counterpart"),
    "reversible": ("agent_saga.snapshot", "removed: no counterpart"),
    "FileSnapshotStore": ("agent_saga.durable", "removed: no counterpart"),
    "SnapshotStore": ("agent_saga.durable", "removed: no counterpart"),
    "StaleFile": ("agent_saga.durable", "removed: no counterpart"),
    "get_snapshot_store": ("agent_saga.durable", "removed: no counterpart"),
    "restore_file": ("agent_saga.durable", "removed: no counterpart"),
    "set_snapshot_store": ("agent_saga.durable", "removed: no counterpart"),
    "snapshot_file": ("agent_saga.durable", "removed: no counterpart"),
    "GCReport": ("agent_saga.gc", "removed: no counterpart"),
    "SnapshotGC": ("agent_saga.gc", "removed: no counterpart"),
    "IdempotencyManager": ("agent_saga.idempotency", "removed: no counterpart"),
    "BoundedExecutor": (
        "agent_saga.executors",
        "removed: one tool pool per process, sized by agent_saga.configure_tool_executor",
    ),
    "get_tool_executor": (
        "agent_saga.executors",
        "removed: one tool pool per process, observed by agent_saga.tool_executor_stats",
    ),
    "set_tool_executor": (
        "agent_saga.executors",
        "removed: one tool pool per process, sized by agent_saga.configure_tool_executor",
    ),
    "EncryptedRecordError": ("agent_saga.encryption", "removed: no counterpart"),
    "FernetEncryptor": (
        "agent_saga.encryption",
        "agent_saga.log.crypto.AESGCMEncryptor (AES-GCM; 2.x Fernet records are not read)",
    ),
    "WALEncryptor": ("agent_saga.encryption", "removed: no counterpart"),
    "generate_key": ("agent_saga.encryption", "agent_saga.log.crypto.generate_key (moved)"),
    "get_wal_encryptor": ("agent_saga.encryption", "removed: no counterpart"),
    "set_wal_encryptor": ("agent_saga.encryption", "removed: no counterpart"),
    "FileLock": ("agent_saga.locks", "removed: no counterpart"),
    "InProcessLock": ("agent_saga.locks", "removed: no counterpart"),
    "RecoveryLock": ("agent_saga.locks", "removed: no counterpart"),
    "SemanticLockConflictError": ("agent_saga.locks", "agent_saga.isolation.LockHeld"),
    "LockAcquisitionTimeoutError": ("agent_saga.locks", "removed: no counterpart"),
    "get_semantic_locks": ("agent_saga.locks", "removed: no counterpart"),
    "set_semantic_locks": ("agent_saga.locks", "removed: no counterpart"),
    "FileLedger": ("agent_saga.ledger", "agent_saga.recovery.FileLedger (moved)"),
    "InMemoryLedger": ("agent_saga.ledger", "agent_saga.recovery.Ledger (no in-memory ledger ships)"),
    "RecoveryLedger": ("agent_saga.ledger", "agent_saga.recovery.Ledger, agent_saga.recovery.FileLedger"),
    "TentativeStatus": ("agent_saga.patterns", "removed: no counterpart"),
    "tentative": ("agent_saga.patterns", "removed: no counterpart"),
    "CorrelationFilter": ("agent_saga.observability", "agent_saga.observability.CorrelationFilter (moved)"),
    "JsonFormatter": ("agent_saga.observability", "agent_saga.observability.JsonFormatter (moved)"),
    "TextFormatter": ("agent_saga.observability", "agent_saga.observability.TextFormatter (moved)"),
    "current_correlation": ("agent_saga.observability", "removed: no counterpart"),
    "get_tracer": ("agent_saga.observability.otel", "removed: no counterpart"),
    "SagaTracer": ("agent_saga.observability.otel", "removed: no counterpart"),
    "LangChainSagaCallback": ("agent_saga.observability.langchain", "removed: no counterpart"),
    "NoOpTracer": ("agent_saga.observability.otel", "removed: no counterpart"),
    "SagaJSONEncoder": ("agent_saga.serialization", "removed: no counterpart"),
    "saga_dumps": ("agent_saga.serialization", "removed: no counterpart"),
    "saga_loads": ("agent_saga.serialization", "removed: no counterpart"),
    "RealityAnchor": ("agent_saga.hallucination", "removed: no counterpart"),
    "GroundingFact": ("agent_saga.hallucination", "removed: no counterpart"),
    "SelfCorrectingLoop": ("agent_saga.hallucination", "removed: no counterpart"),
    "HallucinationDetected": ("agent_saga.hallucination", "removed: no counterpart"),
    "HealingPath": ("agent_saga.healing", "removed: no counterpart"),
    "SelfHealingGraph": ("agent_saga.healing", "removed: no counterpart"),
    "SpeculativeEngine": ("agent_saga.speculative", "removed: no counterpart"),
    "StateSnapshot": ("agent_saga.speculative", "removed: no counterpart"),
    "EntangledNode": ("agent_saga.entanglement", "removed: no counterpart"),
    "EntanglementMatrix": ("agent_saga.entanglement", "removed: no counterpart"),
    "EntanglementPropagator": ("agent_saga.propagation", "removed: no counterpart"),
    "UMIPRegistry": ("agent_saga.umip", "removed: no counterpart"),
    "Participant": ("agent_saga.umip", "removed: no counterpart"),
    "UMIPConformanceError": ("agent_saga.umip", "removed: no counterpart"),
    "merge_wals": ("agent_saga.mesh", "removed: no counterpart"),
    "verify_merged": ("agent_saga.mesh", "removed: no counterpart"),
    "record_identity": ("agent_saga.mesh", "removed: no counterpart"),
    "MergeReport": ("agent_saga.mesh", "removed: no counterpart"),
    "HardwareApprovalProvider": ("agent_saga.hardware", "removed: no counterpart"),
    "ActionChallenge": ("agent_saga.hardware", "removed: no counterpart"),
    "action_digest": ("agent_saga.hardware", "agent_saga.approvals._authority.action_digest (moved)"),
    "PredictiveExecutor": ("agent_saga.predictive", "removed: no counterpart"),
    "Speculation": ("agent_saga.predictive", "removed: no counterpart"),
    "SpeculationRefused": ("agent_saga.predictive", "removed: no counterpart"),
    "PredictiveSentinel": ("agent_saga.sentinel", "removed: no counterpart"),
    "SemanticOutputVerifier": ("agent_saga.ai_engine", "removed: no counterpart"),
    "VerifiedOutput": ("agent_saga.ai_engine", "removed: no counterpart"),
    "ContextSanitizer": ("agent_saga.ai_engine", "removed: no counterpart"),
    "LoopEntropyDetector": ("agent_saga.ai_engine", "removed: no counterpart"),
    "UniversalToolAdapter": ("agent_saga.ai_engine", "removed: no counterpart"),
    "InvariantRule": ("agent_saga.mission_critical", "removed: no counterpart"),
    "MissionCriticalGate": ("agent_saga.mission_critical", "removed: no counterpart"),
    "MissionCriticalViolation": ("agent_saga.mission_critical", "removed: no counterpart"),
    "TripleRedundantVerifier": ("agent_saga.mission_critical", "removed: no counterpart"),
}

#: Named by the 2.x README with no defined behaviour: 3.x has nothing to offer in their place.
NEVER_DEFINED = frozenset({"omni", "learn", "create_future_agent"})


def answer(name: str) -> str | None:
    """The one line ``agent_saga.<name>`` raises for a 2.x name, or None if ``name`` is not one."""
    if name in NEVER_DEFINED:
        return (f"agent_saga.{name} was named by the agent-saga 2.x README but never had a defined behaviour; "
                "3.x has no counterpart (docs/MIGRATING.md)")
    gone = GONE.get(name)
    if gone is None:
        return None
    module, instead = gone
    return f"agent_saga.{name} was exported by agent-saga 2.x ({module}); in 3.x: {instead} (docs/MIGRATING.md)"


def module_answer(module: str) -> str | None:
    """The one line ``import <module>`` raises for a 2.x module 3.x lacks, or None if it is not one.

    Asked only once no finder found ``module`` (``agent_saga._GoneModules`` is last on
    ``sys.meta_path``), so a module 3.x still has (``agent_saga.gate``) is never answered here.
    """
    became: dict[str, list[str]] = {}
    for name, (home, instead) in GONE.items():
        if home == module:
            became.setdefault(instead, []).append(name)
    if not became:
        return None
    what = "; ".join(f"{', '.join(names)}: {instead}" for instead, names in became.items())
    return f"{module} was a module of agent-saga 2.x and 3.x has none; its names in 3.x: {what} (docs/MIGRATING.md)"


def gone_names(module: str) -> Callable[[str], object]:
    """The ``__getattr__`` of a module 3.x still has (``agent_saga.recovery``).

    A name 2.x exported from that very module raises its line (``from agent_saga.recovery import
    DanglingSaga`` names what replaced it); any other name, Python's own AttributeError.
    """

    def attribute(name: str) -> object:
        gone = GONE.get(name)
        if gone is None or gone[0] != module:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        line = f"{module}.{name} was exported by agent-saga 2.x; in 3.x: {gone[1]} (docs/MIGRATING.md)"
        raise refusal(name, line, sys._getframe(1))  # the frame that asked: ``from ... import`` or not

    return attribute


# ``from agent_saga import X`` is recognised from the importing frame's instruction
# (``IMPORT_FROM``) on the interpreters whose bytecode _bytecode.PROVEN_BYTECODE lists. Anywhere
# else every caller gets the AttributeError, which such an import turns into Python's bare
# "cannot import name": the line is lost, nothing else changes.
_BYTECODE_KNOWN = BYTECODE_KNOWN


@functools.lru_cache(maxsize=256)
def _imports_from_at(code: CodeType, lasti: int) -> bool:
    import dis  # only once a 2.x name is asked for: the modules that import this one stay light

    return any(i.offset == lasti and i.opname == "IMPORT_FROM" for i in dis.get_instructions(code))


def refusal(name: str, line: str, caller: FrameType | None) -> Exception:
    """What ``agent_saga.<name>`` raises with ``line``, for the frame ``caller`` that asked.

    Python replaces an AttributeError raised for ``from agent_saga import X`` with its own
    "cannot import name 'X'", which drops the line; an ImportError reaches the importer as it
    is. So that statement gets an ImportError (what it raises anyway), every other access
    (``agent_saga.X``, ``getattr``, ``hasattr``) the AttributeError.
    """
    if _BYTECODE_KNOWN and caller is not None and _imports_from_at(caller.f_code, caller.f_lasti):
        return ImportError(line, name=name)
    return AttributeError(line)
