"""Proving the rollback: fail a workflow at every step and check the world, and check the engine's
own invariants over every failure shape up to a bound, sibling calls in flight included (their
orderings forced, not sampled). See docs/PROVING.md."""

from agent_saga.proving._concurrent_verify import ConcurrentReport, verify_concurrent_invariants
from agent_saga.proving._injection import FailureMode, InjectedFailure
from agent_saga.proving._invariants import (
    INVARIANTS,
    Counterexample,
    InvariantReport,
    verify_rollback_invariants,
)
from agent_saga.proving._proof import Probe, RollbackProof, Verdict, prove_rollback

__all__ = [
    "INVARIANTS",
    "ConcurrentReport",
    "Counterexample",
    "FailureMode",
    "InjectedFailure",
    "InvariantReport",
    "Probe",
    "RollbackProof",
    "Verdict",
    "prove_rollback",
    "verify_concurrent_invariants",
    "verify_rollback_invariants",
]
