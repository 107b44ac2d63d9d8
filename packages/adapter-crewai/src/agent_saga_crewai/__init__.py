"""agent-saga for CrewAI: CrewAI tools as saga steps, a crew run as one saga.

``wrap_tool`` returns a tool of the same type with the same name, description and
argument schema; ``saga_kickoff`` makes one crew run one transaction. Also
importable as ``agent_saga.adapters.crewai``.
"""

from agent_saga.adapter import require_framework

require_framework("agent-saga-crewai", "crewai")  # before anything imports the framework

from agent_saga_crewai._adapter import PlannedCalls, adapter, saga_kickoff, saga_kickoff_async  # noqa: E402

wrap_tool = adapter.wrap_tool

__all__ = ["PlannedCalls", "adapter", "saga_kickoff", "saga_kickoff_async", "wrap_tool"]
