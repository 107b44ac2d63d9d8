"""agent-saga for LangGraph: LangChain tools as saga steps, a graph run as one saga.

``wrap_tool`` returns a tool of the same type with the same name, description and
argument schema; ``saga_run`` makes one graph run one transaction; ``wrap_chat_model`` makes a
chat model's calls steps. Also importable
as ``agent_saga.adapters.langgraph``.
"""

from agent_saga.adapter import require_framework

require_framework("agent-saga-langgraph", "langgraph")  # before anything imports the framework

from agent_saga_langgraph._adapter import PlannedCalls, adapter, saga_run, saga_run_sync  # noqa: E402
from agent_saga_langgraph._models import SagaChatModel, wrap_chat_model  # noqa: E402

wrap_tool = adapter.wrap_tool

__all__ = ["PlannedCalls", "SagaChatModel", "adapter", "saga_run", "saga_run_sync", "wrap_chat_model", "wrap_tool"]
