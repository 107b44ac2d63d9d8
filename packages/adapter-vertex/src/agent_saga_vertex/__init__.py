"""agent-saga for Vertex AI and the Gemini Developer API through Google's Gen AI SDK (``google-genai``).

Automatic function calling's Python tools as saga steps, a model call (or a chat message) as
one saga. Also importable as ``agent_saga.adapters.vertex``.
"""

from agent_saga.adapter import require_framework

require_framework("agent-saga-vertex", "vertex")  # before anything imports the framework

from agent_saga_vertex._adapter import adapter, saga_run, saga_run_sync  # noqa: E402

wrap_tool = adapter.wrap_tool

__all__ = ["adapter", "saga_run", "saga_run_sync", "wrap_tool"]
