"""agent-saga for Strands Agents: ``@tool`` functions as saga steps, an agent invocation as one saga.

Also importable as ``agent_saga.adapters.strands``.
"""

from agent_saga.adapter import require_framework

require_framework("agent-saga-strands", "strands")  # before anything imports the framework

from agent_saga_strands._adapter import PlannedCalls, adapter, saga_run, saga_run_sync  # noqa: E402

wrap_tool = adapter.wrap_tool

__all__ = ["PlannedCalls", "adapter", "saga_run", "saga_run_sync", "wrap_tool"]
