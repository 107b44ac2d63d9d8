"""agent-saga for CrewAI: CrewAI tools as saga steps, a crew run as one saga.

``wrap_tool`` returns a tool of the same type with the same name, description and
argument schema; ``saga_kickoff`` makes one crew run one transaction. Also
importable as ``agent_saga.adapters.crewai``.
"""

import importlib.util as _util

if _util.find_spec("crewai") is None:
    raise ImportError(
        "agent-saga-crewai needs its framework, which is not installed: "
        "pip install 'agent-saga-crewai[crewai]'",
        name="agent_saga_crewai",
    )

from agent_saga_crewai.run import saga_kickoff, saga_kickoff_async
from agent_saga_crewai.wrapping import FRAMEWORK, wrap_tool, wrap_with_spec

__all__ = ["FRAMEWORK", "saga_kickoff", "saga_kickoff_async", "wrap_tool", "wrap_with_spec"]
