"""agent-saga for AG2: ``autogen.tools.Tool``s as saga steps, a chat as one saga.

Also importable as ``agent_saga.adapters.ag2``.
"""

from agent_saga.adapter import require_framework

require_framework("agent-saga-ag2", "ag2")  # before anything imports the framework

from agent_saga_ag2._adapter import PlannedCalls, adapter, saga_run, saga_run_sync  # noqa: E402

wrap_tool = adapter.wrap_tool

__all__ = ["PlannedCalls", "adapter", "saga_run", "saga_run_sync", "wrap_tool"]
