"""Pictures of what a log says happened: ``graph``, ``animate`` and ``viz``.

Every picture is drawn from :mod:`agent_saga.viz.model` (built on the recovery fold),
except the chain picture, which is drawn from the verifier (:mod:`agent_saga.audit`).
"""

from agent_saga.viz.animate import render_animation
from agent_saga.viz.chain import render_chain, render_chain_bytes
from agent_saga.viz.fleet import render_fleet
from agent_saga.viz.graph import to_dot, to_mermaid
from agent_saga.viz.model import GraphSaga, GraphStep, build, reconstruct
from agent_saga.viz.outcomes import render_outcomes
from agent_saga.viz.theme import THEMES

__all__ = [
    "THEMES",
    "GraphSaga",
    "GraphStep",
    "build",
    "reconstruct",
    "render_animation",
    "render_chain",
    "render_chain_bytes",
    "render_fleet",
    "render_outcomes",
    "to_dot",
    "to_mermaid",
]
