"""agent-saga for Agno: tool ``Function``s as saga steps, an agent run as one saga.

Also importable as ``agent_saga.adapters.agno``.
"""

from agent_saga.adapter import require_framework

require_framework("agent-saga-agno", "agno")  # before anything imports the framework

from agent_saga_agno._adapter import RunFailed, adapter, saga_run, saga_run_sync  # noqa: E402

wrap_tool = adapter.wrap_tool

__all__ = ["RunFailed", "adapter", "saga_run", "saga_run_sync", "wrap_tool"]
