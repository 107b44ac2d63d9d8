"""agent-saga for LlamaIndex: FunctionTools as saga steps, an agent run as one saga.

Also importable as ``agent_saga.adapters.llamaindex``.
"""

import importlib.util as _util

if _util.find_spec("llama_index") is None:
    raise ImportError(
        "agent-saga-llamaindex needs its framework, which is not installed: "
        "pip install 'agent-saga-llamaindex[llamaindex]'",
        name="agent_saga_llamaindex",
    )

from agent_saga_llamaindex.run import saga_run
from agent_saga_llamaindex.wrapping import FRAMEWORK, wrap_tool, wrap_with_spec

__all__ = ["FRAMEWORK", "saga_run", "wrap_tool", "wrap_with_spec"]
