"""agent-saga for LangGraph: LangChain tools as saga steps, a graph run as one saga.

``wrap_tool`` returns a tool of the same type with the same name, description and
argument schema; ``saga_run`` makes one graph run one transaction. Also importable
as ``agent_saga.adapters.langgraph``.
"""

import importlib.util as _util

if _util.find_spec("langchain_core") is None:
    raise ImportError(
        "agent-saga-langgraph needs its framework, which is not installed: "
        "pip install 'agent-saga-langgraph[langgraph]'",
        name="agent_saga_langgraph",
    )

from agent_saga_langgraph.run import saga_run, saga_run_sync
from agent_saga_langgraph.wrapping import FRAMEWORK, wrap_tool, wrap_with_spec

__all__ = ["FRAMEWORK", "saga_run", "saga_run_sync", "wrap_tool", "wrap_with_spec"]
