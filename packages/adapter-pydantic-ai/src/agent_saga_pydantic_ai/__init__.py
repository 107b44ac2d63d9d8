"""agent-saga for Pydantic AI: function tools as saga steps, an ``Agent.run`` as one saga, model requests as steps.

Also importable as ``agent_saga.adapters.pydantic_ai``.
"""

from agent_saga.adapter import require_framework

require_framework("agent-saga-pydantic-ai", "pydantic_ai")  # before anything imports the framework

from agent_saga_pydantic_ai._adapter import PlannedCalls, adapter, saga_run, saga_run_sync, wrap_tools  # noqa: E402
from agent_saga_pydantic_ai._models import SagaModel, wrap_model  # noqa: E402

wrap_tool = adapter.wrap_tool

__all__ = ["PlannedCalls", "SagaModel", "adapter", "saga_run", "saga_run_sync", "wrap_model", "wrap_tool", "wrap_tools"]
