"""agent-saga for AutoGen: tools as saga steps, an agent or team run as one saga.

``wrap_tool`` returns a tool of the same type with the same name, description and
schema, and carries the saga onto the executor thread where AutoGen runs sync
tools; ``saga_run`` makes one run one transaction. Also importable as
``agent_saga.adapters.autogen``.
"""

from agent_saga.adapter import require_framework

require_framework("agent-saga-autogen", "autogen")  # before anything imports the framework

from agent_saga_autogen._adapter import PlannedCalls, adapter, saga_run  # noqa: E402

wrap_tool = adapter.wrap_tool

__all__ = ["PlannedCalls", "adapter", "saga_run", "wrap_tool"]
