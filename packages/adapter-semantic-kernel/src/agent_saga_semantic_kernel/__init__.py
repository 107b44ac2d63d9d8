"""agent-saga for Semantic Kernel: kernel functions as saga steps, taken by a filter.

``wrap_tool`` / ``wrap_plugin`` mark functions as steps (same type and metadata);
``saga_filter`` (a function-invocation filter) takes the step on the kernel's own
invocation path; ``saga_run`` / ``saga_invoke`` make one agent response or kernel
call one transaction. Also importable as ``agent_saga.adapters.semantic_kernel``.
"""

import importlib.util as _util

if _util.find_spec("semantic_kernel") is None:
    raise ImportError(
        "agent-saga-semantic-kernel needs its framework, which is not installed: "
        "pip install 'agent-saga-semantic-kernel[semantic_kernel]'",
        name="agent_saga_semantic_kernel",
    )

from agent_saga_semantic_kernel.filtering import FRAMEWORK, install, saga_filter
from agent_saga_semantic_kernel.run import saga_invoke, saga_run
from agent_saga_semantic_kernel.wrapping import wrap_plugin, wrap_tool, wrap_with_spec

__all__ = ["FRAMEWORK", "install", "saga_filter", "saga_invoke", "saga_run", "wrap_plugin", "wrap_tool",
           "wrap_with_spec"]
