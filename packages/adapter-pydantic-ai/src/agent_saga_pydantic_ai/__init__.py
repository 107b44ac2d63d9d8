"""agent-saga for Pydantic AI: function tools as saga steps, an ``Agent.run`` as one saga.

Also importable as ``agent_saga.adapters.pydantic_ai``.
"""

from agent_saga.adapter import require_framework

require_framework("agent-saga-pydantic-ai", "pydantic_ai")  # before anything imports the framework

from agent_saga_pydantic_ai._adapter import PlannedCalls, adapter, saga_run, saga_run_sync, wrap_tools  # noqa: E402

wrap_tool = adapter.wrap_tool

__all__ = ["PlannedCalls", "adapter", "saga_run", "saga_run_sync", "wrap_tool", "wrap_tools"]
