"""Gates the proxy tests load with ``--gate saga_test_gates:budget``."""

from __future__ import annotations

from agent_saga.gate import BudgetLimit, PreFlightGate

__all__ = ["budget"]


def budget() -> PreFlightGate:
    # Sums "spent", which only policy_args supplies (from the call's "amount"): a proxy
    # that ignored policy_args would have every charge refused for lack of the argument.
    return PreFlightGate(limits=[BudgetLimit("mcp-spend", arg="spent", max_total=10, window=3600)])
