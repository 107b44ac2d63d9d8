"""agent-saga for Semantic Kernel: kernel functions as saga steps, an agent response as one saga.

``wrap_tool`` / ``wrap_plugin`` make kernel functions steps (same type and metadata) that
work inside any saga boundary; ``saga_filter`` (a function-invocation filter, which
``saga_run``, ``saga_invoke``, ``install`` and ``patch_all`` add) takes the step on the
kernel's own pipeline instead. Also importable as ``agent_saga.adapters.semantic_kernel``.
"""

from agent_saga.adapter import require_framework

require_framework("agent-saga-semantic-kernel", "semantic_kernel")  # before anything imports the framework

from agent_saga_semantic_kernel._adapter import (  # noqa: E402
    adapter,
    install,
    planned_filter,
    saga_filter,
    saga_invoke,
    saga_run,
    wrap_plugin,
)

wrap_tool = adapter.wrap_tool

__all__ = ["adapter", "install", "planned_filter", "saga_filter", "saga_invoke", "saga_run", "wrap_plugin", "wrap_tool"]
