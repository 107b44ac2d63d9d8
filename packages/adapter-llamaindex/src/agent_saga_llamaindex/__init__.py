"""agent-saga for LlamaIndex: FunctionTools as saga steps, an agent run as one saga.

``wrap_tool`` returns a ``FunctionTool`` with the same metadata (name, description,
``fn_schema``); ``saga_run`` makes one agent run one transaction. Also importable as
``agent_saga.adapters.llamaindex``.
"""

from agent_saga.adapter import require_framework

require_framework("agent-saga-llamaindex", "llamaindex")  # before anything imports the framework

from agent_saga_llamaindex._adapter import PlannedCalls, adapter, saga_run  # noqa: E402

wrap_tool = adapter.wrap_tool

__all__ = ["PlannedCalls", "adapter", "saga_run", "wrap_tool"]
