"""agent-saga for the OpenAI Agents SDK: FunctionTools as saga steps, a run as one saga.

Also importable as ``agent_saga.adapters.openai_agents``.
"""

from agent_saga.adapter import require_framework

require_framework("agent-saga-openai-agents", "openai_agents")  # before anything imports the framework

from agent_saga_openai_agents._adapter import PlannedCalls, adapter, saga_run, saga_run_sync  # noqa: E402

wrap_tool = adapter.wrap_tool

__all__ = ["PlannedCalls", "adapter", "saga_run", "saga_run_sync", "wrap_tool"]
