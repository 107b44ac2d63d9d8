"""The accountable agent runtime (issue 26): checks of why and how an agent acts, on the gate and the log."""

from agent_saga.runtime.repair import RepairPolicy
from agent_saga.runtime.schema import argument_check
from agent_saga.runtime.thrash import ThrashPolicy, canonical_args

__all__ = ["RepairPolicy", "ThrashPolicy", "argument_check", "canonical_args"]
