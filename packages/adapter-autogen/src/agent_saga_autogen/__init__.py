"""agent-saga for AutoGen: tools as saga steps, an agent or team run as one saga.

``wrap_tool`` returns a tool of the same type with the same name, description and
schema, and carries the saga onto the executor thread where AutoGen runs sync
tools; ``saga_run`` makes one run one transaction. Also importable as
``agent_saga.adapters.autogen``.
"""

import importlib.util as _util

if _util.find_spec("autogen_core") is None:
    raise ImportError(
        "agent-saga-autogen needs its framework, which is not installed: "
        "pip install 'agent-saga-autogen[autogen]'",
        name="agent_saga_autogen",
    )

from agent_saga_autogen.run import saga_run
from agent_saga_autogen.wrapping import FRAMEWORK, wrap_tool, wrap_with_spec

__all__ = ["FRAMEWORK", "saga_run", "wrap_tool", "wrap_with_spec"]
