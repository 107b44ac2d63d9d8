"""agent-saga for Google's Agent Development Kit: ``FunctionTool``s as saga steps, a run as one saga, model turns as steps.

Also importable as ``agent_saga.adapters.google_adk``.
"""

from agent_saga.adapter import require_framework

require_framework("agent-saga-google-adk", "google_adk")  # before anything imports the framework

from agent_saga_google_adk._adapter import PlannedCalls, adapter, saga_run, saga_run_sync  # noqa: E402
from agent_saga_google_adk._models import SagaLlm, wrap_llm  # noqa: E402

wrap_tool = adapter.wrap_tool

__all__ = ["PlannedCalls", "SagaLlm", "adapter", "saga_run", "saga_run_sync", "wrap_llm", "wrap_tool"]
