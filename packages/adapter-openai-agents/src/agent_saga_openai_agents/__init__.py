"""agent-saga for the OpenAI Agents SDK: FunctionTools as saga steps, a run as one saga.

Also importable as ``agent_saga.adapters.openai_agents``.
"""

import importlib.util as _util

if _util.find_spec("agents") is None:
    raise ImportError(
        "agent-saga-openai-agents needs its framework, which is not installed: "
        "pip install 'agent-saga-openai-agents[openai_agents]'",
        name="agent_saga_openai_agents",
    )

from agent_saga_openai_agents.run import saga_run, saga_run_sync
from agent_saga_openai_agents.wrapping import FRAMEWORK, wrap_tool, wrap_with_spec

__all__ = ["FRAMEWORK", "saga_run", "saga_run_sync", "wrap_tool", "wrap_with_spec"]
