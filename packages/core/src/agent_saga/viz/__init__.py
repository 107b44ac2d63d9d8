"""Pictures of what a log says happened (``agent-saga graph``)."""

from agent_saga.viz.graph import GraphSaga, GraphStep, build, to_dot, to_mermaid

__all__ = ["GraphSaga", "GraphStep", "build", "to_dot", "to_mermaid"]
